"""The summary of a ci/gpu-check.sh run: reads OUT_DIR/steps.tsv (one line per step: name, status,
seconds, reason) and each step's JSON, writes OUT_DIR/summary.json and prints a table with one key
figure per step, then the issue's targets with what was measured against each.

    python3 reports/gpu_check_summary.py OUT_DIR [--dry-run 0|1] [--budget S] [--elapsed S] [--pending a,b]

--pending names the steps the run has not reached yet: gpu-check.sh writes the summary after every
step, and one written mid-run (all that comes back when the run is killed from outside) must say
INCOMPLETE, not PASS.

Exit status 1 when any step failed or timed out, or when no step ran at all: a summary is never
green on a failure. Standard library only (the GPU node's Python has numpy, but nothing here needs it).
"""
import argparse
import csv
import json
import pathlib
import sys

BAD = ("fail", "timeout")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(path):
    try:
        return pathlib.Path(path).read_text().strip()
    except OSError:
        return ""


def pct(x):
    return f"{x:.1f}%" if x is not None else "n/a"


# ---- one key figure per step, from the files the step left ----

def key_probe(d):
    py = load(d / "python.json") or {}
    gpu = read_text(d / "gpus.csv").splitlines()
    parts = [gpu[0] if gpu else "no GPU listed (dry run or nvidia-smi missing)"]
    nvcc = [line for line in read_text(d / "nvcc.txt").splitlines() if "release" in line]
    if nvcc:
        parts.append("nvcc " + nvcc[0].split("release")[-1].strip().split(",")[0])
    if py:
        parts.append(f"python {py.get('version', '?')}, torch {py.get('torch', 'missing')}")
    return "; ".join(parts)


def key_data(d):
    lines = [line.strip() for line in read_text(d / "log.txt").splitlines() if "train tokens" in line]
    return lines[0] if lines else ""


def over_bound(row):
    """A check-backend row's error as a fraction of its bound; JSON has no infinity or NaN, so the C++
    writes a NaN or infinite error (a NaN against a number: an unwritten output) as null: worst of all."""
    v = row.get("error_over_bound")
    return float("inf") if v is None else v


def figure(v):
    return "inf/NaN" if v is None else f"{v:.2g}"


def key_check(d):
    j = load(d / "check.json")
    if not j:
        return ""
    results = j["results"]
    failed = [r for r in results if not r["pass"]]
    worst = max(results, key=over_bound, default=None)
    text = f"{len(results)} cases, {len(failed)} failed, {sum(r['bit_identical'] for r in results)} bit-identical"
    if worst:
        text += (f"; worst {figure(worst.get('max_rel'))} rel = {figure(worst.get('error_over_bound'))} of bound "
                 f"({worst['op']} {worst['dtype']})")
    if failed:
        text += "; FAILED: " + ", ".join(f"{r['op']} {r['dtype']}" for r in failed[:4])
    return text


def fusions_text(d):
    """'; fusions alone: none pass, bias fail, ...' from train-bf16's bisection (fusions.txt), if it ran."""
    lines = [line.split() for line in read_text(d / "fusions.txt").splitlines()]
    return ("; TRIPOD_CUDA_FUSIONS alone: " + ", ".join(" ".join(p) for p in lines if len(p) == 2)) if lines else ""


def key_train(d):
    j = load(d / "compare.json")
    if not j:
        return fusions_text(d).lstrip("; ")
    ckpt = j.get("checkpoint", {})
    if j["mode"] == "bitwise":
        same = all(ckpt.get("files_identical", {}).values()) if ckpt else None
        return (f"{len(j['steps'])} steps: losses/norms {'bit-identical' if not j['failures'] else 'DIFFER'}, "
                f"checkpoint files {'identical' if same else 'DIFFER' if same is False else 'not compared'}")
    if not j["steps"]:  # a metrics file compare_training could not read, or runs sharing no step
        return "not compared: " + "; ".join(j["failures"]) + fusions_text(d)
    norms = "not compared" if j["grad_norm_max_rel"] is None else f"{j['grad_norm_max_rel']:.2g}"
    text = f"loss max rel {j['loss_max_rel']:.2g} (bound {j['rel_tol']:g}), grad norm {norms}"
    if ckpt:
        text += f", params {ckpt['param_max_rel']:.2g} ({ckpt['worst_param']})"
    return text + fusions_text(d)


