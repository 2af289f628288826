"""The run's key numbers that the page, the Markdown summary and the figures share (the TPOT ratio and
its interval, the accept lengths, the softmax counts per region), and their lines, written with
`sglang_spec_harness.pages.numbers`."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pydantic import ValidationError

from sglang_spec_harness.pages.numbers import count_range, fmt, interval, p_value, pct, ratio
from sglang_spec_harness.report.data import ReportData
from sglang_spec_harness.rundir import valid_number
from sglang_spec_harness.rundir.rule_numbers import AcceptLengthNumbers, KernelObservation, TpotGainNumbers, numbers_of
from sglang_spec_harness.vocabulary import RuleKind


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class TpotNumbers:
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float | None
    p_value: float | None
    min_gain: float | None
    min_detectable_gain: float | None
    rule: str | None  # the tpot_gain rule these came from, None when computed from trials

    def line(self) -> str:
        if self.ratio is None:
            return "TPOT: no ratio (not enough timed trials)"
        text = f"TPOT candidate/baseline = {ratio(self.ratio)}"
        if self.ci_low is not None and self.ci_high is not None:
            conf = f"{pct(self.confidence, 0)} " if self.confidence else ""
            text += f" ({conf}CI {interval(self.ci_low, self.ci_high)})"
        text += f", gain {pct(1 - self.ratio)}"
        if self.p_value is not None:
            text += f", p = {p_value(self.p_value)}"
        if self.min_gain is not None:
            text += f"; required gain ≥ {pct(self.min_gain)}"
        if self.min_detectable_gain is not None:
            text += f"; smallest detectable gain {pct(self.min_detectable_gain)}"
        return text


def tpot_numbers(data: ReportData) -> TpotNumbers:
    """From the tpot_gain rule when there is one, else the plain ratio of medians of the trials."""
    rules = data.rules_of_kind(RuleKind.TPOT_GAIN)
    if rules and isinstance(n := numbers_of(rules[0]), TpotGainNumbers):
        return TpotNumbers(
            ratio=valid_number(n.ratio),
            ci_low=valid_number(n.ci_low),
            ci_high=valid_number(n.ci_high),
            confidence=valid_number(n.confidence),
            p_value=valid_number(n.p_value),
            min_gain=valid_number(n.min_gain),
            min_detectable_gain=valid_number(n.min_detectable_gain),
            rule=str(rules[0].get("name")),
        )
    base = [v for t in data.trials_of("baseline", "timed") if (v := t.number("median_tpot_ms")) is not None]
    cand = [v for t in data.trials_of("candidate", "timed") if (v := t.number("median_tpot_ms")) is not None]
    mb, mc = median_or_none(base), median_or_none(cand)
    ratio = mc / mb if mb and mc is not None else None
    return TpotNumbers(ratio, None, None, None, None, None, None, None)


def accept_lengths(data: ReportData) -> dict[str, list[float]]:
    """Per-trial accept length of every variant's timed trials (run order)."""
    out: dict[str, list[float]] = {}
    for variant in data.variant_names:
        values = [v for t in data.trials_of(variant, "timed") if (v := t.number("accept_length")) is not None]
        out[variant] = values
    return out


def accept_line(data: ReportData) -> str:
    per_variant = accept_lengths(data)
    parts = [
        f"{variant} {fmt(median_or_none(values), 4)} (median of {len(values)})"
        for variant, values in per_variant.items()
        if values
    ]
    text = "Accept length: " + ("; ".join(parts) if parts else "no timed trial reported one")
    rules = data.rules_of_kind(RuleKind.ACCEPT_LENGTH)
    if rules and isinstance(n := numbers_of(rules[0]), AcceptLengthNumbers):
        estimate, low, high, tolerance = (valid_number(v) for v in (n.ratio, n.ci_low, n.ci_high, n.rel_tolerance))
        if estimate is not None:
            text += f"; ratio {ratio(estimate)}"
            if low is not None and high is not None:
                text += f" (CI {interval(low, high)})"
            if tolerance is not None:
                text += f", tolerance ±{pct(tolerance)}"
    return text


def counts_from_rules(data: ReportData) -> list[KernelObservation]:
    """The observations of the kernel_count rules (the regions and patterns the rules name), each
    once; one that does not read as an observation (a damaged results.json) is left out."""
    rows: list[KernelObservation] = []
    seen: set[tuple[str, str, int, str, str]] = set()
    for rule in data.rules_of_kind(RuleKind.KERNEL_COUNT):
        observations = rule.get("numbers", {}).get("observations") if isinstance(rule.get("numbers"), dict) else None
        for obs in observations if isinstance(observations, list) else []:
            try:
                row = KernelObservation.model_validate(obs)
            except ValidationError:
                continue
            key = (row.variant, row.trial, row.rank, row.region, row.pattern)
            if key not in seen:
                seen.add(key)
                rows.append(row)
    return rows


def count_lines(rows: list[KernelObservation], pattern: str = "softmax") -> list[str]:
    """`REGION: baseline 2 per replay (24 in 12 replays); candidate 0..1 per replay (3 in 12 replays)`."""
    by_region: dict[str, dict[str, list[KernelObservation]]] = {}
    for row in rows:
        if row.pattern == pattern:
            by_region.setdefault(row.region, {}).setdefault(row.variant, []).append(row)
    lines = []
    for region, per_variant in by_region.items():
        parts = []
        for variant, vrows in per_variant.items():
            total = sum(r.total or 0 for r in vrows)
            replays = sum(r.replays for r in vrows)
            hi = max((r.per_replay_max for r in vrows if r.per_replay_max is not None), default=None)
            lo = min((r.per_replay_min for r in vrows if r.per_replay_min is not None), default=None)
            per = count_range(lo, hi)
            parts.append(f"{variant} {per} per replay ({total} in {replays} replays)")
        lines.append(f"{region}: " + "; ".join(parts))
    return lines
