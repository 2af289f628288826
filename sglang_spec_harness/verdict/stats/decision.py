"""The TPOT gain rule's verdict, shared by the unpaired (gain.py), paired and nested decisions:
each computes its own estimate and p-values, and this module turns them into a GainDecision.
It imports only base.py, so every mode can import it without an import cycle."""

from __future__ import annotations

from collections.abc import Callable

from sglang_spec_harness.verdict.stats.base import GainDecision, RatioEstimate
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS, Verdict


def decision_builder(
    est: RatioEstimate, *, min_gain: float, alpha: float, power: float, mde: float | None, needed: float | None
) -> Callable[..., GainDecision]:
    """`decision(verdict, reason, ps=(p_value, p_pass, p_slower, p_short), kind=fail_kind)` for one
    estimate: every mode reports in the same shape."""

    def decision(
        verdict: Verdict, reason: str, *, ps: tuple = (None,) * 4, kind: str | None = None
    ) -> GainDecision:
        return GainDecision(
            verdict=verdict,
            reason=reason,
            min_gain=float(min_gain),
            alpha=float(alpha),
            power=float(power),
            estimate=est,
            gain=est.gain,
            p_value=ps[0],
            p_pass=ps[1],
            p_slower=ps[2],
            p_short=ps[3],
            fail_kind=kind,
            mde=mde,
            gain_needed_to_pass=needed,
        )

    return decision


def apply_gain_rule(
    decision: Callable[..., GainDecision],
    est: RatioEstimate,
    ps: tuple,
    summary: str,
    *,
    t: float,
    alpha: float,
    power: float,
    mde: float | None,
    test: str,
) -> GainDecision:
    """The verdict rule of the unpaired, paired and nested TPOT decisions (see their docstrings).

    `decision` from `decision_builder`; `ps` = (two-sided p, p_pass, p_slower, p_short) of the
    mode's test; `test` names that test in the reasons.
    """
    _, p_pass, p_slower, p_short = ps
    if not est.reliable:
        return decision(INCONCLUSIVE, f"{summary}; estimate not reliable: {est.reason}", ps=ps)
    lo, hi = est.ci_low, est.ci_high
    assert lo is not None and hi is not None
    a2 = alpha / 2
    if hi < t and p_pass < a2:
        return decision(PASS, f"{summary}: the whole interval is below {t:.4f}", ps=ps)
    if lo > 1.0 and p_slower < a2:
        return decision(
            FAIL,
            f"{summary}: candidate is significantly slower (interval above 1)",
            ps=ps,
            kind="slower",
        )
    if lo > t and p_short < a2:
        return decision(
            FAIL,
            f"{summary}: gain is significantly below min_gain (interval above {t:.4f})",
            ps=ps,
            kind="below_min_gain",
        )
    # Inconclusive: say why.
    if hi < t:
        why = f"interval clears {t:.4f} but the {test} does not (p={p_pass:.3g} >= {a2:g})"
    elif lo > t:
        why = (
            f"interval is above {t:.4f} but the {test} does not confirm "
            f"(p={p_short:.3g} >= {a2:g})"
        )
    else:
        why = f"interval contains the required ratio {t:.4f}"
    if mde is not None:
        why += (
            f"; these data detect gains >= {mde:.2%} with {power:.0%} power, "
            f"a PASS needs a true gain of about {1 - t * (1 - mde):.2%}"
        )
    return decision(INCONCLUSIVE, f"{summary}: {why}", ps=ps)
