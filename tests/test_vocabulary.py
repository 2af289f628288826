"""The shared words (sglang_spec_harness/vocabulary.py) are the ones the stages really use."""

from __future__ import annotations

import json
import typing

from sglang_spec_harness import vocabulary as v
from sglang_spec_harness.scenario import Rule
from sglang_spec_harness.traces.regions import DEFAULT_SGLANG_REGIONS, RegionTable
from sglang_spec_harness.verdict.rules.registry import EVALUATORS


def test_the_rule_kinds_are_the_scenarios_rule_kinds_and_the_evaluators():
    union = typing.get_args(Rule)[0]  # Annotated[A | B | ..., Field(discriminator="kind")]
    scenario_kinds = {typing.get_args(model.model_fields["kind"].annotation)[0] for model in typing.get_args(union)}
    assert scenario_kinds == set(v.SCENARIO_RULE_KINDS) == set(EVALUATORS)
    assert set(v.RuleKind) - set(v.SCENARIO_RULE_KINDS) == {v.RuleKind.AA_NOISE}


def test_the_default_region_table_names_the_vocabularys_regions():
    assert RegionTable.from_pairs(DEFAULT_SGLANG_REGIONS).region_names == ["PREFILL", "DRAFT_EXTEND", "DRAFT_DECODE",
                                                                          "TARGET_VERIFY"]
    assert v.REGION_ORDER == ("DRAFT_DECODE", "TARGET_VERIFY", "DRAFT_EXTEND", "PREFILL", "(none)")
    assert v.CYCLE_REGION in v.CYCLE_REGIONS


def test_a_verdict_is_its_string_and_its_exit_code():
    assert json.dumps({"verdict": v.FAIL}) == '{"verdict": "FAIL"}' and f"{v.INCONCLUSIVE}" == "INCONCLUSIVE"
    assert [verdict.exit_code for verdict in (v.PASS, v.FAIL, v.INCONCLUSIVE)] == [0, 1, 3]
