"""Reading a sweep: one JSON record per line with at least N, D, C and a loss.

A run that cannot take part in a fit (NaN/inf/missing loss, status "diverged", bad N/D/C) is
excluded, and every exclusion is announced on stderr with the run's name or line number: a
sweep that silently loses its biggest models produces confidently wrong exponents.
"""

import json
import math
import sys
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sweep:
    """The usable runs of a sweep, as parallel arrays (one entry per run)."""
    N: np.ndarray
    D: np.ndarray
    C: np.ndarray
    loss: np.ndarray
    budget: np.ndarray   # str label per run: the record's `budget`, else C to 2 significant digits
    names: tuple
    # Per run, its training curve (tokens, loss) as two arrays, or None (Approach 1 reads them).
    curves: tuple = ()

    def __len__(self):
        return len(self.loss)

    def take(self, indices):
        """A sub-sweep (indices may repeat: that is how the bootstrap resamples)."""
        idx = np.asarray(indices, int)
        return Sweep(self.N[idx], self.D[idx], self.C[idx], self.loss[idx], self.budget[idx],
                     tuple(self.names[i] for i in idx),
                     tuple(self.curves[i] for i in idx) if self.curves else ())

    def flops_per_token(self, n):
        """FLOPs per token at model size(s) n as the sweep's records count them (C = D x the run's
        own FLOPs per token): log(C/D) against log N through its sizes, straight between them and,
        beyond the smallest or largest, in proportion to n (as 6N). An optimum's D_opt is C over
        this: C / (6 N_opt) was 4.5 to 15 % off under `6N+attention` (a depth-2 size of the quick
        sweep counts 1.18 x 6N) and 2 to 8-fold under `non_embedding`, where N leaves out the
        embeddings that the FLOPs count, and it made b = 1 - a whatever the runs said."""
        log_n, which = np.unique(np.log(self.N), return_inverse=True)
        log_per_token = np.bincount(which, np.log(self.C / self.D)) / np.bincount(which)  # mean per size
        x = np.log(np.asarray(n, float))
        below, above = x < log_n[0], x > log_n[-1]
        y = np.interp(x, log_n, log_per_token)
        y = np.where(below, log_per_token[0] + x - log_n[0], np.where(above, log_per_token[-1] + x - log_n[-1], y))
        return np.exp(y)

    def budgets(self):
        """[(label, run indices, representative C)] ordered by C.

        The representative C is the geometric mean of the group's C: labels may be strings, and
        real runs land a little off their nominal budget (integer step counts, attention FLOPs).
        """
        groups = []
        for label in np.unique(self.budget):
            idx = np.flatnonzero(self.budget == label)
            C = self.C[idx]
            representative = C[0] if np.all(C == C[0]) else np.exp(np.mean(np.log(C)))
            groups.append((str(label), idx, float(representative)))
        return sorted(groups, key=lambda g: g[2])


def budget_label(C):
    """Group key for runs without a `budget`: C rounded to 2 significant digits (1.0e+18)."""
    return f"{C:.1e}"


def _positive_number(value):
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def _exclusion_reason(record, loss_key):
    """Why this record cannot be fitted, or None if it can."""
    # Only a finished run: a failed one's record holds its partial run's losses (smoothed_loss,
    # final_loss), which --loss-key took in without a word.
    status = record.get("status")
    if status is not None and str(status).lower() != "ok":
        return f'status is "{status}"'
    if loss_key not in record or record[loss_key] is None:
        return f"no '{loss_key}'"
    try:
        loss = float(record[loss_key])
    except (TypeError, ValueError):
        return f"'{loss_key}' is not a number ({record[loss_key]!r})"
    if not math.isfinite(loss):
        return f"'{loss_key}' is {loss}"
    if loss <= 0:
        return f"'{loss_key}' is not positive ({loss})"
    for key in ("N", "D", "C"):
        if _positive_number(record.get(key)) is None:
            return f"'{key}' is missing or not a positive number ({record.get(key)!r})"
    return None


def parse_records(lines, loss_key="loss", source="<runs>", warn_stream=None):
    """Parse JSONL lines into (Sweep, excluded); `excluded` is [{"name", "line", "reason"}]."""
    warn_stream = warn_stream if warn_stream is not None else sys.stderr
    kept, excluded = [], []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            reason = None if isinstance(record, dict) else "not a JSON object"
        except json.JSONDecodeError as err:
            record, reason = {}, f"not valid JSON ({err.msg})"
        reason = reason or _exclusion_reason(record, loss_key)
        name = str(record.get("name") or f"line {line_no}")
        if reason:
            excluded.append({"name": name, "line": line_no, "reason": reason})
            print(f"warning: {source}:{line_no}: excluding run '{name}': {reason}", file=warn_stream)
            continue
        C = float(record["C"])
        label = record.get("budget")
        kept.append((float(record["N"]), float(record["D"]), C, float(record[loss_key]),
                     str(label) if label is not None else budget_label(C), name, _curve(record)))
    if not kept:
        raise ValueError(f"{source}: no usable runs ({len(excluded)} excluded)")
    N, D, C, loss, budget, names, curves = zip(*kept)
    sweep = Sweep(np.array(N), np.array(D), np.array(C), np.array(loss),
                  np.array(budget, dtype=object), tuple(names), tuple(curves))
    return sweep, excluded


def _curve(record):
    """The record's training curve as (tokens, loss) arrays of finite, positive points, or None."""
    curve = record.get("curve")
    if not isinstance(curve, dict):
        return None
    try:
        tokens = np.asarray(curve.get("tokens"), float)
        loss = np.asarray(curve.get("loss"), float)
    except (TypeError, ValueError):
        return None
    if tokens.ndim != 1 or tokens.shape != loss.shape:
        return None
    keep = np.isfinite(tokens) & np.isfinite(loss) & (tokens > 0) & (loss > 0)
    return (tokens[keep], loss[keep]) if keep.sum() >= 2 else None


def load_runs(path, loss_key="loss", warn_stream=None):
    # A line that is not UTF-8 (a torn write) is excluded like any other bad line, not fatal.
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_records(f.read().splitlines(), loss_key, source=str(path),
                             warn_stream=warn_stream)