def timed_rows(j):
    """gemm-rate's rows that were timed (a shape that failed is {name, ..., error}: bench/gemm_rate_bench.h)."""
    return [r for r in (j or {}).get("results", []) if "error" not in r]


def largest_square(j):
    squares = [r for r in timed_rows(j) if r["group"] == "square"]
    return max(squares, key=lambda r: r["m"], default=None)


def key_gemm(d):
    j = load(d / "gemm.json")
    if not j:
        return ""
    parts = []
    sq = largest_square(j)
    if sq:
        parts.append(f"{sq['m']}^3 {sq['median_tflops']:.1f} TFLOP/s ({pct(sq['pct_of_peak_median'])} of peak)")
    if j.get("gpt2_step"):
        s = j["gpt2_step"]
        parts.append(f"GPT-2 step GEMMs {s['tflops']:.1f} TFLOP/s ({pct(s['pct_of_peak'])})")
    mixed = load(d / "gemm-mixed.json")  # gemm-bf16's second run: the GEMMs as the trainer runs them
    if mixed and mixed.get("gpt2_step"):
        s = mixed["gpt2_step"]
        parts.append(f"as trained (bf16-mixed, conversions included) {s['tflops']:.1f} TFLOP/s ({pct(s['pct_of_peak'])})")
    bf16_out = load(d / "gemm-bf16out.json")  # its third: bf16 C, as PyTorch's bf16 matmul
    sq = largest_square(bf16_out) if bf16_out else None
    if sq:
        text = f"bf16 C {sq['m']}^3 {sq['median_tflops']:.1f} TFLOP/s ({pct(sq['pct_of_peak_median'])})"
        if bf16_out.get("gpt2_step"):
            text += f", GPT-2 step GEMMs {bf16_out['gpt2_step']['tflops']:.1f}"
        parts.append(text)
    torch_sq = same_square(load(d / "torch-gemm.json"), sq)
    if torch_sq:
        parts.append(f"PyTorch bf16 {torch_sq['m']}^3 {torch_sq['median_tflops']:.1f} TFLOP/s "
                     f"(Tripod/PyTorch {sq['median_tflops'] / torch_sq['median_tflops']:.2f}x)")
    failed = [r["name"] for name in ("gemm.json", "gemm-mixed.json", "gemm-bf16out.json")
              for r in (load(d / name) or {}).get("results", []) if "error" in r]
    if failed:
        parts.append(f"FAILED: {', '.join(failed)}")
    return f"{j['dtype']}: " + "; ".join(parts)


def same_square(j, square):
    """The row of j (gemm-rate's or torch_gemm_rate's JSON) of the same square size, if both are there."""
    if not j or not square:
        return None
    return next((r for r in timed_rows(j) if r["group"] == "square" and r["m"] == square["m"]), None)


def key_bench(d):
    j = load(d / "bench.json")
    if not j:
        unfused = load(d / "bench-unfused.json")  # the fused run failed: what the unfused one measured
        return ("" if not unfused else
                f"default run failed; fusions off: {unfused['tokens_per_second']:.0f} tokens/s, step "
                f"{1e3 * unfused['median_step_seconds']:.1f} ms")
    mfu = pct(100 * j["mfu"]) if j.get("mfu") is not None else "n/a"
    text = (f"{j['config']} B{j['batch']}xT{j['seq_len']} {j.get('dtype', '?')}: {j['tokens_per_second']:.0f} tokens/s, "
            f"MFU {mfu}, step {1e3 * j['median_step_seconds']:.1f} ms")
    return (text + padded_text(j, load(d / "bench-padded.json")) + unfused_text(j, load(d / "bench-unfused.json"))
            + large_text(load(d / "bench-large.json")))


