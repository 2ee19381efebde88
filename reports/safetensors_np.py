"""A minimal safetensors reader/writer on numpy + json (Debian ships no `safetensors` package).

Written independently of Tripod's C++ reader so that the Python suites also cross-check the file
format: a layout the C++ side gets wrong fails here. Used by the suites (suites/python), the golden
check (reports/golden) and the PyTorch peers (reports/peers); needs only numpy.
Format: u64 little-endian header length N, N bytes of JSON, then the raw little-endian data.
"""
import json
import os
import struct

import numpy as np

# BF16 has no numpy dtype: it is read as its raw uint16 bits (to_float32 widens it).
_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"), "BF16": np.dtype("<u2")}
_NAMES = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<i4"): "I32"}


class SafetensorsError(ValueError):
    pass


def _read_header(path, blob_prefix, file_size):
    """(header dict without __metadata__, metadata, data start) from the file's first bytes."""
    if file_size < 8:
        raise SafetensorsError(f"{path}: {file_size} bytes, shorter than the header length")
    (n,) = struct.unpack("<Q", blob_prefix[:8])
    if n > file_size - 8:
        raise SafetensorsError(f"{path}: header length {n} runs past the end of the file")

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise SafetensorsError(f"{path}: duplicate key in header")
        return dict(pairs)

    try:
        header = json.loads(bytes(blob_prefix[8:8 + n]).decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid JSON ({e})") from e
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    for name, info in header.items():
        if not (isinstance(info, dict) and {"dtype", "shape", "data_offsets"} <= set(info)):
            raise SafetensorsError(f"{path}: tensor '{name}' lacks dtype, shape or data_offsets")
    return header, dict(metadata), 8 + n


def header(path):
    """{name: (dtype name, shape)} in file order, reading only the header (cheap for large files)."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) == 8:
            prefix += f.read(min(struct.unpack("<Q", prefix)[0], max(size - 8, 0)))
    entries, _, _ = _read_header(path, prefix, size)
    entries = sorted(entries.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return {name: (info["dtype"], tuple(int(d) for d in info["shape"])) for name, info in entries}


def load(path):
    """Returns ({name: ndarray} in file order, {metadata}); raises SafetensorsError naming the path."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        blob = f.read()
    header_, metadata, start = _read_header(path, memoryview(blob), len(blob))
    data = memoryview(blob)[start:]
    entries = sorted(header_.items(), key=lambda kv: kv[1]["data_offsets"][0])
    tensors, expected = {}, 0
    for name, info in entries:
        if info["dtype"] not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {info['dtype']}")
        dtype, shape = _DTYPES[info["dtype"]], tuple(int(d) for d in info["shape"])
        begin, end = info["data_offsets"]
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if begin != expected or end - begin != size or end > len(data):
            raise SafetensorsError(f"{path}: tensor '{name}' has bad data_offsets [{begin}, {end}] "
                                   f"(expected [{expected}, {expected + size}], data is {len(data)} bytes)")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).copy()
        expected = end
    if expected != len(data):
        raise SafetensorsError(f"{path}: {len(data) - expected} bytes after the last tensor")
    return tensors, dict(metadata)


def save(path, tensors, metadata=None):
    """Writes {name: ndarray} (F32, F64 or I32) in the given order, via a temporary file + rename."""
    path = os.fspath(path)
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, array in tensors.items():
        array = np.asarray(array)  # (not ascontiguousarray: it turns 0-d into 1-d)
        dtype = array.dtype.newbyteorder("<")
        if dtype not in _NAMES:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {array.dtype}")
        raw = array.astype(dtype, copy=False).tobytes()
        header[name] = {"dtype": _NAMES[dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as Hugging Face writes it
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
    os.replace(tmp, path)


def to_float32(bf16_bits):
    """Widens raw BF16 bits (uint16) to float32: BF16 is the top half of an IEEE float32."""
    return (bf16_bits.astype(np.uint32) << 16).view(np.float32)
