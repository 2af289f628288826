"""A rule's result (results.json `rules[]`, sglang_spec_harness.rundir.models): its parameters as the
scenario wrote them, and the reason of its first failed precondition."""

from __future__ import annotations

from typing import Any, TypeVar

from sglang_spec_harness.rundir import Precondition
from sglang_spec_harness.rundir.models import RuleResultBase
from sglang_spec_harness.rundir.rule_numbers import Numbers
from sglang_spec_harness.vocabulary import Verdict


def rule_params(rule: Any) -> dict[str, Any]:
    return rule.model_dump(mode="json", exclude={"name", "kind", "description"})


R = TypeVar("R", bound=RuleResultBase)


def rule_result(cls: type[R], rule: Any, verdict: Verdict, reason: str, numbers: Numbers,
                preconditions: list[Precondition] | None = None) -> R:
    return cls(name=rule.name, kind=cls.model_fields["kind"].default, description=rule.description, verdict=verdict,
               reason=reason, params=rule_params(rule), numbers=numbers, preconditions=preconditions or [])


def failed_preconditions(preconditions: list[Precondition]) -> str | None:
    """The first failed precondition as a rule's reason (`what: detail (+N more)`); None if all hold."""
    failed = [p for p in preconditions if not p.ok]
    if not failed:
        return None
    first = failed[0]
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"{first.what}: {first.detail}{more}"