def gemm_target(d):
    """(target, measured, met) of the 8192^3 bf16 GEMM. Judged on bf16 C where gemm-bf16 ran it: that
    is a bf16 GEMM as PyTorch's figure in the issue measures it (bf16 in and out); fp32 C (the
    trainer's bf16-mixed outputs) is shown beside it, and PyTorch's rate from the same step."""
    def square_8192(name):
        j = load(d / name)
        return next((r for r in timed_rows(j) if r["group"] == "square" and r["m"] == 8192), None)

    def rate(r):
        return f"{r['median_tflops']:.1f} TFLOP/s = {pct(r['pct_of_peak_median'])}"

    fp32_c, bf16_c, torch_c = (square_8192(n) for n in ("gemm.json", "gemm-bf16out.json", "torch-gemm.json"))
    judged = bf16_c or fp32_c
    parts = ([f"bf16 C {rate(bf16_c)}"] if bf16_c else []) + ([f"fp32 C {rate(fp32_c)}"] if fp32_c else [])
    if torch_c:
        parts.append(f"PyTorch bf16 {torch_c['median_tflops']:.1f} TFLOP/s")
    # no peak for this device (pct null): measured, but nothing to judge it against
    met = judged["pct_of_peak_median"] >= 75 if judged and judged["pct_of_peak_median"] is not None else None
    return "cuBLASLt bf16 GEMM 8192^3 >= 75% of dense bf16 peak", "; ".join(parts) or "not measured", met


def padded_text(plain, padded):
    """'; vocabulary padded to 50304: ... tokens/s (1.07x)' from bench-train's second run, if it ran."""
    if not plain or not padded:
        return ""
    ratio = padded["tokens_per_second"] / plain["tokens_per_second"]
    return (f"; vocabulary padded to {padded.get('padded_vocab', '?')}: {padded['tokens_per_second']:.0f} tokens/s "
            f"({ratio:.2f}x)")


def unfused_text(fused, unfused):
    """'; fusions off: ... tokens/s (fused 1.08x)' from bench-train's third run
    (TRIPOD_CUDA_FUSIONS=none), if it ran."""
    if not fused or not unfused:
        return ""
    ratio = fused["tokens_per_second"] / unfused["tokens_per_second"]
    return f"; fusions off: {unfused['tokens_per_second']:.0f} tokens/s (fused {ratio:.2f}x)"


def large_text(large):
    """'; B32 padded: ... tokens/s, MFU ...' from bench-train's fourth run (the padded vocabulary
    at $GPT2_LARGE_BATCH sequences), if it ran."""
    if not large:
        return ""
    mfu = pct(100 * large["mfu"]) if large.get("mfu") is not None else "n/a"
    return (f"; B{large['batch']} padded: {large['tokens_per_second']:.0f} tokens/s, MFU {mfu}, step "
            f"{1e3 * large['median_step_seconds']:.1f} ms")


def best_mfu_run(runs):
    """Of (run, how) pairs, the run with the highest MFU in the target's precision, and how it ran
    (the issue leaves batch and context to us: the target is judged on the best, which is named)."""
    judged = [(r, how) for r, how in runs if r and r.get("dtype") == "bf16-mixed" and r.get("mfu") is not None]
    return max(judged, key=lambda pair: pair[0]["mfu"], default=(None, ""))


def mfu_runs(out_dir, status):
    """The GPT-2 runs the MFU target may be judged on: bench-train's, and the flash step's where
    that step passed (its attention checked against the CPU and its tiny training within bound in
    the same step: flash is a configuration of Tripod's, TRIPOD_CUDA_ATTENTION=flash)."""
    runs = [(load(out_dir / "bench-train" / n), "") for n in ("bench.json", "bench-padded.json", "bench-large.json")]
    for step, how in (("flash", "flash attention"), ("flash-mma", "flash attention, mma tiles")):
        if status.get(step) == "pass":
            runs += [(load(out_dir / step / n), how) for n in ("bench.json", "bench-large.json")]
    return runs


