"""The OUT.json document (a contract other tools read) and its Markdown rendering."""

import json
import math

import numpy as np

from reports.output_file import write_text_replacing
from scaling.fitlib import interval_flags
from scaling.laws import (CHINCHILLA, CHINCHILLA_TOKENS_PER_PARAM, EPOCH_2024, KAPLAN_N_OPT_EXPONENT, ParametricLaw,
                          reference_block)


def estimate(value, ci=None):
    return {"value": value, "ci": ci}


def round_budgets(C_values, decades_beyond=2):
    """Powers of ten from the smallest budget's decade to `decades_beyond` past the largest."""
    lo = math.floor(math.log10(min(C_values)))
    hi = math.ceil(math.log10(max(C_values))) + decades_beyond
    return [10.0 ** k for k in range(lo, hi + 1)]


def tokens_per_parameter_rows(law, approach2, data_budgets):
    """D_opt/N_opt at each budget of the data and at round budgets, by each approach."""
    def approach2_ratio(C):
        if approach2["a"] is None:
            return None
        return (approach2["D_coefficient"] * C ** approach2["b"]
                / (approach2["N_coefficient"] * C ** approach2["a"]))

    rows = []
    for source, budgets in (("data", data_budgets), ("round", round_budgets(data_budgets))):
        for C in budgets:
            rows.append({"C": C, "source": source,
                         "approach3": float(law.tokens_per_param(C)),
                         "approach2": approach2_ratio(C),
                         "chinchilla_law": float(CHINCHILLA.tokens_per_param(C)),
                         "epoch2024_law": float(EPOCH_2024.tokens_per_param(C)),
                         "chinchilla_rule_of_thumb": CHINCHILLA_TOKENS_PER_PARAM})
    return rows


def side_by_side(report):
    """a of N_opt ~ C^a by each approach, and what its interval says about Kaplan's 0.73 and 0.5."""
    rows = []
    for name, est in (("Approach 1", report["approach1"]["a"]), ("Approach 2", report["approach2"]["a"]),
                      ("Approach 3", report["a"])):
        ci = est["ci"]
        rows.append({"approach": name, "a": est["value"], "ci": ci,
                     "excludes_kaplan_0.73": None if not ci else not (ci[0] <= KAPLAN_N_OPT_EXPONENT <= ci[1]),
                     "includes_0.5": None if not ci else bool(ci[0] <= 0.5 <= ci[1])})
    return rows


def build_report(sweep, excluded, n_records, fit3, approach2, frontier, boot, bootstrap_settings, approach1=None):
    """Everything the fits found, as a JSON-ready dict (CIs are None without a bootstrap)."""
    ci = boot["ci"] if boot else {}
    law = fit3.law
    report = {key: estimate(getattr(law, key), ci.get(key))
              for key in ("E", "A", "B", "alpha", "beta", "a", "b")}
    report["G"] = law.G
    report["compute_optimal"] = "N_opt = G (C/6)^a, D_opt = G^-1 (C/6)^b"
    report["approach2"] = {
        "a": estimate(approach2["a"], ci.get("approach2_a")),
        "b": estimate(approach2["b"], ci.get("approach2_b")),
        "N_coefficient": approach2["N_coefficient"], "D_coefficient": approach2["D_coefficient"],
        "n_budgets_used": approach2["n_budgets_used"], "minima": approach2["minima"],
        "note": approach2.get("note", "power laws fitted to the interior minima only")}
    report["isoflop_minima"] = approach2["minima"]
    approach1 = approach1 or {"a": None, "b": None, "note": "not fitted"}
    report["approach1"] = {
        "a": estimate(approach1["a"], ci.get("approach1_a")),
        "b": estimate(approach1["b"], ci.get("approach1_b")),
        "N_coefficient": approach1.get("N_coefficient"), "D_coefficient": approach1.get("D_coefficient"),
        "n_points": approach1.get("n_points", 0), "envelope": approach1.get("envelope", []),
        "note": approach1.get("note")}
    report["frontier"] = {
        "model": "L(C) = L_inf + k C^-gamma through the best run of each budget",
        "L_inf": estimate(frontier["L_inf"], ci.get("frontier_L_inf")),
        "k": estimate(frontier["k"], ci.get("frontier_k")),
        "gamma": estimate(frontier["gamma"], ci.get("frontier_gamma")),
        "gamma_implied_by_approach3": law.frontier_exponent,
        "points": frontier["points"], "note": frontier.get("note"),
        "residuals": frontier.get("residuals"), "L_inf_bounds": frontier.get("L_inf_bounds"),
        "flags": list(frontier.get("flags", []))}
    for key in ("L_inf", "k", "gamma"):
        report["frontier"]["flags"] += interval_flags(f"the frontier's {key}", ci.get(f"frontier_{key}"))
    report["a_side_by_side"] = side_by_side(report)
    report["tokens_per_parameter"] = tokens_per_parameter_rows(
        law, approach2, [C for _, _, C in sweep.budgets()])
    report["optimizer"] = fit3.optimizer_status()
    report["bootstrap"] = dict(bootstrap_settings, ci_percentiles=[2.5, 97.5],
                               n_ok=boot["n_ok"] if boot else None,
                               # why a parameter has no interval where the resampling cannot say
                               ci_notes=boot.get("ci_notes", {}) if boot else {},
                               # whole replicates, for quantities of several parameters (scale advise)
                               approach3_laws=boot["approach3_laws"] if boot else [],
                               frontier_fits=boot["frontier_fits"] if boot else [])
    report["excluded"] = excluded
    report["n_runs"] = len(sweep)
    report["n_records"] = n_records
    report["references"] = reference_block()
    return report


