"""Reads a Tripod sharded checkpoint (tripod train --save ROOT) with numpy alone: the manifest and
every logical tensor's parameters and AdamW moments, assembled from whichever ranks wrote them.

    manifest, state = read_checkpoint("runs/ckpt")          # a root (its latest) or a step directory
    state["param"]["wte.weight"]                             # float64 array of the logical shape

The format is described in reference/ckpt/manifest.h and reference/ckpt/shard_file.h. Every shard
file is checked as the C++ reader checks it before its values are used: its size, its header (magic,
version, rank, step), each block's place inside the file and the tensor, and, where Python has
`xxhash` (Debian's python3-xxhash, which ci/setup.sh installs), the file's and each block's XXH64.
Before, a flipped byte or another rank's shard read as values, silently. A damaged checkpoint raises
ValueError naming the file (and the tensor)."""
import json
import struct
from pathlib import Path

import numpy as np

try:
    import xxhash
except ImportError:  # the GPU machine's Python: sizes, headers and bounds are still checked
    xxhash = None

KINDS = ("param", "adam_m", "adam_v")
ELEMENT_BYTES = {"bf16": 2, "fp32": 4, "fp64": 8}
HEADER = struct.Struct("<8sIIq40x")  # magic, version, rank, step, zeros: 64 bytes


def checkpoint_dir(path):
    """The step directory `path` names: itself, a root's latest, or the root's `latest` file itself."""
    path = Path(path)
    if path.name == "latest" and path.is_file():
        path = path.parent
    if (path / "manifest.json").exists():
        return path
    latest = path / "latest"
    if not latest.exists():
        raise FileNotFoundError(f"{path} is neither a checkpoint (manifest.json) nor a checkpoint root (latest)")
    return path / latest.read_text().strip()


def _checked_shard(directory, entry, manifest):
    """The bytes of one shard file, after the checks the C++ reader makes (ValueError names it)."""
    path = directory / entry["name"]
    data = path.read_bytes()
    if len(data) != entry["bytes"]:
        raise ValueError(f"{path}: {len(data)} bytes, the manifest records {entry['bytes']}")
    magic, version, rank, step = HEADER.unpack_from(data)
    if (magic, version, rank, step) != (b"TRIPODCK", manifest["version"], entry["rank"], manifest["step"]):
        raise ValueError(f"{path}: its header ({magic!r}, version {version}, rank {rank}, step {step}) is not "
                         f"rank {entry['rank']}'s shard of step {manifest['step']}")
    for block in entry["blocks"]:
        where = f"{path}: tensor '{block['tensor']}' ({block['kind']})"
        if block["tensor"] not in manifest["tensors"] or block["kind"] not in KINDS:
            raise ValueError(f"{where}: not a tensor of the manifest")
        size = block["length"] * block["count"] * ELEMENT_BYTES[block["dtype"]]
        if block["offset"] < HEADER.size or block["offset"] + size > len(data):
            raise ValueError(f"{where}: bytes {block['offset']}..{block['offset'] + size} lie outside the file")
        last = block["start"] + block["stride"] * (block["count"] - 1) + block["length"]
        if block["start"] < 0 or last > int(np.prod(manifest["tensors"][block["tensor"]])):
            raise ValueError(f"{where}: elements {block['start']}..{last} lie outside the tensor")
        if xxhash is not None and xxhash.xxh64(data[block["offset"]:block["offset"] + size]).hexdigest() != block["xxh64"]:
            raise ValueError(f"{where}: damaged (bytes {block['offset']}..{block['offset'] + size})")
    # Last, so that damage inside a block is named by its tensor; this catches the rest (the padding).
    if xxhash is not None and xxhash.xxh64(data).hexdigest() != entry["xxh64"]:
        raise ValueError(f"{path}: XXH64 {xxhash.xxh64(data).hexdigest()}, the manifest records {entry['xxh64']}")
    return data


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
        data = _checked_shard(directory, entry, manifest)
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