def key_peer(d):
    j = load(d / "peer.json")
    if not j:
        return ""
    parts = []
    for r in j["results"]:
        mfu = pct(100 * r["mfu"]) if r.get("mfu") is not None else "n/a"
        parts.append(f"{r['precision']} {r['tokens_per_second']:.0f} tokens/s MFU {mfu}")
    line = f"PyTorch {j['torch']} B{j['batch']}xT{j['seq_len']} {j['attention']}: " + "; ".join(parts)
    attention = attention_peer(d)
    return f"{line}; {attention}" if attention else line


def tripod_attention_ms(out_dir, shape):
    """(fwd, bwd) ms of the kernels step's bf16 attention rows (the bf16-mixed policy's) where they
    were measured at `shape` (an attention.json row's batch, seq_len, heads, head_dim), else None."""
    for name in ("kernels", "dry-kernels"):
        j = load(out_dir / name / "kernels.json")
        same = j and [j.get("attention_batch"), j.get("context"), j.get("heads")] == \
            [shape["batch"], shape["seq_len"], shape["heads"]] and j.get("channels") == shape["heads"] * shape["head_dim"]
        if same:
            rows = {r["name"]: r for r in j.get("results", [])}
            fwd, bwd = rows.get("attention fwd bf16"), rows.get("attention bwd bf16")
            if fwd and bwd and "median_seconds" in fwd and "median_seconds" in bwd:  # not rows that failed
                return 1e3 * fwd["median_seconds"], 1e3 * bwd["median_seconds"]
    return None


def attention_peer(d):
    """PyTorch's causal attention per SDPA backend (reports/torch_attention_rate.py), against Tripod's."""
    j = load(d / "attention.json")
    if not j:
        return ""
    ran = [r for r in j["results"] if "error" not in r]
    if not ran:
        return "attention: no SDPA backend ran"
    shape = ran[0]
    parts = [f"{r['backend']} {r['fwd_median_ms']:.3f}+{r['bwd_median_ms']:.3f} ms"
             + ("" if r["deterministic_backward"] else " (backward not deterministic)") for r in ran]
    line = (f"attention B{shape['batch']} T{shape['seq_len']} H{shape['heads']} hd{shape['head_dim']} "
            f"{shape['dtype']} fwd+bwd: " + ", ".join(parts))
    tripod = tripod_attention_ms(d.parent, shape)
    if tripod:
        best = min(ran, key=lambda r: r["fwd_median_ms"] + r["bwd_median_ms"])
        ratio = sum(tripod) / (best["fwd_median_ms"] + best["bwd_median_ms"])
        line += f"; Tripod's {tripod[0]:.3f}+{tripod[1]:.3f} ms, {ratio:.1f}x PyTorch's {best['backend']}"
    return line


def key_gtest(d):
    j = load(d / "gtest.json")
    if not j:
        return ""
    results = [t.get("result", "") for s in j.get("testsuites", []) for t in s.get("testsuite", [])]
    return (f"{j.get('tests', len(results))} tests, {j.get('failures', 0)} failed, "
            f"{sum(r == 'SKIPPED' for r in results)} skipped")


def key_sanitizer(d):
    return read_text(d / "key.txt")


# Issue 17 on the node's CPU cores (overlap-cpu, pipeline-cpu).
MECHANISMS = {"bucketing": "bucketing", "bucketing_with_progress_thread": "+ progress thread",
              "bucketing_with_tied_grad_split": "+ tied split", "zero3_prefetch": "ZeRO-3 prefetch",
              "zero3_prefetch_with_progress_thread": "ZeRO-3 prefetch + progress thread"}
OVERLAP_TARGET = 0.80
PIPELINE_GAIN = 0.02  # "improves measurably": every pair faster and the median gain at least this


