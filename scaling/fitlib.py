"""The three fits of a scaling sweep.

Approach 2 (Hoffmann et al. 2022): per IsoFLOP budget a parabola of loss in log N; its vertex is
  that budget's N_opt, and D_opt = C / (the sweep's FLOPs per token at N_opt); then straight lines
  log N_opt = a log C + c, log D_opt = b log C + c.
Approach 3: L(N, D) = E + A/N^alpha + B/D^beta by Huber loss on log L, L-BFGS-B from a grid.
Frontier (Kaplan-style): L(C) = L_inf + k C^-gamma through the best run of each budget.
Natural logarithms throughout.
"""

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import logsumexp, softmax

from scaling.laws import ParametricLaw

HUBER_DELTA = 1e-3

# ---------------------------------------------------------------- Approach 2: IsoFLOP parabolas


def isoflop_minima(sweep, min_points=3):
    """One entry per budget with >= min_points distinct N: the vertex of loss ~ poly2(log N).

    A vertex outside the sampled N range is an extrapolation (the sweep missed the optimum), and
    a parabola opening downwards has no minimum at all: both are kept, flagged interior=False.
    """
    minima = []
    for label, idx, C in sweep.budgets():
        log_n = np.log(sweep.N[idx])
        if len(np.unique(log_n)) < min_points:
            continue
        curvature, slope, offset = np.polyfit(log_n, sweep.loss[idx], 2)
        entry = {"budget": label, "C": C, "n_points": int(len(idx)),
                 "N_min_sampled": float(np.exp(log_n.min())),
                 "N_max_sampled": float(np.exp(log_n.max())),
                 "parabola": [float(curvature), float(slope), float(offset)]}
        if curvature <= 0:
            entry.update(N_opt=None, D_opt=None, loss_min=None, interior=False,
                         note="parabola opens downwards: no minimum")
        else:
            x_opt = -slope / (2 * curvature)
            n_opt = float(np.exp(x_opt))
            entry.update(N_opt=n_opt, D_opt=float(C / sweep.flops_per_token(n_opt)),
                         loss_min=float(np.polyval([curvature, slope, offset], x_opt)),
                         interior=bool(log_n.min() <= x_opt <= log_n.max()))
        minima.append(entry)
    return minima


def fit_approach2(sweep):
    """Power laws through the interior IsoFLOP minima (extrapolated vertices are not trusted)."""
    minima = isoflop_minima(sweep)
    used = [m for m in minima if m["interior"]]
    result = {"minima": minima, "n_budgets_used": len(used), "a": None, "b": None,
              "N_coefficient": None, "D_coefficient": None}
    if len(used) < 2:
        result["note"] = "fewer than 2 budgets with an interior minimum: no power law"
        return result
    log_c = np.log([m["C"] for m in used])
    a, log_kn = np.polyfit(log_c, np.log([m["N_opt"] for m in used]), 1)
    b, log_kd = np.polyfit(log_c, np.log([m["D_opt"] for m in used]), 1)
    result.update(a=float(a), b=float(b), N_coefficient=float(np.exp(log_kn)),
                  D_coefficient=float(np.exp(log_kd)))
    return result


# --------------------------------------------------------------- Approach 3: parametric L(N, D)

# theta = (e, a_, b_, alpha, beta) with E = exp(e), A = exp(a_), B = exp(b_).
FULL_INIT_GRID = {"alpha": np.arange(0, 2.01, 0.5), "beta": np.arange(0, 2.01, 0.5),
                  "e": np.arange(-1, 1.51, 0.5), "a_": np.arange(0, 25.1, 5),
                  "b_": np.arange(0, 25.1, 5)}
SMALL_INIT_GRID = {"alpha": [0.5, 1.0], "beta": [0.5, 1.0], "e": [0.0, 0.5],
                   "a_": [0.0, 5.0, 10.0], "b_": [0.0, 5.0, 10.0]}
PARAMETER_BOUNDS = [(-5, 5), (-20, 60), (-20, 60), (0, 5), (0, 5)]
LBFGS_OPTIONS = {"maxiter": 10000, "maxfun": 50000, "ftol": 1e-15, "gtol": 1e-12}


def _huber_and_derivative(r, delta):
    small = np.abs(r) <= delta
    value = np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))
    return value, np.where(small, r, delta * np.sign(r))


