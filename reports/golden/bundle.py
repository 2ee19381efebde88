"""Reads and validates a golden bundle (reports/FORMATS.md section 1) with numpy (and xxhash, where installed).

read_bundle(DIR) checks everything a peer or the checker relies on before either uses it: every
file present, format and version, the model block (a GPT-2 this kit can describe), the step count K
agreeing everywhere (batch.steps, tokens/targets [K, B, T], optimizer.lrs, each reference's losses
and grad norms), token ranges against the vocabulary, and every safetensors file's names, shapes
and float dtypes against the HF GPT-2 parameter list of the model block; and where bundle.json
lists its files, each one's size and XXH64 (the digest needs the xxhash module). Anything wrong
raises BundleError whose message starts with the file at fault. Large tensor files are only read up
to their header here, but for their digest; Bundle.load() reads one when it is needed.
"""
import dataclasses
import json
import math
import pathlib

import numpy as np

from reports import safetensors_np as st

FORMAT, VERSION = "tripod-golden", 1
PRECISIONS = ("fp32", "fp64")
FLOAT_DTYPES = ("F32", "F64")


class BundleError(ValueError):
    """A bundle that cannot be used; the message names the file (and field or tensor)."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    n_layer: int
    n_head: int
    n_embd: int
    n_inner: int  # the MLP width; HF's null means 4 * n_embd
    n_positions: int
    vocab_size: int
    layer_norm_epsilon: float
    tie_word_embeddings: bool


def hf_param_shapes(m):
    """{HF GPT-2 name: shape} in HF order. Conv1D weights are [in, out] (y = x @ W + b);
    lm_head.weight exists only when the embeddings are untied."""
    C, F, V = m.n_embd, m.n_inner, m.vocab_size
    shapes = {"wte.weight": (V, C), "wpe.weight": (m.n_positions, C)}
    for i in range(m.n_layer):
        h = f"h.{i}."
        shapes.update({
            h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, F), h + "mlp.c_fc.bias": (F,),
            h + "mlp.c_proj.weight": (F, C), h + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    if not m.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def tensor_file_problem(path, shapes):
    """None when the safetensors file at `path` holds exactly the tensors of `shapes` (any float
    dtype), else what is wrong with it (file not named: the caller adds it)."""
    try:
        found = st.header(path)
    except FileNotFoundError:
        return "missing"
    except (OSError, st.SafetensorsError) as e:
        return f"unreadable ({e})"
    missing, extra = [n for n in shapes if n not in found], [n for n in found if n not in shapes]
    if missing or extra:
        return f"tensor names differ from the model's: missing {missing[:4]}, unexpected {extra[:4]}"
    for name, shape in shapes.items():
        dtype, got = found[name]
        if got != tuple(shape):
            return f"tensor '{name}' has shape {list(got)}, the model needs {list(shape)}"
        if dtype not in FLOAT_DTYPES:
            return f"tensor '{name}' has dtype {dtype}, not F32 or F64"
    return None


@dataclasses.dataclass
class Reference:
    """reference/<precision>.json: Tripod's run in that precision."""
    precision: str
    path: pathlib.Path
    losses: np.ndarray      # [K] float64
    grad_norms: np.ndarray  # [K] float64, before clipping
    params: dict            # {step (from 1): path of the parameters after that step}
    slack: dict             # {step: path of the per-element AdamW drift allowance for this precision}


@dataclasses.dataclass
class Bundle:
    dir: pathlib.Path
    meta: dict              # bundle.json as read
    model: ModelConfig
    steps: int              # K
    batch_size: int         # B
    seq_len: int            # T
    tokens: np.ndarray      # int32 [K, B, T]
    targets: np.ndarray     # int32 [K, B, T], -1 = not counted
    optimizer: dict         # bundle.json "optimizer"
    rtol: dict              # {"fp32": x, "fp64": y}
    references: dict        # {"fp32": Reference, "fp64": Reference}

    @property
    def shapes(self):
        return hf_param_shapes(self.model)

    @property
    def param_steps(self):
        """The steps after which the fp64 reference recorded parameters (1 and K)."""
        return sorted(self.references["fp64"].params)

    def initial_weights(self):
        """{HF name: float32 array} from model.safetensors."""
        return load_tensors(self.dir / "model.safetensors")


def load_tensors(path):
    """{name: array} of a safetensors file, BundleError naming it when it cannot be read."""
    try:
        return st.load(path)[0]
    except (OSError, st.SafetensorsError) as e:
        raise BundleError(f"{path}: unreadable ({e})") from e


# ------------------------------------------------------------------------------------------------
# Field checks: each raises BundleError naming the file and field.