def best_hidden(j):
    """(mechanism, fraction) hiding the most of the DP reduction by pass time (ZeRO-3's gathers are another thing)."""
    hidden = {k: v for k, v in j.get("hidden_by_mechanism", {}).items() if not k.startswith("zero3") and v is not None}
    return max(hidden.items(), key=lambda kv: kv[1]) if hidden else (None, None)


def key_overlap(d):
    j = load(d / "overlap.json")
    if not j:
        return ""
    calls = j.get("hidden_in_calls_by_mechanism", {})
    parts = [f"{MECHANISMS.get(k, k)} {pct(100 * v)} (in calls {pct(100 * calls[k]) if calls.get(k) is not None else 'n/a'})"
             for k, v in j.get("hidden_by_mechanism", {}).items() if v is not None]
    return (f"{j.get('ranks', '?')} ranks, compute {1e3 * j['compute_seconds']:.0f} ms; hidden behind backward: "
            + ", ".join(parts))


def pipeline_pairs(j):
    """[(blocking tokens/s, posted-ahead tokens/s)] in run order, from bench layouts' alternating pairs."""
    rows = j.get("layouts", [])
    blocking = [r["tokens_per_second"] for r in rows if r["layout"].endswith("-ra0")]
    ahead = [r["tokens_per_second"] for r in rows if not r["layout"].endswith("-ra0")]
    return list(zip(blocking, ahead))


def key_pipeline(d):
    j = load(d / "layouts.json")
    if not j:
        return ""
    pairs = pipeline_pairs(j)
    if not pairs:
        return "no pairs"
    gains = sorted(b / a - 1 for a, b in pairs)
    return (f"tiny pp=2, {j.get('threads_per_rank', '?')} threads a rank: blocking "
            + "/".join(f"{a:.0f}" for a, _ in pairs) + " vs posted ahead " + "/".join(f"{b:.0f}" for _, b in pairs)
            + f" tokens/s; median gain {pct(100 * gains[len(gains) // 2])}")


KEYS = {"probe": key_probe, "data": key_data, "check": key_check, "train": key_train, "gemm": key_gemm,
        "bench": key_bench, "peer": key_peer, "gtest": key_gtest, "sanitizer": key_sanitizer,
        "overlap": key_overlap, "pipeline": key_pipeline}


def key_text(d):
    """Steps that write their key figure themselves (key.txt): its lines joined."""
    return "; ".join(line.strip() for line in read_text(d / "key.txt").splitlines() if line.strip())


def key_for(out_dir, name):
    base = name[4:] if name.startswith("dry-") else name
    fn = KEYS.get(base.split("-")[0], key_text)
    try:
        return fn(out_dir / name)
    except (KeyError, TypeError, ValueError, IndexError) as e:  # a partial JSON: say so, never crash
        return f"(key figure unreadable: {e!r})"


# ---- the targets, against what this run measured ----

def verdict(statuses):
    """False if any step failed or timed out, None (not measured) if any did not run or was
    skipped, True when all passed."""
    if any(s in BAD for s in statuses):
        return False
    return True if all(s == "pass" for s in statuses) else None