def huber_objective(theta, log_n, log_d, log_loss, delta=HUBER_DELTA):
    """sum_i Huber(LSE(a_ - alpha log N, b_ - beta log D, e) - log L) and its gradient."""
    e, a_, b_, alpha, beta = theta
    terms = np.stack([a_ - alpha * log_n, b_ - beta * log_d, np.full_like(log_n, e)])
    residual = logsumexp(terms, axis=0) - log_loss
    value, dvalue = _huber_and_derivative(residual, delta)
    w = softmax(terms, axis=0) * dvalue            # d residual / d term, weighted
    grad = np.array([w[2].sum(), w[0].sum(), w[1].sum(),
                     -(w[0] * log_n).sum(), -(w[1] * log_d).sum()])
    return value.sum(), grad


def _grid_objectives(grid, log_n, log_d, log_loss, delta):
    """Objective at every grid point at once (vectorised), so that the grid can be screened."""
    points = np.array(list(itertools.product(grid["e"], grid["a_"], grid["b_"],
                                             grid["alpha"], grid["beta"])), float)
    e, a_, b_, alpha, beta = (points[:, [k]] for k in range(5))
    terms = np.stack([a_ - alpha * log_n, b_ - beta * log_d, np.broadcast_to(e, (len(e), len(log_n)))])
    value, _ = _huber_and_derivative(logsumexp(terms, axis=0) - log_loss, delta)
    return points, value.sum(axis=1)


def screened_starts(grid, log_n, log_d, log_loss, delta=HUBER_DELTA):
    """For each (alpha, beta) of the grid, the (e, a_, b_) with the lowest objective.

    Running L-BFGS-B from all of Hoffmann's 5400 starts takes minutes; the objective at a start is
    cheap to evaluate for the whole grid at once. Keeping the best start per exponent pair keeps
    the starts diverse in the directions where the objective has separate basins (the exponents).
    """
    points, values = _grid_objectives(grid, log_n, log_d, log_loss, delta)
    best = {}
    for point, value in zip(points, values):
        key = (point[3], point[4])
        if key not in best or value < best[key][1]:
            best[key] = (point, value)
    return len(points), [p for p, _ in sorted(best.values(), key=lambda pv: pv[1])]


@dataclass
class ParametricFit:
    law: ParametricLaw
    theta: np.ndarray
    objective: float
    success: bool
    message: str
    iterations: int
    grid_size: int
    n_starts: int

    def optimizer_status(self):
        return {"method": "L-BFGS-B", "loss": "Huber on log L", "huber_delta": HUBER_DELTA,
                "success": self.success, "message": self.message, "iterations": self.iterations,
                "objective": self.objective, "grid_size": self.grid_size,
                "n_starts": self.n_starts}


def fit_approach3(sweep, grid=None, extra_starts=(), max_starts=None, delta=HUBER_DELTA):
    """Best L-BFGS-B fit of L(N, D) over the screened grid starts plus `extra_starts` (theta)."""
    grid = FULL_INIT_GRID if grid is None else grid
    log_n, log_d, log_loss = np.log(sweep.N), np.log(sweep.D), np.log(sweep.loss)
    grid_size, starts = screened_starts(grid, log_n, log_d, log_loss, delta)
    starts = [np.asarray(s, float) for s in extra_starts] + starts[:max_starts]
    best = None
    for start in starts:
        res = minimize(huber_objective, start, args=(log_n, log_d, log_loss, delta), jac=True,
                       method="L-BFGS-B", bounds=PARAMETER_BOUNDS, options=LBFGS_OPTIONS)
        if best is None or res.fun < best.fun:
            best = res
    e, a_, b_, alpha, beta = best.x
    law = ParametricLaw(E=float(np.exp(e)), A=float(np.exp(a_)), B=float(np.exp(b_)),
                        alpha=float(alpha), beta=float(beta))
    return ParametricFit(law=law, theta=best.x, objective=float(best.fun),
                         success=bool(best.success), message=str(best.message),
                         iterations=int(best.nit), grid_size=grid_size, n_starts=len(starts))


def law_to_theta(law):
    return np.array([np.log(law.E), np.log(law.A), np.log(law.B), law.alpha, law.beta])


# ------------------------------------------------------------ Frontier: L(C) = L_inf + k C^-gamma


