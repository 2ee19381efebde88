"""Chinchilla's Approach 1 (Hoffmann et al. 2022, section 3.1): the lower envelope of the training
curves.

Each run's curve (tokens seen, smoothed training loss) becomes loss as a function of compute,
C_t = tokens_t x (the run's FLOPs per token, C/D), interpolated by a cubic spline in log C between
its points (a record carries 64: linear interpolation's O(h^2) error, the same sign on every
convex curve, moved the exponent by ~4e-4; the spline's O(h^4) by ~4e-6). At `n_grid` log-spaced compute values the run with the lowest loss among those whose curve
reaches that C gives N_opt(C) = its N and D_opt(C) = C / (the sweep's FLOPs per token at N_opt:
`Sweep.flops_per_token`, 6 N_opt when the records count C = 6ND); straight lines through
log N_opt and log D_opt against log C give the exponents a and b. A compute value counts only
where the winning size's next smaller and next larger trained sizes reach it too (otherwise the
optimum may lie outside the sizes trained, as for Approach 2's vertices). The winner is one of the trained sizes, so Hoffmann et al.'s N_opt(C) is a staircase
whose exponents are only as fine as the sizes are dense; by default the minimum of a polynomial in
log N through the winner and its neighbouring sizes refines it: a quartic through five sizes where
the winner has two trained on each side, else a parabola through three (`refine=False`: the
winner). The profile L(log N) at fixed C is not a polynomial, so the parabola's vertex is off by
O(h^2) in the size spacing h (~3e-6 in the exponent with 41 sizes per budget); the quartic's by
O(h^4) (~5e-10).
"""

import numpy as np
from scipy.interpolate import CubicSpline



def curve_matrix(sweep, grid):
    """[runs, grid] loss of each run's curve at each compute value (NaN where it does not reach)."""
    out = np.full((len(sweep), len(grid)), np.nan)
    log_grid = np.log(grid)
    for i, curve in enumerate(sweep.curves):
        if curve is None:
            continue
        tokens, loss = curve
        log_c = np.log(tokens * (sweep.C[i] / sweep.D[i]))
        log_c, first = np.unique(log_c, return_index=True)  # sorted; a repeated point counts once
        loss = np.asarray(loss)[first]
        inside = (log_grid >= log_c[0]) & (log_grid <= log_c[-1])
        if len(log_c) >= 4:
            out[i, inside] = CubicSpline(log_c, loss)(log_grid[inside])
        else:  # too few points for a spline
            out[i, inside] = np.interp(log_grid[inside], log_c, loss)
    return out


def compute_grid(sweep, n_grid):
    """n_grid log-spaced values across every curve's compute range."""
    lows, highs = [], []
    for i, curve in enumerate(sweep.curves):
        if curve is not None:
            flops = curve[0] * (sweep.C[i] / sweep.D[i])
            lows.append(flops.min())
            highs.append(flops.max())
    return np.geomspace(min(lows), max(highs), n_grid) if lows else np.array([])


def parabola_vertex(x0, x1, x2, y0, y1, y2):
    """x of the vertex of the parabola through three points (arrays), relative to the middle one
    (stable for close points, where a polyfit in absolute x is ill-conditioned)."""
    d0, d2, u0, u2 = x0 - x1, x2 - x1, y0 - y1, y2 - y1
    denominator = d0 * u2 - d2 * u0
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = 0.5 * (d0 * d0 * u2 - d2 * d2 * u0) / denominator
    return np.where(denominator != 0, x1 + shift, x1)


MIN_QUARTIC_WINNERS = 3  # winning sizes with a five-size stencil needed to fit on the quartic's columns


