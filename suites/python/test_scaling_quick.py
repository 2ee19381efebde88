"""The quick scaling-law preset end to end: a 4-budget x 4-size IsoFLOP sweep on the synthetic
Markov corpus, whose entropy rate H is known exactly, then the fits. The irreducible loss E of
L(N, D) = E + A/N^alpha + B/D^beta must bracket H within its bootstrap 95% CI. (E sits slightly
above H: no model this small reaches H in these budgets, and E absorbs that remainder; the CI is
wide because the chain is easy and all losses lie within ~0.2 nats.) Deterministic: training is
bit-reproducible and the bootstrap is seeded. About 3 minutes on 2 cores, or 25 s where CTest's
fixture has trained the sweep already (tripod_cli.quick_sweep)."""
import json
import subprocess


from tripod_cli import TRIPOD, quick_sweep, require_tripod


def test_quick_sweep_recovers_the_entropy_rate(tmp_path):
    require_tripod()
    out = quick_sweep(tmp_path / "quick")
    result = subprocess.run([str(TRIPOD), "scale", "fit", str(out), "--bootstrap", "200"], capture_output=True,
                            text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    fit = json.loads((out / "fit.json").read_text())
    H = json.loads((out / "sweep.json").read_text())["corpus"]["entropy_rate_nats"]
    lo, hi = fit["E"]["ci"]
    print(f"E = {fit['E']['value']:.4f} [{lo:.4f}, {hi:.4f}], H = {H:.4f}, a = {fit['a']['value']:.3f}")
    assert lo <= H <= hi
    assert fit["optimizer"]["success"]
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(records) == 16 and all(r["status"] == "ok" for r in records)