def lower_envelope(sweep):
    """The best (C, loss) of each budget, ordered by C."""
    points = []
    for _, idx, _ in sweep.budgets():
        best = idx[np.argmin(sweep.loss[idx])]
        points.append((float(sweep.C[best]), float(sweep.loss[best])))
    return np.array(points)


MIN_GAMMA = 1e-4


def _bounded_least_squares(x, y, lo, hi):
    """min ||L + k x - y||^2 over k and L in [lo, hi] (two unknowns, one of them bounded).

    The unconstrained optimum is used when its L is inside the bounds; otherwise the optimum lies
    on the bound it crossed (the objective is a convex quadratic), where k is a 1-D least squares.
    Returns (L, k, sse, bound) with bound None, "lower" or "upper".
    """
    design = np.column_stack([np.ones_like(x), x])
    (L, k), *_ = np.linalg.lstsq(design, y, rcond=None)
    bound = None
    if L < lo or L > hi:
        bound = "lower" if L < lo else "upper"
        L = lo if L < lo else hi
        k = float(np.dot(x, y - L) / np.dot(x, x))
    sse = float(np.sum((L + k * x - y) ** 2))
    return float(L), float(k), sse, bound


def fit_frontier(sweep, max_gamma=3.0):
    """Least squares L_inf + k C^-gamma through the lower envelope, with 0 <= L_inf <= min loss.

    An irreducible loss is a loss: it cannot be negative, and it cannot exceed the lowest loss
    observed (every run has reached below it otherwise). For fixed gamma the model is linear in
    (L_inf, k), so only gamma is searched (scan, then a bounded 1-D refinement) -- no starting
    values to guess. C is scaled by its geometric mean C0 inside the fit so that the two columns
    are of comparable size. `flags` says in words where the fit is not to be trusted: L_inf or
    gamma on a bound of its range.
    """
    envelope = lower_envelope(sweep)
    result = {"points": envelope.tolist(), "L_inf": None, "k": None, "gamma": None, "flags": []}
    if len(envelope) < 3:
        result["note"] = "fewer than 3 budgets: L_inf + k C^-gamma is not determined"
        return result
    C, loss = envelope[:, 0], envelope[:, 1]
    C0 = float(np.exp(np.mean(np.log(C))))
    upper = float(loss.min())

    def solve(gamma):
        return _bounded_least_squares((C / C0) ** -gamma, loss, 0.0, upper)

    scan = np.linspace(MIN_GAMMA, max_gamma, 300)
    i = int(np.argmin([solve(g)[2] for g in scan]))
    bracket = (scan[max(i - 1, 0)], scan[min(i + 1, len(scan) - 1)])
    gamma = float(minimize_scalar(lambda g: solve(g)[2], bounds=bracket, method="bounded",
                                  options={"xatol": 1e-10}).x)
    l_inf, k0, sse, bound = solve(gamma)
    residuals = (l_inf + k0 * (C / C0) ** -gamma - loss).tolist()
    flags = []
    if bound == "lower":
        flags.append("L_inf sits on its lower bound 0: these budgets do not show the loss levelling "
                     "off, so the irreducible loss is not determined (an unbounded fit would go negative)")
    if bound == "upper":
        flags.append("L_inf sits on its upper bound, the lowest observed loss: the envelope does not "
                     "fall like a power law above a floor")
    if gamma <= scan[1] or gamma >= max_gamma - (scan[1] - scan[0]):
        flags.append(f"gamma = {gamma:.3g} sits at the end of its search range [{MIN_GAMMA}, {max_gamma}]")
    result.update(L_inf=l_inf, k=float(k0 * C0 ** gamma), gamma=gamma, C0=C0, k_at_C0=k0, sse=sse,
                  residuals=residuals, L_inf_bounds=[0.0, upper], L_inf_at_bound=bound, flags=flags)
    return result


def interval_flags(name, ci, orders=1.0):
    """Words for a bootstrap interval that says little: one spanning more than `orders` decades
    (or reaching zero from a positive estimate's side)."""
    if not ci or ci[0] is None or ci[1] is None:
        return []
    lo, hi = ci
    if hi <= 0:
        return []
    if lo <= 0 or np.log10(hi / lo) > orders:
        return [f"the 95% interval of {name}, [{lo:.3g}, {hi:.3g}], spans more than "
                f"{'a factor of 10' if orders == 1 else f'{orders:g} decades'}: these runs do not "
                f"determine it"]
    return []
