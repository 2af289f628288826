"""tpot_gain: the candidate's TPOT lower than the baseline's by at least `min_gain`, with its
interval (restart mode: paired by repetition, or unpaired; the warm modes: blocks nested in
launches). Also the TPOT decision the rules judged on TPOT share (`explained_gain`, `aa_noise`), and
an adaptive run's levels: each look's (`look_levels`, `tpot_rule_at`, which run/adaptive.py calls)
and the last look's, at which the verdict claims (`at_last_look`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from sglang_spec_harness.rundir import Precondition, RunDir
from sglang_spec_harness.rundir.models import TpotGainResult
from sglang_spec_harness.rundir.rule_numbers import SequentialNumbers, TimedBlock, TpotData, TpotGainNumbers
from sglang_spec_harness.scenario import TpotGainRule
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.evidence import timed_blocks, timed_pairs, timed_values
from sglang_spec_harness.verdict.rules.result import rule_result


def tpot_decision(run: RunDir, baseline: str, candidate: str, **kwargs: Any) -> tuple[Any, TpotData]:
    """The TPOT gain decision. Warm modes: the mixed model of blocks nested in launches. Restart
    mode: paired by repetition when >= MIN_PAIRS complete pairs exist, else unpaired (with the reason
    saying so). Returns (decision, numbers about the data and the mode)."""
    base = timed_values(run, baseline, "median_tpot_ms")
    cand = timed_values(run, candidate, "median_tpot_ms")
    pairs = timed_pairs(run, baseline, candidate, "median_tpot_ms")
    n = len(pairs.repetitions)
    numbers = TpotData(baseline_ms=base, candidate_ms=cand, pairs=n, paired=False, mode=run.mode,
                       pair_repetitions=pairs.repetitions,
                       pair_ratios=[c / b if b > 0 else None for b, c in zip(pairs.baseline, pairs.candidate)])
    if run.warm:
        blocks = timed_blocks(run, baseline, candidate)
        nested_kwargs = {k: v for k, v in kwargs.items() if k not in ("resamples", "seed")}
        decision, fit = stats.nested_tpot_gain_decision(
            blocks.tpot_ms, [v == candidate for v in blocks.variant], blocks.launch, blocks.time_block, **nested_kwargs)
        numbers = numbers.updated(nested=fit.to_dict(), blocks=[
            TimedBlock(variant=v, launch=lch, round=r, tpot_ms=x)
            for v, lch, r, x in zip(blocks.variant, blocks.launch, blocks.repetition, blocks.tpot_ms)])
        if blocks.note:
            decision = _with_reason(decision, f"{decision.reason} ({blocks.note})")
        return decision, numbers
    if n >= stats.MIN_PAIRS:
        paired_kwargs = {k: v for k, v in kwargs.items() if k not in ("resamples", "seed")}
        decision = stats.paired_tpot_gain_decision(pairs.baseline, pairs.candidate, **paired_kwargs)
        numbers = numbers.updated(paired=True)
        if pairs.note:
            decision = _with_reason(decision, f"{decision.reason} ({pairs.note})")
    else:
        decision = stats.tpot_gain_decision(base, cand, **kwargs)
        why = f"unpaired ({n} complete repetition pair(s), paired mode needs >= {stats.MIN_PAIRS})"
        if pairs.note:
            why += f" ({pairs.note})"
        decision = _with_reason(decision, f"{why}: {decision.reason}")
    return decision, numbers


def _tpot_preconditions(run: RunDir, numbers: TpotData, baseline: str, candidate: str) -> list[Precondition]:
    if numbers.nested is not None:
        fit = numbers.nested
        launches = fit.n_launches
        fewest = min(launches.values()) if launches else 0
        return [
            Precondition("launches per arm", fewest >= stats.MIN_LAUNCHES,
                         f"{launches.get('baseline', 0)} baseline and {launches.get('candidate', 0)} candidate launches "
                         f"with blocks (at least {stats.MIN_LAUNCHES} per arm: with one, a launch-to-launch difference "
                         "cannot be told from the change)"),
            Precondition("rounds", fit.n_time_blocks >= stats.MIN_PAIRS,
                         f"{fit.n_time_blocks} rounds or launch pairs with blocks "
                         f"(at least {stats.MIN_PAIRS} needed for a verdict)"
                         if run.mode == "interleaved" else f"{fit.n_blocks} blocks"),
        ]
    if numbers.paired:
        n = numbers.pairs
        return [Precondition("complete repetition pairs", n >= stats.MIN_PAIRS,
                             f"{n} repetition(s) with an ok timed trial of both arms "
                             f"(at least {stats.MIN_PAIRS} needed for a paired verdict)")]
    return [Precondition(f"{name}: timed trials", len(v) >= stats.MIN_TRIALS,
                         f"{len(v)} trial(s) with a TPOT (at least {stats.MIN_TRIALS} needed for a verdict)")
            for name, v in ((baseline, numbers.baseline_ms), (candidate, numbers.candidate_ms))]


def _with_reason(decision: Any, reason: str) -> Any:
    return dataclasses.replace(decision, reason=reason)


def look_levels(rule: TpotGainRule, fractions: list[float], spending: str) -> list[tuple[float, float]]:
    """(alpha, confidence) of the TPOT rule at each look of an adaptive run: each direction's claim
    (PASS, FAIL) at the one-sided nominal level of Lan-DeMets spending of alpha/2 (stats.sequential),
    and the interval at the matching two-sided confidence."""
    levels = stats.nominal_levels(fractions, rule.alpha / 2, spending)  # type: ignore[arg-type]
    return [(2 * p, 1 - 2 * p) if p > 0 else (1e-12, 1 - 1e-12) for p in levels]


def tpot_rule_at(run: RunDir, rule: TpotGainRule, alpha: float) -> TpotGainResult:
    """The TPOT rule with its claims made at `alpha` (a look's level) and the interval to match."""
    return evaluate_tpot_gain(run, rule.model_copy(update={"alpha": alpha, "confidence": 1 - alpha}), sequential=False)


def at_last_look(run: RunDir, rule: TpotGainRule) -> tuple[TpotGainRule, SequentialNumbers] | None:
    """An adaptive run's TPOT rule at its last look's level, with the looks for the report; None for
    a fixed design. The fractions come from run.json, so `harness check` recomputes the same level."""
    looks = [look for look in run.run.looks or [] if look.kind == "tpot" and look.fraction is not None]
    budget = run.scenario.trials.budget
    if not looks or budget is None:
        return None
    fractions = [look.fraction for look in looks if look.fraction is not None]
    levels = look_levels(rule, fractions, budget.spending)
    alpha, confidence = levels[-1]
    info = SequentialNumbers(looks=len(looks), spending=budget.spending, fractions=fractions,
                             nominal_alphas=[a for a, _ in levels], alpha_overall=rule.alpha)
    return rule.model_copy(update={"alpha": alpha, "confidence": confidence}), info


def evaluate_tpot_gain(run: RunDir, rule: TpotGainRule, *, sequential: bool = True) -> TpotGainResult:
    adaptive = at_last_look(run, rule) if sequential else None
    if adaptive is not None:
        rule, info = adaptive
    decision, data = tpot_decision(run, rule.baseline, rule.candidate, min_gain=rule.min_gain,
                                   confidence=rule.confidence, alpha=rule.alpha,
                                   resamples=rule.resamples, seed=rule.seed)
    if adaptive is not None:
        decision = _with_reason(decision, f"look {info.looks} of an adaptive run, nominal alpha "
                                          f"{rule.alpha:.4f} ({info.spending} spending of {info.alpha_overall}): "
                                          f"{decision.reason}")
    est = decision.estimate
    numbers = TpotGainNumbers.model_validate({
        **data.model_dump(), **({"sequential": info} if adaptive is not None else {}),
        "ratio": est.ratio, "ci_low": est.ci_low,
        "ci_high": est.ci_high, "confidence": est.confidence, "gain": decision.gain, "p_value": decision.p_value,
        "min_gain": rule.min_gain, "min_detectable_gain": decision.mde,
        "gain_needed_to_pass": decision.gain_needed_to_pass, "fail_kind": decision.fail_kind,
        "reliable": est.reliable, "method": est.method, "statistic": est.statistic,
    })
    preconditions = _tpot_preconditions(run, data, rule.baseline, rule.candidate)
    return rule_result(TpotGainResult, rule, decision.verdict, decision.reason, numbers, preconditions)