def targets(out_dir, steps):
    status = {s["name"]: s["status"] for s in steps}
    rows = []

    def add(target, measured, met):
        rows.append({"target": target, "measured": measured, "met": met})

    fp64, fp32, bf16 = (status.get(n) for n in ("check-fp64", "check-fp32", "check-bf16"))
    add("every kernel matches the CPU backend (fp64 1e-12, fp32 1e-5, bf16 bound)",
        ", ".join(f"{n}: {status.get(n, 'not run')}" for n in ("check-fp64", "check-fp32", "check-bf16")),
        verdict([fp64, fp32, bf16]))
    add("compute-sanitizer finds nothing", f"sanitizer: {status.get('sanitizer', 'not run')}",
        {"pass": True, "fail": False, "timeout": False}.get(status.get("sanitizer")))
    add(*gemm_target(out_dir / "gemm-bf16"))
    bench = load(out_dir / "bench-train" / "bench.json")
    peer = load(out_dir / "peer" / "peer.json")
    if bench:
        mfu = bench.get("mfu")
        measured = f"{bench.get('dtype', '?')} MFU {pct(100 * mfu) if mfu is not None else 'n/a'}, {bench['tokens_per_second']:.0f} tokens/s"
        measured += padded_text(bench, load(out_dir / "bench-train" / "bench-padded.json"))
        same = {"bf16-mixed": "bf16"}.get(bench.get("dtype"), bench.get("dtype"))  # autocast is the peer's bf16-mixed
        peer_same = [r for r in (peer or {}).get("results", []) if r["precision"] == same]
        if peer_same:
            measured += f"; PyTorch {peer_same[0]['precision']} {peer_same[0]['tokens_per_second']:.0f} tokens/s " \
                        f"(Tripod/PyTorch {bench['tokens_per_second'] / peer_same[0]['tokens_per_second']:.2f}x)"
        measured += large_text(load(out_dir / "bench-train" / "bench-large.json"))
        best, how = best_mfu_run(mfu_runs(out_dir, status))
        if best is not None and (best != bench or how):
            measured += (f"; judged on B{best['batch']}xT{best['seq_len']}"
                         f", vocabulary {best.get('padded_vocab', '?')}{', ' + how if how else ''}"
                         f" (MFU {pct(100 * best['mfu'])})")
        met = best["mfu"] >= 0.40 if best is not None else None  # the target is bf16-mixed's
        add("GPT-2 124M bf16-mixed MFU >= 40% (and tokens/s vs PyTorch eager)", measured, met)
    else:
        add("GPT-2 124M bf16-mixed MFU >= 40% (and tokens/s vs PyTorch eager)", "not measured", None)
    train_steps = ("train-fp64", "train-fp32", "train-bf16", "train-rerun")
    trains = [status.get(n) for n in train_steps]
    add("tiny, 10 steps: GPU matches CPU (fp64 1e-10, fp32 1e-5, bf16-mixed 2e-4) and reruns bit for bit",
        ", ".join(f"{n}: {status.get(n, 'not run')}" for n in train_steps), verdict(trains))
    nccl_1g = status.get("nccl-1g")
    add("issue 15: `bench comm all_reduce -b 8 -e 1G -f 2` reads as nccl-tests output (same columns, #wrong 0)",
        f"nccl-1g: {nccl_1g or 'not run'}", {"pass": True, "fail": False, "timeout": False}.get(nccl_1g))
    multi = status.get("nccl-multi")
    add("issue 15: on several GPUs, conform and the collective sweep over NCCL across them",
        f"nccl-multi: {multi or 'not run'}", {"pass": True, "fail": False, "timeout": False}.get(multi))
    overlap = load(out_dir / "overlap-cpu" / "overlap.json")
    mechanism, hidden = best_hidden(overlap) if overlap else (None, None)
    add(f"issue 17: >= {pct(100 * OVERLAP_TARGET)} of the DP reduction hidden behind backward (2 ranks, small, CPU)",
        f"{MECHANISMS.get(mechanism, mechanism)} {pct(100 * hidden)}" if hidden is not None
        else f"overlap-cpu: {status.get('overlap-cpu', 'not run')}",
        hidden >= OVERLAP_TARGET if hidden is not None else None)
    layouts = load(out_dir / "pipeline-cpu" / "layouts.json")
    pairs = pipeline_pairs(layouts) if layouts else []
    if pairs:
        gains = sorted(b / a - 1 for a, b in pairs)
        median = gains[len(gains) // 2]
        add(f"issue 17: tiny pp=2 tokens/s up with receives posted ahead (every pair, median >= {pct(100 * PIPELINE_GAIN)})",
            f"median gain {pct(100 * median)} over {len(pairs)} pairs, worst {pct(100 * gains[0])}",
            gains[0] > 0 and median >= PIPELINE_GAIN)
    else:
        add("issue 17: tiny pp=2 tokens/s up with receives posted ahead", f"pipeline-cpu: {status.get('pipeline-cpu', 'not run')}",
            None)
    return rows


def readable_targets(out_dir, steps):
    """targets(), or one row saying why they could not be read: a result of an unexpected shape (a
    missing key, a null where a number was) stopped the script before summary.json was written, and
    the export kept the previous step's summary."""
    try:
        return targets(out_dir, steps)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError, AttributeError) as e:
        return [{"target": "the issue's targets", "measured": f"(unreadable: {e!r}; the steps' rows above stand)",
                 "met": None}]


