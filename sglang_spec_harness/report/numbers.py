"""Key numbers that the page, the Markdown summary and the figures share, as plain text/tuples."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from sglang_spec_harness.pages.numbers import fmt, pct
from sglang_spec_harness.rundir import as_object
from sglang_spec_harness.report.data import ReportData, plottable
from sglang_spec_harness.vocabulary import RuleKind


def _floats(values: Any) -> list[float]:
    if not isinstance(values, list):
        return []
    return [v for v in map(plottable, values) if v is not None]


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class TpotNumbers:
    baseline_ms: list[float]
    candidate_ms: list[float]
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
        text = f"TPOT candidate/baseline = {self.ratio:.4f}"
        if self.ci_low is not None and self.ci_high is not None:
            conf = f"{self.confidence * 100:.0f}% " if self.confidence else ""
            text += f" ({conf}CI {self.ci_low:.4f} – {self.ci_high:.4f})"
        text += f", gain {pct(1 - self.ratio)}"
        if self.p_value is not None:
            text += f", p = {fmt(self.p_value, 2)}"
        if self.min_gain is not None:
            text += f"; required gain ≥ {pct(self.min_gain)}"
        if self.min_detectable_gain is not None:
            text += f"; smallest detectable gain {pct(self.min_detectable_gain)}"
        return text


def tpot_numbers(data: ReportData) -> TpotNumbers:
    """From the tpot_gain rule when there is one, else the plain ratio of medians of the trials."""
    rules = data.rules_of_kind(RuleKind.TPOT_GAIN)
    if rules and isinstance(rules[0].get("numbers"), dict):
        n = rules[0]["numbers"]

        def num(key: str) -> float | None:
            return plottable(n.get(key))

        return TpotNumbers(
            baseline_ms=_floats(n.get("baseline_ms")),
            candidate_ms=_floats(n.get("candidate_ms")),
            ratio=num("ratio"),
            ci_low=num("ci_low"),
            ci_high=num("ci_high"),
            confidence=num("confidence"),
            p_value=num("p_value"),
            min_gain=num("min_gain"),
            min_detectable_gain=num("min_detectable_gain"),
            rule=str(rules[0].get("name")),
        )
    base = [v for t in data.trials_of("baseline", "timed") if (v := t.number("median_tpot_ms")) is not None]
    cand = [v for t in data.trials_of("candidate", "timed") if (v := t.number("median_tpot_ms")) is not None]
    mb, mc = median_or_none(base), median_or_none(cand)
    ratio = mc / mb if mb and mc is not None else None
    return TpotNumbers(base, cand, ratio, None, None, None, None, None, None, None)


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
    if rules and isinstance(rules[0].get("numbers"), dict):
        n = rules[0]["numbers"]
        ratio, low, high, tolerance = (plottable(n.get(k)) for k in ("ratio", "ci_low", "ci_high", "rel_tolerance"))
        if ratio is not None:
            text += f"; ratio {ratio:.4f}"
            if low is not None and high is not None:
                text += f" (CI {low:.4f} – {high:.4f})"
            if tolerance is not None:
                text += f", tolerance ±{pct(tolerance)}"
    return text


@dataclass(frozen=True)
class CountRow:
    """A pattern count in one region of one variant's profiled trial (one rank)."""

    variant: str
    trial: str
    rank: str
    region: str
    pattern: str
    unit: str  # graph_launch | span
    replays: int
    total: int
    per_replay_min: float | None
    per_replay_max: float | None


def counts_from_rules(data: ReportData) -> list[CountRow]:
    """The observations of the kernel_count rules (the regions and patterns the rules name)."""
    rows: list[CountRow] = []
    seen: set[tuple[str, ...]] = set()  # (variant, trial, rank, region, pattern)
    for rule in data.rules_of_kind(RuleKind.KERNEL_COUNT):
        numbers = as_object(rule.get("numbers"))
        for obs in numbers.get("observations") or []:
            if not isinstance(obs, dict):
                continue
            key = tuple(str(obs.get(k)) for k in ("variant", "trial", "rank", "region", "pattern"))
            if key in seen:
                continue
            seen.add(key)
            rows.append(
                CountRow(
                    variant=str(obs.get("variant")),
                    trial=str(obs.get("trial")),
                    rank=str(obs.get("rank")),
                    region=str(obs.get("region")),
                    pattern=str(obs.get("pattern")),
                    unit=str(obs.get("unit") or ""),
                    replays=int(obs.get("replays") or 0),
                    total=int(obs.get("total") or 0),
                    per_replay_min=obs.get("per_replay_min"),
                    per_replay_max=obs.get("per_replay_max"),
                )
            )
    return rows


def count_lines(rows: list[CountRow], pattern: str = "softmax") -> list[str]:
    """`REGION: baseline 2/replay (24 in 12 replays), candidate 0/replay (0 in 12)` per region."""
    by_region: dict[str, dict[str, list[CountRow]]] = {}
    for row in rows:
        if row.pattern == pattern:
            by_region.setdefault(row.region, {}).setdefault(row.variant, []).append(row)
    lines = []
    for region, per_variant in by_region.items():
        parts = []
        for variant, vrows in per_variant.items():
            total = sum(r.total for r in vrows)
            replays = sum(r.replays for r in vrows)
            hi = max((r.per_replay_max for r in vrows if r.per_replay_max is not None), default=None)
            lo = min((r.per_replay_min for r in vrows if r.per_replay_min is not None), default=None)
            per = fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"
            parts.append(f"{variant} {per} per replay ({total} in {replays} replays)")
        lines.append(f"{region}: " + "; ".join(parts))
    return lines