def envelope_optima(N, losses, refine=True):
    """Per grid column, N_opt where the winning size's two neighbouring sizes reach it too, else NaN.

    Each size's loss at a compute value is its best run's there. The winner is the size with the
    lowest loss; it counts only with a smaller and a larger trained size reaching the same compute
    (an optimum at the edge of the sizes is outside them). refine: the minimum of the quartic
    through the winner and two sizes on each side (or, in sparse sweeps, the parabola through it
    and one on each side) instead of the winner itself, which turns the staircase into a
    continuous N_opt(C) (Hoffmann et al. take the winner)."""
    sizes = np.unique(N)
    per_size = np.array([np.fmin.reduce(losses[N == n], axis=0) for n in sizes])  # [sizes, grid], NaN: none
    filled = np.where(np.isfinite(per_size), per_size, np.inf)
    k = filled.argmin(axis=0)
    columns = np.arange(losses.shape[1])
    n_opt = np.full(losses.shape[1], np.nan)
    ok = np.isfinite(filled[k, columns]) & (k > 0) & (k < len(sizes) - 1)
    k, columns = k[ok], columns[ok]
    below, above = filled[k - 1, columns], filled[k + 1, columns]
    ok2 = np.isfinite(below) & np.isfinite(above)
    k, columns, below, above = k[ok2], columns[ok2], below[ok2], above[ok2]
    if not refine:
        n_opt[columns] = sizes[k]
        return n_opt
    x = np.log(sizes)
    vertex = parabola_vertex(x[k - 1], x[k], x[k + 1], below, filled[k, columns], above)
    # The quartic through five sizes, where two on each side of the winner reach this compute.
    # Mixing the two stencils would tie the line's ends (where only the parabola fits) to a
    # different bias than its middle, so the quartic's columns are used alone when they span at
    # least MIN_QUARTIC_WINNERS winning sizes; otherwise (sparse sweeps) every column's parabola.
    wide = (k > 1) & (k < len(sizes) - 2)
    wide[wide] &= np.isfinite(filled[k[wide] - 2, columns[wide]]) & np.isfinite(filled[k[wide] + 2, columns[wide]])
    if len(np.unique(k[wide])) >= MIN_QUARTIC_WINNERS:
        k, columns = k[wide], columns[wide]
        vertex = quartic_minimum(x, filled, k, columns, vertex[wide])
    n_opt[columns] = np.exp(vertex)
    return n_opt


def quartic_minimum(x, filled, k, columns, start, newton_steps=8):
    """Per column, the minimum of the quartic in log N through sizes k-2..k+2, found by Newton's
    method on its derivative from the parabola's vertex `start` and kept within the winner's
    neighbours [x[k-1], x[k+1]]. Coordinates relative to x[k] and values to the winner's loss keep
    the 5x5 systems well conditioned."""
    offsets = np.arange(-2, 3)
    u = x[k[:, None] + offsets] - x[k][:, None]  # [cols, 5] log N relative to the winner
    y = filled[k[:, None] + offsets, columns[:, None]] - filled[k, columns][:, None]
    coefficients = np.linalg.solve(u[:, :, None] ** np.arange(5), y[:, :, None])[:, :, 0]  # c0 + c1 u + ... c4 u^4
    c1, c2, c3, c4 = (coefficients[:, j] for j in range(1, 5))
    lo, hi = u[:, 1], u[:, 3]
    t = np.clip(start - x[k], lo, hi)
    for _ in range(newton_steps):
        slope = c1 + 2 * c2 * t + 3 * c3 * t ** 2 + 4 * c4 * t ** 3
        curvature = 2 * c2 + 6 * c3 * t + 12 * c4 * t ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(curvature > 0, slope / curvature, 0.0)
        t = np.clip(t - step, lo, hi)
    return x[k] + t


def fit_approach1(sweep, n_grid=1500, matrix=None, grid=None, refine=True):
    """{"a", "b", "N_coefficient", "D_coefficient", "n_points", "note", "envelope": [[C, N_opt], ...]}."""
    result = {"a": None, "b": None, "N_coefficient": None, "D_coefficient": None, "n_points": 0, "envelope": []}
    if not sweep.curves or all(c is None for c in sweep.curves):
        result["note"] = "the runs have no training curves (records without 'curve'): no Approach 1"
        return result
    if grid is None:
        grid = compute_grid(sweep, n_grid)
    if matrix is None:
        matrix = curve_matrix(sweep, grid)
    n_opt = envelope_optima(sweep.N, matrix, refine=refine)
    used = np.isfinite(n_opt)
    result["n_points"] = int(used.sum())
    if used.sum() < 2 or len(np.unique(n_opt[used])) < 2:
        result["note"] = ("fewer than two model sizes win the envelope in the interior of the sizes trained: "
                          "no power law")
        return result
    log_c, log_n = np.log(grid[used]), np.log(n_opt[used])
    a, log_kn = np.polyfit(log_c, log_n, 1)
    log_d = log_c - np.log(sweep.flops_per_token(n_opt[used]))
    b, log_kd = np.polyfit(log_c, log_d, 1)
    # The envelope as (C, N_opt) where N_opt changes (the staircase's corners), for plots.
    corners = [[float(grid[used][0]), float(n_opt[used][0])]]
    for c, n in zip(grid[used][1:], n_opt[used][1:]):
        if n != corners[-1][1]:
            corners.append([float(c), float(n)])
    result.update(a=float(a), b=float(b), N_coefficient=float(np.exp(log_kn)), D_coefficient=float(np.exp(log_kd)),
                  envelope=corners, note=f"{int(used.sum())} of {len(grid)} compute values with an interior winner")
    return result
