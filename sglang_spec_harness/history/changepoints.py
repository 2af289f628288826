"""Change points in one series (one value per run, in run order), the way Apache Otava finds them:
E-divisive means (Matteson & James 2014). The split search maximises the energy-distance statistic
between the values before and after a candidate split; a permutation test says whether that split
is stronger than any split of the same values in random order, so the test adapts to each series'
own noise where a fixed threshold cannot. Accepted splits divide the series and the search repeats
in each part (binary segmentation), until no part has a significant split.

On top: a split whose relative size is below `min_magnitude` is dropped (as Otava's option of that
name does), and in a kernel-count series a move from zero to non-zero (or back) is a change point by
itself, with no statistics (`zero_changes`).

Exact series (a count per replay, an output hash: values that do not vary between runs of the same
code) need none of this: every position where the value differs from the previous one is a change
point (`exact_change_points`), with no test and no minimum size.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Options:
    max_pvalue: float = 0.01
    permutations: int = 999
    min_size: int = 3  # values on each side of a split
    min_magnitude: float = 0.05  # |after - before| / |before|
    seed: int = 0  # the permutations are seeded: the same series always gives the same answer


@dataclass(frozen=True)
class ChangePoint:
    index: int  # position of the first value after the change
    p_value: float | None  # None: a zero / non-zero change (no test needed)
    before: float  # mean of the segment before (up to the previous change point)
    after: float  # mean of the segment after (up to the next change point)
    kind: str  # "e-divisive" | "zero" | "exact"

    @property
    def magnitude(self) -> float | None:
        """Relative change, (after - before) / |before|; None when before is zero."""
        if self.before == 0:
            return None
        return (self.after - self.before) / abs(self.before)


def _split_statistics(d: np.ndarray, min_size: int) -> np.ndarray:
    """q(tau) for tau = min_size .. m - min_size, from the m x m distance matrix of one segment:
    q = tau (m - tau) / m * (2 mean|x - y| - mean|x - x'| - mean|y - y'|)."""
    m = d.shape[0]
    s = d.cumsum(0).cumsum(1)  # s[i, j] = sum of d[:i+1, :j+1]
    taus = np.arange(min_size, m - min_size + 1)
    left = s[taus - 1, taus - 1]  # sum of d[:tau, :tau] (each pair twice)
    cross = s[taus - 1, m - 1] - left  # sum of d[:tau, tau:]
    right = s[m - 1, m - 1] - left - 2 * cross
    n_right = m - taus
    within_left = np.where(taus > 1, left / np.maximum(taus * (taus - 1), 1), 0.0)
    within_right = np.where(n_right > 1, right / np.maximum(n_right * (n_right - 1), 1), 0.0)
    energy = 2 * cross / (taus * n_right) - within_left - within_right
    return taus * n_right / m * energy


def _best_split(x: np.ndarray, min_size: int) -> tuple[int, float]:
    d = np.abs(x[:, None] - x[None, :])
    q = _split_statistics(d, min_size)
    i = int(np.argmax(q))
    return i + min_size, float(q[i])


def _p_value(x: np.ndarray, observed: float, options: Options, rng: np.random.Generator) -> float:
    """Share of random orders of the same values whose best split is at least as strong. Stops as soon
    as the answer cannot be significant (then the value returned is a lower bound above max_pvalue)."""
    d = np.abs(x[:, None] - x[None, :])
    tolerance = 1e-12 * max(1.0, abs(observed))
    hits = 0
    for _ in range(options.permutations):
        p = rng.permutation(len(x))
        if _split_statistics(d[np.ix_(p, p)], options.min_size).max() >= observed - tolerance:
            hits += 1
            if (hits + 1) / (options.permutations + 1) > options.max_pvalue:
                break
    return (hits + 1) / (options.permutations + 1)


def e_divisive(values: Sequence[float] | np.ndarray, options: Options = Options()) -> list[tuple[int, float]]:
    """Significant splits as (index of the first value after, p-value), in series order."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(options.seed)
    found: dict[int, float] = {}
    bounds = [0, len(x)]
    tested: dict[tuple[int, int], tuple[int, float, float] | None] = {}
    while True:
        best: tuple[float, int, int, int, float] | None = None  # (q, start, end, split, p-value)
        for start, end in itertools.pairwise(bounds):
            if (start, end) not in tested:
                segment = x[start:end]
                if len(segment) < 2 * options.min_size or np.ptp(segment) == 0:
                    tested[(start, end)] = None
                else:
                    split, q = _best_split(segment, options.min_size)
                    tested[(start, end)] = (split, q, _p_value(segment, q, options, rng))
            result = tested[(start, end)]
            if result is not None and result[2] <= options.max_pvalue and (best is None or result[1] > best[0]):
                best = (result[1], start, end, start + result[0], result[2])
        if best is None:
            break
        _, _, _, split, p_value = best
        found[split] = p_value
        bounds = sorted({*bounds, split})
    return sorted(found.items())


def zero_changes(values: Sequence[float] | np.ndarray) -> list[int]:
    """Indices where a count moves from zero to non-zero or back."""
    return [i for i in range(1, len(values)) if (values[i - 1] == 0) != (values[i] == 0)]


def _with_means(x: np.ndarray, points: dict[int, tuple[float | None, str]]) -> list[ChangePoint]:
    indices = sorted(points)
    bounds = [0, *indices, len(x)]
    out = []
    for k, index in enumerate(indices):
        before = float(x[bounds[k]:index].mean())
        after = float(x[index:bounds[k + 2]].mean())
        p_value, kind = points[index]
        out.append(ChangePoint(index=index, p_value=p_value, before=before, after=after, kind=kind))
    return out


def change_points(values: Sequence[float], options: Options = Options(), *, counts: bool = False) -> list[ChangePoint]:
    """The change points of one series. `counts`: a kernel-count series (zero / non-zero rule too)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return []
    points: dict[int, tuple[float | None, str]] = {i: (p, "e-divisive") for i, p in e_divisive(x, options)}
    # Too small to matter: drop the smallest first, re-measuring the neighbours after each drop.
    while True:
        small = [(abs(c.magnitude), c.index) for c in _with_means(x, points)
                 if c.magnitude is not None and abs(c.magnitude) < options.min_magnitude]
        if not small:
            break
        points.pop(min(small)[1])
    if counts:
        for i in zero_changes(x):
            points[i] = (None, "zero")
    return _with_means(x, points)


def exact_change_points(values: Sequence[float], keys: Sequence[object] | None = None) -> list[ChangePoint]:
    """Every index whose key (default: its value) differs from the previous one, with the values on
    either side as `before` and `after` (no segment means: an exact series has no noise to average)."""
    compared = list(keys) if keys is not None and any(k is not None for k in keys) else list(values)
    return [ChangePoint(index=i, p_value=None, before=float(values[i - 1]), after=float(values[i]), kind="exact")
            for i in range(1, len(values)) if compared[i] != compared[i - 1]]
