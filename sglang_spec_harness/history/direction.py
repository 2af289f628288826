"""Which way a series is worse, and how each of its change points reads.

A count per replay (`kernels:<region>:<pattern>`) takes its direction from the scenario's
`kernel_count` rule on that region and pattern for the series' own variant (the candidate's rule on
the argmax wants it present; the baseline's rule on the softmax wants it present too, while the
candidate's wants it gone): a lower bound (`at_least`) makes a fall the regression; an upper bound
(`at_most`, `equals: 0`) a rise; `equals: N` (N > 0) a move away from N. A count that no rule
governs has no direction: it is a change, never a regression. TPOT, throughput, accept length and the
other timings keep the direction their metric has (`analyze.METRICS`).

How a change point reads (`reading`): an exact series' change is a regression or an improvement by
its direction at once (a count does not vary between runs of the same code); a noisy one only once a
side-by-side run of the two points confirmed it (`sweep/confirm.py`), else it is "not confirmed". A
series with no direction only changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

UP, DOWN, AWAY = "up", "down", "away"
WORSE, BETTER, NEITHER = "worse", "better", "neither"
REGRESSION, IMPROVEMENT, CHANGE, NOT_CONFIRMED = "regression", "improvement", "change", "not confirmed"
CONFIRMED = "confirmed"


@dataclass(frozen=True)
class Direction:
    worse: str | None  # UP, DOWN, AWAY (from `target`) or None: neither way is worse
    rule: str | None = None  # the kernel_count rule that gives it (None: the metric's own)
    target: float | None = None  # AWAY: the count the rule wants (`equals: N`)

    def way(self, before: float, after: float) -> str:
        """WORSE, BETTER or NEITHER for a move from `before` to `after`."""
        if self.worse is None or before == after:
            return NEITHER
        if self.worse == AWAY:
            assert self.target is not None
            gap_before, gap_after = abs(before - self.target), abs(after - self.target)
            return NEITHER if gap_before == gap_after else WORSE if gap_after > gap_before else BETTER
        rose = after > before
        return WORSE if rose == (self.worse == UP) else BETTER

    def to_json(self) -> dict[str, Any]:
        return {"worse": self.worse, "rule": self.rule, "target": self.target}


def rule_direction(params: dict[str, Any], name: str | None) -> Direction:
    """The direction a kernel_count rule's bound gives its count."""
    if params.get("at_least") is not None:
        return Direction(DOWN, name)
    if params.get("at_most") is not None:
        return Direction(UP, name)
    equals = params.get("equals")
    if isinstance(equals, (int, float)) and equals > 0:
        return Direction(AWAY, name, float(equals))
    return Direction(UP, name)


def count_direction(rules_by_run: Iterable[list[dict[str, Any]]], variant: str, region: str, pattern: str) -> Direction:
    """The direction of the count of `pattern` in `region` for `variant`: from the first run (callers
    pass the newest first) whose kernel_count rules include one on it that names the variant; no such
    rule: no direction. Each rule is `{"name", "params"}` as the database stores it."""
    for rules in rules_by_run:
        for rule in rules:
            params = rule.get("params")
            if not isinstance(params, dict) or params.get("region") != region or params.get("pattern") != pattern:
                continue
            variants = params.get("variants")
            if isinstance(variants, list) and variants and variant not in variants:
                continue
            return rule_direction(params, rule.get("name"))
    return Direction(None)


def reading(way: str, exact: bool, confirmation: dict[str, Any] | None) -> str:
    """How a change point reads: REGRESSION, IMPROVEMENT, CHANGE (no direction) or NOT_CONFIRMED (a
    noisy change that no side-by-side run confirmed)."""
    if way == NEITHER:
        return CHANGE
    if exact or (confirmation is not None and confirmation.get("status") == CONFIRMED):
        return REGRESSION if way == WORSE else IMPROVEMENT
    return NOT_CONFIRMED