def main(argv=None):
    p = argparse.ArgumentParser(description="summarise a ci/gpu-check.sh run")
    p.add_argument("out_dir")
    p.add_argument("--dry-run", type=int, default=0)
    p.add_argument("--budget", type=float, default=0)
    p.add_argument("--elapsed", type=float, default=0)
    p.add_argument("--pending", default="", help="steps not reached yet, comma-separated")
    args = p.parse_args(argv)
    out_dir = pathlib.Path(args.out_dir)
    steps = []
    with open(out_dir / "steps.tsv", newline="") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) < 4:
                continue
            name, status, seconds, reason = row[:4]
            steps.append({"name": name, "status": status, "seconds": float(seconds or 0), "reason": reason,
                          "key": (row[4] if len(row) > 4 and row[4] else "") or key_for(out_dir, name)})
    recorded = {s["name"] for s in steps}
    for name in filter(None, args.pending.split(",")):
        if name not in recorded:
            steps.append({"name": name, "status": "pending", "seconds": 0.0,
                          "reason": "not reached: the run is still going, or was stopped from outside", "key": ""})
    counts = {s: sum(x["status"] == s for x in steps)
              for s in ("pass", "fail", "timeout", "skipped", "unrun", "pending")}
    failed = counts["fail"] > 0 or counts["timeout"] > 0
    # A step the budget left no time for ("unrun") or not reached yet ("pending") measured nothing:
    # the check is incomplete, not green.
    ok = bool(steps) and not failed and counts["unrun"] == 0 and counts["pending"] == 0
    bundle = load(out_dir / "bundle.json")  # the bundle's build: commit, date, whether dirty
    overall = "pass" if ok else "incomplete" if steps and not failed else "fail"
    summary = {"mode": "dry-run" if args.dry_run else "gpu", "overall": overall, "counts": counts,
               "bundle": bundle,
               "elapsed_seconds": args.elapsed, "budget_seconds": args.budget, "steps": steps,
               "targets": [] if args.dry_run else readable_targets(out_dir, steps)}
    with open(out_dir / "summary.json", "w") as f:
        json.dump(summary, f, indent=1)

    if bundle:
        print(f"\nbundle: commit {bundle.get('git_commit', '?')[:12]}{' (dirty)' if bundle.get('git_dirty') else ''}, "
              f"built {bundle.get('date', '?')}, march {bundle.get('march', '?')}")
    print(f"\n{'step':<18} {'status':<8} {'seconds':>7}  key figure / reason")
    for s in steps:
        detail = s["key"] if s["status"] == "pass" else (s["reason"] + ("; " + s["key"] if s["key"] else ""))
        print(f"{s['name']:<18} {s['status']:<8} {s['seconds']:7.1f}  {detail}")
    if summary["targets"]:
        print("\ntargets (issue 14 unless named)")
        for t in summary["targets"]:
            met = {True: "MET", False: "NOT MET", None: "-"}[t["met"]]
            print(f"  {met:<8} {t['target']}: {t['measured']}")
    verdict = overall.upper()
    label = "DRY RUN (nothing measured on a GPU)" if args.dry_run else "GPU CHECK"
    if not steps:
        print(f"{label}: FAIL - no step ran")
    else:
        print(f"{label}: {verdict} - {counts['pass']} passed, {counts['fail']} failed, {counts['timeout']} timed out, "
              f"{counts['skipped']} skipped, {counts['unrun']} not run (out of time)"
              + (f", {counts['pending']} not reached yet" if counts["pending"] else "") + f", in {args.elapsed:.0f} s of a "
              f"{args.budget:.0f} s budget")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
