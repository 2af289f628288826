"""Blocks nested in server launches (the warm modes): a linear mixed model on log block TPOT.

One sample is the median TPOT of one block of requests; blocks are served by server launches, and
two launches of one configuration can differ (memory layout, thread placement, clocks). With the
launch-to-launch spread ignored, blocks of one launch would count as independent evidence about the
arm, and a launch effect would read as the change under test. The model:

    log y_i = mu + delta * [arm_i = candidate] + tau_{time block(i)} + u_{launch(i)} + e_i
    u ~ N(0, s_launch^2) per launch,  e ~ N(0, s_block^2) per block

`tau` is a fixed effect per time block (a round in interleaved mode: the two blocks of a round run
back to back and share the machine's drift; a launch pair in sequential mode). `delta` is the log
ratio candidate/baseline. Fitted by REML (the profile REML likelihood maximised over
lambda = s_launch^2 / s_block^2 >= 0, closed form given lambda); the standard error of delta from
(X' V^-1 X)^-1, and its degrees of freedom by Satterthwaite's approximation with the REML
information of both variance components (as lmerTest does), never below the containment degrees of
freedom (launches minus arms: the launch term that holds the arm effect). The interval is a t interval
with those degrees of freedom: with few launches and a visible launch effect, df falls towards the
number of launches and the interval widens; with no visible launch effect (F test of launch effects
p >= POOL_P) the launch term is pooled and the interval approaches the paired one over rounds. The same t statistic gives the one-sided p-values of the gain rule (there is no exact
distribution-free test once launches differ: exchangeable units are launches, too few for one).

One launch per arm makes the launch effect inseparable from the arm: such an estimate is never
`reliable` (fail closed), whatever its interval says.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize as _opt
from scipy import stats as _st

from sglang_spec_harness.verdict.stats.base import GainDecision, RatioCommon, RatioEstimate, Values, _check_unit, _clean, _Result, _z
from sglang_spec_harness.vocabulary import INCONCLUSIVE
from sglang_spec_harness.verdict.stats.decision import apply_gain_rule, decision_builder
from sglang_spec_harness.verdict.stats.paired import MIN_PAIRS

# Fewest launches per arm for a reliable estimate: with one, s_launch cannot be told from delta.
MIN_LAUNCHES = 2
# Sometimes-pool rule (Bancroft): when the launches of an arm do not differ more than their blocks
# would make them (F test of launch effects, p >= this), the launch term is pooled into the block
# noise and the interval uses the residual degrees of freedom; otherwise REML + Satterthwaite. The
# liberal level (0.25, the classic choice) keeps pooling for launch effects the data cannot see.
POOL_P = 0.25
_LAMBDA_MAX = 1e6


@dataclass(frozen=True)
class NestedFit(_Result):
    """The mixed model's fit (see the module docstring). `sd_*` are on the log scale (~ relative)."""

    log_ratio: float | None
    se: float | None
    df: float | None
    sd_launch: float | None  # launch-to-launch spread within an arm
    sd_block: float | None  # block-to-block spread within a launch (after the time blocks)
    n_blocks: int
    n_launches: dict[str, int]  # arm -> launches
    n_time_blocks: int
    launch_means: dict[str, float]  # launch -> mean log TPOT adjusted for the time blocks, as a ratio to the arm's mean
    reason: str
    launch_p: float | None = None  # F test of launch effects within arms
    pooled: bool = False  # the launch term was pooled into the block noise (sometimes-pool rule)