def _number(where, value, positive=False, minimum=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BundleError(f"{where} is {value!r}, not a finite number")
    if positive and value <= 0 or minimum is not None and value < minimum:
        raise BundleError(f"{where} is {value!r}, out of range")
    return value


def _integer(where, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BundleError(f"{where} is {value!r}, not an integer >= {minimum}")
    return value


def _float_list(where, value, length):
    if not isinstance(value, list) or len(value) != length:
        got = f"{len(value)} entries" if isinstance(value, list) else repr(type(value).__name__)
        raise BundleError(f"{where} has {got}, expected a list of {length} numbers (one per step)")
    return np.array([_number(f"{where}[{i}]", v) for i, v in enumerate(value)], dtype=np.float64)


def read_json_object(path, error=None):
    """The JSON object in `path`; anything else raises `error` (BundleError by default) naming it."""
    error = error or BundleError
    try:
        value = json.loads(pathlib.Path(path).read_text())
    except FileNotFoundError:
        raise error(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: unreadable ({e})") from e
    if not isinstance(value, dict):
        raise error(f"{path}: not a JSON object")
    return value


def _field(path, obj, key, kind=None):
    if key not in obj:
        raise BundleError(f"{path}: field '{key}' is missing")
    if kind is not None and not isinstance(obj[key], kind):
        raise BundleError(f"{path}: field '{key}' is {type(obj[key]).__name__}, expected {kind.__name__}")
    return obj[key]


def _model(path, m):
    where = f"{path}: model."
    if m.get("model_type", "gpt2") != "gpt2":
        raise BundleError(f"{where}model_type is {m['model_type']!r}, only gpt2 is described")
    act = m.get("activation_function", "gelu_new")
    if act != "gelu_new":
        raise BundleError(f"{where}activation_function is {act!r}; the kit's GPT-2 uses gelu_new (tanh GELU)")
    ints = {k: _integer(where + k, _field(path, m, k))
            for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")}
    if ints["n_embd"] % ints["n_head"]:
        raise BundleError(f"{where}n_embd {ints['n_embd']} is not a multiple of n_head {ints['n_head']}")
    n_inner = m.get("n_inner")
    n_inner = 4 * ints["n_embd"] if n_inner is None else _integer(where + "n_inner", n_inner)
    eps = _number(where + "layer_norm_epsilon", m.get("layer_norm_epsilon", 1e-5), positive=True)
    tied = m.get("tie_word_embeddings", True)
    if not isinstance(tied, bool):
        raise BundleError(f"{where}tie_word_embeddings is {tied!r}, not true or false")
    return ModelConfig(n_inner=n_inner, layer_norm_epsilon=float(eps), tie_word_embeddings=tied, **ints)


def _batches(path, K, B, T, vocab):
    try:
        a = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise BundleError(f"{path}: missing") from None
    except (OSError, ValueError, EOFError) as e:
        raise BundleError(f"{path}: unreadable or truncated .npy ({e})") from e
    if a.dtype != np.dtype("<i4") or a.shape != (K, B, T):
        raise BundleError(f"{path}: {a.dtype} {list(a.shape)}, expected int32 [{K}, {B}, {T}] (bundle.json batch)")
    low = -1 if path.name == "targets.npy" else 0
    if a.size and (a.min() < low or a.max() >= vocab):
        raise BundleError(f"{path}: values in [{a.min()}, {a.max()}], expected [{low}, {vocab}) (vocab_size {vocab})")
    return a


def _reference(dir_, precision, K, shapes):
    path = dir_ / "reference" / f"{precision}.json"
    r = read_json_object(path)
    if r.get("precision") != precision:
        raise BundleError(f"{path}: field 'precision' is {r.get('precision')!r}, expected {precision!r}")
    if "steps" in r and r["steps"] != K:
        raise BundleError(f"{path}: field 'steps' is {r['steps']!r}, bundle.json batch.steps is {K}")
    losses = _float_list(f"{path}: losses", _field(path, r, "losses"), K)
    norms = _float_list(f"{path}: grad_norms", _field(path, r, "grad_norms"), K)
    files = {}
    for key in ("params", "slack"):
        entries = _field(path, r, key, dict)
        files[key] = {}
        for step, name in entries.items():
            if not (step.isdigit() and 1 <= int(step) <= K):
                raise BundleError(f"{path}: {key} key {step!r} is not a step in 1..{K}")
            file = path.parent / str(name)
            problem = tensor_file_problem(file, shapes)
            if problem:
                raise BundleError(f"{file}: {problem} ({path.name} {key}[{step!r}])")
            files[key][int(step)] = file
    if sorted(files["slack"]) != sorted(files["params"]):
        raise BundleError(f"{path}: slack steps {sorted(files['slack'])} differ from "
                          f"params steps {sorted(files['params'])}")
    return Reference(precision, path, losses, norms, files["params"], files["slack"])


def _digest(path):
    """XXH64 of a file as 16 hex digits (bundle.json "files"), or None without the xxhash module."""
    try:
        import xxhash
    except ImportError:
        return None
    h = xxhash.xxh64()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_files(d, path, meta):
    """bundle.json "files" (bundles written since 2026-12-06): every listed file present with its
    size, and its XXH64 where the xxhash module is installed (`tripod golden run` and `golden check`
    check both themselves). A bundle damaged on its way here made a correct peer DIFFER."""
    files = meta.get("files")
    if files is None:
        return
    if not isinstance(files, dict):
        raise BundleError(f"{path}: field 'files' is {type(files).__name__}, expected dict")
    for name, entry in files.items():
        # a name is a file inside the bundle: a bundle from elsewhere must not make us hash files elsewhere
        parts = pathlib.PurePosixPath(name).parts
        if not name or name.startswith("/") or ".." in parts or name == "bundle.json":
            raise BundleError(f"{path}: files lists {name!r}, which is not a file inside the bundle")
        f = d / name
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) \
                or not isinstance(entry.get("xxh64"), str):
            raise BundleError(f"{path}: files[{name!r}] lacks its bytes or xxh64")
        if not f.is_file():
            raise BundleError(f"{f}: missing (bundle.json lists it): the bundle is incomplete")
        size = f.stat().st_size
        if size != entry["bytes"]:
            raise BundleError(f"{f}: {size} bytes, bundle.json records {entry['bytes']} "
                              "(truncated, or damaged on its way here)")
        digest = _digest(f)
        if digest is not None and digest != entry["xxh64"]:
            raise BundleError(f"{f}: XXH64 {digest}, bundle.json records {entry['xxh64']}: "
                              "the file was changed or damaged since the bundle was written")


def read_bundle(directory):
    """Reads and validates the bundle in `directory`; raises BundleError naming the file at fault."""
    d = pathlib.Path(directory)
    if not d.is_dir():
        raise BundleError(f"{d}: not a directory (a golden bundle is a folder holding bundle.json)")
    path = d / "bundle.json"
    meta = read_json_object(path)
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise BundleError(f"{path}: format {meta.get('format')!r} version {meta.get('version')!r}, "
                          f"expected {FORMAT!r} version {VERSION}")
    _check_files(d, path, meta)
    model = _model(path, _field(path, meta, "model", dict))
    batch = _field(path, meta, "batch", dict)
    K, B, T = (_integer(f"{path}: batch.{k}", _field(path, batch, k))
               for k in ("steps", "batch_size", "seq_len"))
    if T > model.n_positions:
        raise BundleError(f"{path}: batch.seq_len {T} exceeds model.n_positions {model.n_positions}")
    shapes = hf_param_shapes(model)

    opt = _field(path, meta, "optimizer", dict)
    if opt.get("name", "adamw") != "adamw":
        raise BundleError(f"{path}: optimizer.name is {opt['name']!r}, only adamw is described")
    _float_list(f"{path}: optimizer.lrs", _field(path, opt, "lrs"), K)
    for key in ("beta1", "beta2"):
        _number(f"{path}: optimizer.{key}", _field(path, opt, key), minimum=0)
    _number(f"{path}: optimizer.eps", _field(path, opt, "eps"), positive=True)
    _number(f"{path}: optimizer.weight_decay", _field(path, opt, "weight_decay"), minimum=0)
    _number(f"{path}: optimizer.grad_clip", _field(path, opt, "grad_clip"), minimum=0)
    unknown = [n for n in _field(path, opt, "decay", list) if n not in shapes]
    if unknown:
        raise BundleError(f"{path}: optimizer.decay names {unknown[:4]}, which are not parameters of the model")

    tol = _field(path, meta, "tolerances", dict)
    rtol = {p: _number(f"{path}: tolerances.{p}.rtol", _field(path, _field(path, tol, p, dict), "rtol"), positive=True)
            for p in PRECISIONS}

    problem = tensor_file_problem(d / "model.safetensors", shapes)
    if problem:
        raise BundleError(f"{d / 'model.safetensors'}: {problem}")
    tokens = _batches(d / "tokens.npy", K, B, T, model.vocab_size)
    targets = _batches(d / "targets.npy", K, B, T, model.vocab_size)
    empty = [k + 1 for k in range(K) if not (targets[k] != -1).any()]
    if empty:
        raise BundleError(f"{d / 'targets.npy'}: steps {empty} count no target (all -1): their loss is undefined")
    refs = {p: _reference(d, p, K, shapes) for p in PRECISIONS}
    return Bundle(d, meta, model, K, B, T, tokens, targets, opt, rtol, refs)
