"""PyTorch peers for golden bundles (reports/FORMATS.md): the GPT-2 a PyTorch user writes
(gpt2.py), trained from a bundle in one process (single.py) or under DistributedDataParallel
(ddp.py), writing peer results for `tripod golden check`. They are the templates for other
frameworks (Megatron-LM, DeepSpeed, torchtitan): see single.py for what a peer must match."""
