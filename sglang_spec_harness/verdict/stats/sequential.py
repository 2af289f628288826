"""Group-sequential boundaries: how strict each look at the TPOT data must be so that, over all the
looks a run may take, a false verdict stays within the rule's alpha.

The method is Lan and DeMets' alpha spending (Lan & DeMets 1983, "Discrete sequential boundaries for
clinical trials", Biometrika 70:659-663; Jennison & Turnbull 2000, "Group Sequential Methods with
Applications to Clinical Trials", ch. 7). A spending function a(t) says how much of the one-sided
level a run may have spent by information fraction t (a(0) = 0, a(1) = the level). At look k, with
fractions t_1 < ... < t_k, the boundary c_k of the standardized statistic is the value with

    P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = a(t_k) - a(t_{k-1})

under no effect, where Z_j = S(t_j) / sqrt(t_j) for a Brownian motion S (independent increments:
corr(Z_i, Z_j) = sqrt(t_i / t_j)). The probability is computed by the recursive numerical integration
of Armitage, McPherson and Rowe (1969, J. R. Stat. Soc. A 132:235-244) on a fixed grid: deterministic,
so `harness check` recomputes the same boundaries from the fractions a run recorded.

Why spending rather than an anytime-valid confidence sequence: the looks here are few and at known
points (after each stage of rounds), a budget caps the information, and the verdict already rests on
a mixed-model t interval; spending keeps that interval and only changes its level per look, and at
the last look (t = 1) it spends what is left, so a run that reaches its budget loses little power
against the fixed design. A confidence sequence pays for looking at every sample, which the run never
does. The looks' times may depend on the noise (a stage adds a launch when launch-to-launch variance
dominates, or stops at the minutes budget), never on the effect's estimate: a nuisance-based
adaptation, which keeps the error rates (Wittes & Brittain 1990, Stat. Med. 9:65-72); the
simulation in benchmarks/adaptive_verdict.py measures it on resampled real blocks.

The t statistic of the mixed model is compared through its p value with each look's nominal level
1 - Phi(c_k) (Jennison & Turnbull 2000, section 3.8: the "significance level" approach for t tests).

Spending functions (one-sided level `a`):
- `pocock`: a * ln(1 + (e - 1) t) (Kim & DeMets 1987, Biometrics 43:857-864): spends evenly, so a
  clear effect stops at an early look; the default, since a run's cost is the point.
- `obrien_fleming`: 2 - 2 Phi(z_{a/2} / sqrt(t)): almost nothing early, nearly all of `a` at t = 1.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from scipy import optimize
from scipy.stats import norm

Spending = Literal["pocock", "obrien_fleming"]
SPENDING_FUNCTIONS: tuple[Spending, ...] = ("pocock", "obrien_fleming")
_GRID = 801  # points of the integration grid (per look)
_SPAN = 10.0  # the grid reaches this many standard deviations below the process's mean


def spent(t: float, level: float, spending: Spending) -> float:
    """The one-sided level spent by information fraction t (clipped to [0, 1])."""
    t = min(max(float(t), 0.0), 1.0)
    if t <= 0.0:
        return 0.0
    if spending == "pocock":
        return level * math.log(1.0 + (math.e - 1.0) * t)
    if spending == "obrien_fleming":
        return float(2.0 - 2.0 * norm.cdf(norm.ppf(1.0 - level / 2.0) / math.sqrt(t)))
    raise ValueError(f"unknown spending function {spending!r}; known: {', '.join(SPENDING_FUNCTIONS)}")


def boundaries(fractions: Sequence[float], level: float, spending: Spending = "pocock") -> list[float]:
    """The z boundaries c_1..c_K of one-sided level `level` at increasing information fractions
    (the last may be < 1: a run stopped before its budget has spent less). math.inf where a look
    may not stop (nothing left to spend there)."""
    ts = tuple(float(t) for t in fractions)
    if not ts:
        return []
    if any(not (0.0 < t <= 1.0) for t in ts) or any(b <= a for a, b in itertools.pairwise(ts)):
        raise ValueError(f"information fractions must increase within (0, 1], got {list(ts)}")
    if not (0.0 < level < 0.5):
        raise ValueError(f"level must be in (0, 0.5), got {level}")
    if spending not in SPENDING_FUNCTIONS:
        raise ValueError(f"unknown spending function {spending!r}; known: {', '.join(SPENDING_FUNCTIONS)}")
    return list(_looks(ts, float(level), spending)[0])


@functools.lru_cache(maxsize=4096)
def _looks(ts: tuple[float, ...], level: float, spending: Spending) -> tuple[tuple[float, ...], np.ndarray, np.ndarray]:
    """(boundaries, grid, sub-density of the continuation region at the last look) for the looks
    `ts`, built on the cached result of all but the last: a run's looks share their prefix."""
    t = ts[-1]
    bounds: tuple[float, ...] = ()
    grid: np.ndarray | None = None
    density: np.ndarray | None = None
    previous_t = 0.0
    if len(ts) > 1:
        previous_t = ts[-2]
        bounds, grid, density = _looks(ts[:-1], level, spending)
    target = spent(t, level, spending) - spent(previous_t, level, spending)
    sd = math.sqrt(t - previous_t)
    crossing = _crossing(grid, density, sd, t)
    if target <= 1e-15:
        c = math.inf
    else:
        c = float(optimize.brentq(lambda x: crossing(x) - target, -10.0, 40.0, xtol=1e-10))
    # The continuation region's sub-density at this look, on a new grid.
    top = c * math.sqrt(t) if math.isfinite(c) else _SPAN * math.sqrt(t)
    new_grid = np.linspace(-_SPAN * math.sqrt(t), top, _GRID)
    if grid is None or density is None:
        new_density = norm.pdf(new_grid / math.sqrt(t)) / math.sqrt(t)
    else:
        kernel = norm.pdf((new_grid[:, None] - grid[None, :]) / sd) / sd
        new_density = kernel @ (density * _trapezoid_weights(grid))
    return (*bounds, c), new_grid, new_density


def nominal_levels(fractions: Sequence[float], level: float, spending: Spending = "pocock") -> list[float]:
    """Each look's nominal one-sided p-value threshold, 1 - Phi(c_k) (0 where a look may not stop)."""
    return [float(norm.sf(c)) if math.isfinite(c) else 0.0 for c in boundaries(fractions, level, spending)]


def _crossing(grid: np.ndarray | None, density: np.ndarray | None, sd: float, t: float) -> Callable[[float], float]:
    """c -> the probability that a path still going at the previous look ends at or above c here."""
    if grid is None or density is None:
        return lambda c: float(norm.sf(c))
    weights = density * _trapezoid_weights(grid)
    return lambda c: float(np.sum(weights * norm.sf((c * math.sqrt(t) - grid) / sd)))


def _trapezoid_weights(grid: np.ndarray) -> np.ndarray:
    step = grid[1] - grid[0]
    weights = np.full(grid.shape, step)
    weights[0] = weights[-1] = step / 2
    return weights
