"""Reads a Tripod sharded checkpoint (tripod train --save ROOT) with numpy alone: the manifest and
every logical tensor's parameters and AdamW moments, assembled from whichever ranks wrote them.

    manifest, state = read_checkpoint("runs/ckpt")          # a root (its latest) or a step directory
    state["param"]["wte.weight"]                             # float64 array of the logical shape

The format is described in reference/ckpt/manifest.h and reference/ckpt/shard_file.h."""
import json
from pathlib import Path

import numpy as np

KINDS = ("param", "adam_m", "adam_v")


def checkpoint_dir(path):
    """The step directory `path` names: itself, or a root's latest."""
    path = Path(path)
    if (path / "manifest.json").exists():
        return path
    latest = path / "latest"
    if not latest.exists():
        raise FileNotFoundError(f"{path} is neither a checkpoint (manifest.json) nor a checkpoint root (latest)")
    return path / latest.read_text().strip()


def _values(data, block):
    n = block["length"] * block["count"]
    if block["dtype"] == "bf16":
        raw = np.frombuffer(data, dtype="<u2", count=n, offset=block["offset"]).astype(np.uint32) << 16
        return raw.view(np.float32).astype(np.float64)
    dtype = {"fp32": "<f4", "fp64": "<f8"}[block["dtype"]]
    return np.frombuffer(data, dtype=dtype, count=n, offset=block["offset"]).astype(np.float64)


def read_checkpoint(path):
    """(manifest dict, {kind: {tensor: float64 array}}); raises if any element is missing."""
    directory = checkpoint_dir(path)
    manifest = json.loads((directory / "manifest.json").read_text())
    flat = {kind: {name: np.zeros(int(np.prod(shape))) for name, shape in manifest["tensors"].items()}
            for kind in KINDS}
    # which elements some block wrote (a NaN value is a value: an earlier Tripod saved diverged states)
    written = {kind: {name: np.zeros(values.size, dtype=bool) for name, values in tensors.items()}
               for kind, tensors in flat.items()}
    for entry in manifest["files"]:
        data = (directory / entry["name"]).read_bytes()
        for block in entry["blocks"]:
            rows = block["start"] + block["stride"] * np.arange(block["count"])[:, None]
            index = (rows + np.arange(block["length"])[None, :]).ravel()
            flat[block["kind"]][block["tensor"]][index] = _values(data, block)
            written[block["kind"]][block["tensor"]][index] = True
    state = {}
    for kind, tensors in flat.items():
        state[kind] = {}
        for name, values in tensors.items():
            if not written[kind][name].all():
                raise ValueError(f"{directory}: {kind} of {name} is not fully written")
            state[kind][name] = values.reshape(manifest["tensors"][name])
    return manifest, state
