"""Plain IEEE float32 matmuls in PyTorch, on every version the peers meet.

TF32 rounds matmul inputs to 10 mantissa bits (~1e-3 relative), far beyond Tripod's fp32 tolerance
(1e-5), so a peer that claims fp32 must turn it off. PyTorch 2.9 added per-backend
`fp32_precision` settings ("ieee" or "tf32") and deprecated `allow_tf32` (a warning on every run,
mixing the two is not supported); before 2.9 only `allow_tf32` exists, and asking the old modules
for an unknown setting raises AssertionError, not AttributeError. So try the new names first and
fall back, per backend, and report which was used.
"""


def _try_ieee(module):
    """Sets module.fp32_precision = 'ieee' where that setting exists; says whether it did."""
    if module is None:
        return False
    try:
        module.fp32_precision = "ieee"
        return True
    except (AttributeError, AssertionError):
        return False


def ieee_fp32(torch):
    """Turns TF32 off for cuBLAS matmuls and cuDNN convolutions; returns the settings made, in words."""
    made = []
    if _try_ieee(torch.backends.cuda.matmul):
        made.append("cuda.matmul.fp32_precision='ieee'")
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        made.append("cuda.matmul.allow_tf32=False")
    if _try_ieee(getattr(torch.backends.cudnn, "conv", None)):
        made.append("cudnn.conv.fp32_precision='ieee'")
    else:
        torch.backends.cudnn.allow_tf32 = False
        made.append("cudnn.allow_tf32=False")
    return ", ".join(made)