def _design(arm: np.ndarray, launch: np.ndarray, time_block: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """X (intercept, arm, time-block dummies without the first), Z (launch indicators), launch ids."""
    blocks = sorted(set(time_block.tolist()), key=str)
    cols = [np.ones(arm.size), arm.astype(float)]
    cols += [(time_block == b).astype(float) for b in blocks[1:]]
    x = np.column_stack(cols)
    # Drop time-block columns that are not estimable (e.g. a time block with one arm only is fine;
    # an empty one cannot occur), keeping X of full column rank.
    keep = [0, 1]
    for j in range(2, x.shape[1]):
        trial = x[:, keep + [j]]
        if np.linalg.matrix_rank(trial) == len(keep) + 1:
            keep.append(j)
    launches = sorted(set(launch.tolist()), key=str)
    z = np.column_stack([(launch == u).astype(float) for u in launches])
    return x[:, keep], z, launches


def _reml_terms(y: np.ndarray, x: np.ndarray, zz: np.ndarray, lam: float) -> tuple[float, np.ndarray, np.ndarray, float]:
    """(-2 * profile REML log-likelihood up to a constant, beta, (X'V^-1 X)^-1 / sigma^2 factor, sigma^2)
    for V = sigma^2 (I + lam Z Z')."""
    n, p = x.shape
    v = np.eye(n) + lam * zz
    chol = np.linalg.cholesky(v)
    vi_x = np.linalg.solve(chol.T, np.linalg.solve(chol, x))
    vi_y = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    xtvx = x.T @ vi_x
    c = np.linalg.inv(xtvx)
    beta = c @ (x.T @ vi_y)
    r = y - x @ beta
    vi_r = np.linalg.solve(chol.T, np.linalg.solve(chol, r))
    sigma2 = float(r @ vi_r) / (n - p)
    logdet_v = 2.0 * float(np.sum(np.log(np.diag(chol))))
    _, logdet_x = np.linalg.slogdet(xtvx)
    crit = logdet_v + logdet_x + (n - p) * math.log(max(sigma2, 1e-300))
    return crit, beta, c, sigma2


def fit_nested(
    values: Values,
    candidate: Sequence[bool],
    launch: Sequence[str],
    time_block: Sequence[object],
    *,
    pool_p: float = POOL_P,
) -> NestedFit:
    """Fit the model to positive samples (e.g. block TPOTs). `candidate[i]`: sample i is of the
    candidate arm; `launch[i]`: the launch that served it (unique across arms); `time_block[i]`: its
    round (interleaved) or launch pair (sequential); `pool_p`: the sometimes-pool level (the rule's
    unless a study of the rule asks otherwise). Never raises on data: problems go to `reason`."""
    y_raw, problem = _clean(values, "samples")
    arm = np.asarray(candidate, dtype=bool).ravel()
    launch_arr = np.asarray([str(u) for u in launch])
    tb = np.asarray([str(b) for b in time_block])
    if not (y_raw.size == arm.size == launch_arr.size == tb.size):
        raise ValueError("values, candidate, launch and time_block must have one entry per sample")
    per_arm = {name: len(set(launch_arr[arm == flag].tolist())) for name, flag in (("baseline", False), ("candidate", True))}
    empty = NestedFit(None, None, None, None, None, int(y_raw.size), per_arm, len(set(tb.tolist())), {}, "")
    if problem:
        return replace(empty, reason=problem)
    if per_arm["baseline"] == 0 or per_arm["candidate"] == 0:
        return replace(empty, reason="both arms need samples")
    mixed = [u for u in set(launch_arr.tolist()) if len(set(arm[launch_arr == u].tolist())) > 1]
    if mixed:
        raise ValueError(f"launch {mixed[0]!r} serves both arms")
    y = np.log(y_raw)
    x, z, launches = _design(arm, launch_arr, tb)
    n, p = x.shape
    if n - p < 1:
        return replace(empty, reason=f"{n} samples for {p} fixed effects: no residual degrees of freedom")
    zz = z @ z.T
    # Launches nested in arms with one launch per arm: Z is collinear with X, lambda is not
    # identifiable; fit without the launch term (the estimate is then marked unreliable upstream).
    identifiable = np.linalg.matrix_rank(np.column_stack([x, z])) > p
    launch_p = _launch_f_test(y, x, z) if identifiable else None
    if identifiable and launch_p is not None and launch_p < pool_p:
        res = _opt.minimize_scalar(lambda t: _reml_terms(y, x, zz, math.exp(t))[0], bounds=(-18.0, math.log(_LAMBDA_MAX)),
                                   method="bounded", options={"xatol": 1e-6})
        lam = math.exp(res.x)
        if _reml_terms(y, x, zz, 0.0)[0] <= _reml_terms(y, x, zz, lam)[0]:
            lam = 0.0
    else:
        lam = 0.0
    pooled = identifiable and lam == 0.0
    _, beta, c_unit, sigma2 = _reml_terms(y, x, zz, lam)
    s2_block, s2_launch = sigma2, lam * sigma2
    cov = sigma2 * c_unit
    var = float(cov[1, 1])
    se = math.sqrt(max(var, 0.0))
    if se == 0:
        df = None
    elif lam == 0.0:
        df = float(n - p)
    else:
        # Satterthwaite, but never below the containment df (launches - arms: the df of the launch
        # term that holds the arm effect; exact for balanced nested designs). Satterthwaite falls
        # towards 1 when the launch spread is small next to its own uncertainty, where simulation
        # shows the containment interval still covers (>= 96% at 2 launches per arm).
        containment = float(z.shape[1] - 2)
        df = max(_satterthwaite_df(x, z, s2_block, s2_launch), containment)
    if pooled:  # the launch spread reported is what the launches showed, not the pooled zero
        s2_launch = _launch_variance_moment(y, x, z, sigma2)
    # Per-launch levels: the mean residual of the fixed part, per launch (a BLUP-free, plain view).
    fixed = x @ beta
    resid = y - fixed
    launch_means = {str(u): float(math.exp(np.mean(resid[launch_arr == u]))) for u in launches}
    return NestedFit(
        log_ratio=float(beta[1]), se=se, df=df, sd_launch=math.sqrt(s2_launch) if identifiable else None,
        sd_block=math.sqrt(s2_block), n_blocks=int(n), n_launches=per_arm, n_time_blocks=len(set(tb.tolist())),
        launch_means=launch_means, launch_p=launch_p, pooled=pooled,
        reason=_fit_reason(identifiable, pooled, launch_p, pool_p),
    )


def _fit_reason(identifiable: bool, pooled: bool, launch_p: float | None, pool_p: float) -> str:
    if not identifiable:
        return "one launch per arm: the launch effect cannot be separated from the arm"
    if launch_p is None:  # e.g. one block per launch: no within-launch spread to test against
        return "launch effect not testable (no spread within launches): pooled into block noise"
    if pooled:
        return f"launch effect not visible (F test p={launch_p:.2f} >= {pool_p:g}): pooled into block noise"
    return f"launch effect visible (F test p={launch_p:.3g}): REML, Satterthwaite df"


def _rss(y: np.ndarray, x: np.ndarray) -> tuple[float, int]:
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ beta
    return float(r @ r), int(np.linalg.matrix_rank(x))


def _launch_f_test(y: np.ndarray, x: np.ndarray, z: np.ndarray) -> float | None:
    """p of the extra-sum-of-squares F test for launch effects (launches as fixed, within arms)."""
    rss0, p0 = _rss(y, x)
    rss1, p1 = _rss(y, np.column_stack([x, z]))
    df_num, df_den = p1 - p0, y.size - p1
    if df_num < 1 or df_den < 1 or rss1 <= 0:
        return None
    return float(_st.f.sf(((rss0 - rss1) / df_num) / (rss1 / df_den), df_num, df_den))


def _launch_variance_moment(y: np.ndarray, x: np.ndarray, z: np.ndarray, s2_block: float) -> float:
    """A moment estimate of s_launch^2 (>= 0) for the report, when the fit pooled it."""
    rss0, p0 = _rss(y, x)
    rss1, p1 = _rss(y, np.column_stack([x, z]))
    df_num = p1 - p0
    if df_num < 1:
        return 0.0
    per_launch = y.size / z.shape[1]
    return max(0.0, ((rss0 - rss1) / df_num - s2_block) / per_launch)


def _satterthwaite_df(x: np.ndarray, z: np.ndarray, s2_block: float, s2_launch: float) -> float:
    """Satterthwaite degrees of freedom of the arm coefficient: 2 f^2 / (g' A g), f its variance,
    g the gradient of f in (s2_block, s2_launch), A the inverse REML information of those."""
    n = x.shape[0]
    zz = z @ z.T
    v = s2_block * np.eye(n) + s2_launch * zz
    vi = np.linalg.inv(v)
    c = np.linalg.inv(x.T @ vi @ x)
    f = float(c[1, 1])
    derivs = [np.eye(n), zz]
    w = c @ x.T @ vi  # p x n
    g = np.array([float((w @ d @ w.T)[1, 1]) for d in derivs])
    proj = vi - vi @ x @ c @ x.T @ vi
    info = np.array([[0.5 * float(np.trace(proj @ a @ proj @ b)) for b in derivs] for a in derivs])
    try:
        cov_theta = np.linalg.inv(info)
    except np.linalg.LinAlgError:
        cov_theta = np.linalg.pinv(info)
    denom = float(g @ cov_theta @ g)
    if not denom > 0:
        return float(n - x.shape[1])
    return float(min(max(2.0 * f * f / denom, 1.0), n - x.shape[1]))


def nested_ratio_ci(fit: NestedFit, *, confidence: float = 0.95) -> RatioEstimate:
    """The candidate/baseline ratio exp(delta) with its t interval (Satterthwaite df)."""
    _check_unit("confidence", confidence)
    launches = fit.n_launches
    common = RatioCommon(confidence=float(confidence), n_baseline=int(fit.n_blocks), n_candidate=int(fit.n_blocks),
                         statistic="geometric mean", resamples=0, seed=None)
    if fit.log_ratio is None or fit.se is None:
        return RatioEstimate(None, None, None, reliable=False, reason=fit.reason or "no fit", method="none", **common)
    ratio = math.exp(fit.log_ratio)
    problems = []
    if min(launches.values()) < MIN_LAUNCHES:
        problems.append(f"{min(launches.values())} launch(es) in one arm: launch-to-launch differences cannot be "
                        f"told from the change (need >= {MIN_LAUNCHES} launches per arm)")
    if fit.n_time_blocks < MIN_PAIRS:
        problems.append(f"{fit.n_time_blocks} rounds; a verdict needs >= {MIN_PAIRS}")
    if fit.se == 0 or fit.df is None:
        return RatioEstimate(ratio, ratio, ratio, reliable=False, reason="; ".join(problems + ["zero spread"]),
                             method="mixed-model-t", **common)
    q = float(_st.t.ppf((1 + confidence) / 2, fit.df))
    lo, hi = math.exp(fit.log_ratio - q * fit.se), math.exp(fit.log_ratio + q * fit.se)
    reason = "; ".join(problems) if problems else (
        f"mixed model (REML, Satterthwaite df {fit.df:.1f}) over {fit.n_blocks} blocks in "
        f"{sum(launches.values())} launches")
    return RatioEstimate(ratio, lo, hi, reliable=not problems, reason=reason, method="mixed-model-t", **common)


def nested_tpot_gain_decision(
    values: Values,
    candidate: Sequence[bool],
    launch: Sequence[str],
    time_block: Sequence[object],
    *,
    min_gain: float,
    confidence: float = 0.95,
    alpha: float = 0.05,
    power: float = 0.8,
) -> tuple[GainDecision, NestedFit]:
    """The TPOT gain rule (same rule and fields as `tpot_gain_decision`) on blocks nested in
    launches: interval and p-values from the mixed model's t statistic (`fit_nested`)."""
    if not isinstance(min_gain, numbers.Real) or not (0.0 <= float(min_gain) < 1.0):
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    fit = fit_nested(values, candidate, launch, time_block)
    est = nested_ratio_ci(fit, confidence=confidence)
    t = 1.0 - float(min_gain)
    mde = needed = None
    if est.reliable and fit.se and fit.df:
        k = float(_st.t.ppf((1 + confidence) / 2, fit.df)) + _z(power)
        mde = 1.0 - math.exp(-k * fit.se)
        needed = 1.0 - t * (1.0 - mde)
    decision = decision_builder(est, min_gain=min_gain, alpha=alpha, power=power, mde=mde, needed=needed)
    where = f"{fit.n_blocks} blocks in {sum(fit.n_launches.values())} launches"
    if est.ratio is None:
        return decision(INCONCLUSIVE, f"{where}: no usable data: {est.reason}"), fit
    if not fit.se or not fit.df:
        return decision(INCONCLUSIVE, f"{where}: {est.reason}"), fit
    tdist = _st.t(fit.df)
    d, se, log_t = fit.log_ratio, fit.se, math.log(t)
    ps = (
        float(2 * tdist.sf(abs(d) / se)),
        float(tdist.cdf((d - log_t) / se)),
        float(tdist.sf(d / se)),
        float(tdist.sf((d - log_t) / se)),
    )
    spread = (f"launch-to-launch sd {fit.sd_launch:.2%}, block-to-block sd {fit.sd_block:.2%}"
              if fit.sd_launch is not None else f"block-to-block sd {fit.sd_block:.2%}")
    summary = (f"{where} (df {fit.df:.1f}; {spread}): ratio {est.ratio:.4f} [{est.ci_low:.4f}, {est.ci_high:.4f}] "
               f"({confidence:.0%}), gain {1 - est.ratio:+.2%}, min_gain {min_gain:.2%}")
    return apply_gain_rule(decision, est, ps, summary, t=t, alpha=alpha, power=power, mde=mde,
                            test="mixed-model t test"), fit