def _json_safe(value):
    """numpy scalars to Python, NaN/inf to null (JSON has neither)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(report, path):
    write_text_replacing(path, json.dumps(_json_safe(report), indent=2) + "\n")


def law_from_report(report):
    return ParametricLaw(**{k: report[k]["value"] for k in ("E", "A", "B", "alpha", "beta")})


def _fmt(x):
    return "—" if x is None else f"{x:.4g}"


def _ci(ci):
    return "—" if not ci else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def render_markdown(report):
    refs = report["references"]
    rows = [(k, report[k], refs["chinchilla"].get(k), refs["epoch2024"].get(k))
            for k in ("E", "A", "B", "alpha", "beta", "a", "b")]
    rows += [("a (Approach 1)", report["approach1"]["a"], refs["chinchilla"]["a"], None),
             ("b (Approach 1)", report["approach1"]["b"], refs["chinchilla"]["b"], None),
             ("a (Approach 2)", report["approach2"]["a"], refs["chinchilla"]["a"], None),
             ("b (Approach 2)", report["approach2"]["b"], refs["chinchilla"]["b"], None)]
    rows += [(f"frontier {k}", report["frontier"][k], None, None) for k in ("L_inf", "k", "gamma")]
    out = ["# Scaling-law fit", "",
           f"{report['n_runs']} runs fitted, {len(report['excluded'])} excluded; "
           f"bootstrap: {report['bootstrap']['n_resamples']} resamples.", "",
           "| parameter | estimate | 95% CI | Chinchilla 2022 | Epoch 2024 |",
           "|---|---|---|---|---|"]
    out += [f"| {name} | {_fmt(est['value'])} | {_ci(est['ci'])} | {_fmt(c)} | {_fmt(e)} |"
            for name, est, c, e in rows]
    out += ["", f"Kaplan et al. 2020: a = {refs['kaplan']['a']}. Frontier gamma implied by "
            f"Approach 3: {_fmt(report['frontier']['gamma_implied_by_approach3'])}.", "",
            "## a of N_opt ∝ C^a by the three approaches", "",
            "| approach | a | 95% CI | excludes Kaplan's 0.73 | includes 0.5 |", "|---|---|---|---|---|"]
    yes_no = lambda x: "—" if x is None else ("yes" if x else "no")
    out += [f"| {r['approach']} | {_fmt(r['a'])} | {_ci(r['ci'])} | {yes_no(r['excludes_kaplan_0.73'])} | "
            f"{yes_no(r['includes_0.5'])} |" for r in report["a_side_by_side"]]
    out += ["", f"Approach 1: {report['approach1'].get('note')}.", "",
            "## IsoFLOP minima (Approach 2)", "",
            "| budget | C | points | N_opt | D_opt | loss at min | interior |", "|---|---|---|---|---|---|---|"]
    out += [f"| {m['budget']} | {_fmt(m['C'])} | {m['n_points']} | {_fmt(m['N_opt'])} | "
            f"{_fmt(m['D_opt'])} | {_fmt(m['loss_min'])} | {'yes' if m['interior'] else '**no**'} |"
            for m in report["isoflop_minima"]]
    out += ["", "## Optimal tokens per parameter D_opt/N_opt", "",
            "| C | from | Approach 3 | Approach 2 | Chinchilla law | Epoch law | rule of thumb |",
            "|---|---|---|---|---|---|---|"]
    out += [f"| {_fmt(r['C'])} | {r['source']} | {_fmt(r['approach3'])} | {_fmt(r['approach2'])} | "
            f"{_fmt(r['chinchilla_law'])} | {_fmt(r['epoch2024_law'])} | {_fmt(r['chinchilla_rule_of_thumb'])} |"
            for r in report["tokens_per_parameter"]]
    notes = report["bootstrap"].get("ci_notes") or {}
    if notes:
        out += ["", "## Parameters without an interval", ""]
        out += [f"- **{key}**: {note}" for key, note in notes.items()]
    flags = report["frontier"].get("flags") or []
    if flags:
        out += ["", "## Warnings: the compute frontier", ""]
        out += [f"- **{flag}**" for flag in flags]
    residuals = report["frontier"].get("residuals")
    if residuals:
        out += ["", "Frontier residuals (fit − envelope) per budget: "
                + ", ".join(f"{r:+.3g}" for r in residuals) + "."]
    opt = report["optimizer"]
    out += ["", "## Approach 3 optimizer", "",
            f"L-BFGS-B, Huber delta {opt['huber_delta']}, {opt['n_starts']} starts screened from a "
            f"grid of {opt['grid_size']}: success={opt['success']}, {opt['iterations']} iterations, "
            f"objective {opt['objective']:.4g}, message: {opt['message']}"]
    if report["excluded"]:
        out += ["", "## Excluded runs", ""]
        out += [f"- {x['name']}" + ("" if x["name"] == f"line {x['line']}" else f" (line {x['line']})")
                + f": {x['reason']}" for x in report["excluded"]]
    return "\n".join(out) + "\n"
