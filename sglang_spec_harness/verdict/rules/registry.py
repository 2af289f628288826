"""Which evaluator judges each kind of rule a scenario declares. A new rule family joins with one
line in EVALUATORS (and, when all its bounds are optional, one in OPTIONAL_BOUNDS). aa_noise is not
here: a scenario never declares it (the flow adds it to an A/A run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_spec_harness.rundir import RuleResult, RunDir
from sglang_spec_harness.verdict.rules import accept_length, explained_gain, kernel_count, output_identity, tpot_gain

EVALUATORS: dict[str, Callable[[RunDir, Any], RuleResult]] = {
    "kernel_count": kernel_count.evaluate_kernel_count,
    "accept_length": accept_length.evaluate_accept_length,
    "output_identity": output_identity.evaluate_output_identity,
    "tpot_gain": tpot_gain.evaluate_tpot_gain,
    "explained_gain": explained_gain.evaluate_explained_gain,
}

# Rule kinds whose bounds are all optional: kind -> the bound fields. Kinds not listed always have
# a bound (a required one, or a default that can fail); a rule with every bound unset is INFO.
OPTIONAL_BOUNDS: dict[str, tuple[str, ...]] = {"explained_gain": explained_gain.OPTIONAL_BOUNDS}
