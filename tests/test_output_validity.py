"""The output-validity rule (sglang_spec_harness/verdict/rules/output_validity.py) on planted run
directories: ids at both ends of the vocabulary, padding ids, texts that did not decode, and what it
does when the vocabulary is unknown."""

from __future__ import annotations

import json

import pytest

from sglang_spec_harness.rundir import load_run_dir
from sglang_spec_harness.verdict.judge import evaluate_run
from support.rundir_factory import SCENARIO, Arm, write_run_dir

VOCAB = {"vocab_size": 1000, "tokenizer_size": 900, "source": "planted"}
TPOT = [10.0, 10.1, 9.9, 10.0, 10.2, 9.8]


def _scenario(**rule):
    scenario = json.loads(json.dumps(SCENARIO))
    scenario["rules"] = [{"name": "identity", "kind": "output_identity"}]
    if rule is not None:
        scenario["rules"].append({"name": "valid", "kind": "output_validity", **rule})
    return scenario


def _validity(tmp_path, baseline: Arm, candidate: Arm, *, scenario=None):
    run = write_run_dir(tmp_path, baseline, candidate, scenario=scenario or _scenario())
    results = evaluate_run(load_run_dir(run))
    found = [r for r in results.rules if r.kind == "output_validity"]
    return found[0] if found else None


def _arm(outputs, **kw):
    return Arm(tpot_ms=TPOT, outputs=outputs, vocabulary=kw.pop("vocabulary", VOCAB), **kw)


GOOD = [[0, 1, 2], [899, 5, 6], [7, 8, 9]]


def test_every_id_a_token_passes(tmp_path):
    rule = _validity(tmp_path, _arm(GOOD), _arm(GOOD))
    assert rule.verdict == "PASS"
    assert rule.numbers.variants["candidate"].tokens == 9 * 7  # 6 timed + 1 profiled trials of 3 requests
    assert rule.numbers.variants["candidate"].invalid_fraction == 0.0


@pytest.mark.parametrize(("token", "why"), [(-1, "out_of_range"), (1000, "out_of_range"), (123456, "out_of_range"),
                                            (900, "padding"), (999, "padding")])
def test_an_id_outside_the_tokens_fails_with_where_it_is(tmp_path, token, why):
    bad = [[0, 1, 2], [899, token, 6], [7, 8, 9]]
    rule = _validity(tmp_path, _arm(GOOD), _arm(bad))
    assert rule.verdict == "FAIL"
    cand = rule.numbers.variants["candidate"]
    assert (cand.out_of_range, cand.padding) == ((7, 0) if why == "out_of_range" else (0, 7))
    assert cand.examples[0].why == why and cand.examples[0].token == token and cand.examples[0].position == 1
    assert rule.reason.startswith("candidate: 7 of 63 token ids are not tokens")
    assert rule.numbers.variants["baseline"].invalid_fraction == 0.0  # judged per arm, no baseline needed


def test_the_baseline_is_judged_on_its_own(tmp_path):
    rule = _validity(tmp_path, _arm([[0, 1000, 2], [3, 4, 5], [6, 7, 8]]), _arm(GOOD))
    assert rule.verdict == "FAIL" and rule.reason.startswith("baseline:")


def test_a_tolerated_fraction(tmp_path):
    bad = [[0, 1, 2], [899, 950, 6], [7, 8, 9]]  # 1 of 9 tokens per trial
    assert _validity(tmp_path, _arm(GOOD), _arm(bad), scenario=_scenario(max_invalid_fraction=0.2)).verdict == "PASS"


def test_a_text_that_did_not_decode_fails(tmp_path):
    texts = ["a b c", "d \ufffd f", "g h i"]
    rule = _validity(tmp_path, _arm(GOOD), _arm(GOOD, texts=texts))
    assert rule.verdict == "FAIL" and "7 of 21 texts hold U+FFFD" in rule.reason


def test_an_unknown_vocabulary_is_inconclusive_not_passed(tmp_path):
    rule = _validity(tmp_path, _arm(GOOD), _arm(GOOD, vocabulary={}))
    assert rule.verdict == "INCONCLUSIVE" and "candidate: vocabulary" in rule.reason


def test_an_unknown_vocabulary_still_fails_a_broken_text(tmp_path):
    rule = _validity(tmp_path, _arm(GOOD), _arm(GOOD, vocabulary={}, texts=["\ufffd"] * 3))
    assert rule.verdict == "FAIL"


def test_the_rule_s_own_sizes_judge_a_run_that_recorded_none(tmp_path):
    bad = [[0, 1, 2], [899, 1000, 6], [7, 8, 9]]
    rule = _validity(tmp_path, _arm(GOOD, vocabulary=None), _arm(bad, vocabulary=None),
                     scenario=_scenario(vocab_size=1000))
    assert rule.verdict == "FAIL" and rule.numbers.variants["candidate"].vocabulary_source == "the rule"


def test_added_to_a_run_that_recorded_vocabularies_and_declares_none(tmp_path):
    scenario = _scenario()
    scenario["rules"] = scenario["rules"][:1]
    rule = _validity(tmp_path, _arm(GOOD), _arm([[0, 1, 2], [899, 999, 6], [7, 8, 9]]), scenario=scenario)
    assert rule is not None and rule.name == "outputs_valid" and rule.verdict == "FAIL"


def test_not_added_to_a_run_from_before_vocabularies(tmp_path):
    scenario = _scenario()
    scenario["rules"] = scenario["rules"][:1]
    assert _validity(tmp_path, _arm(GOOD, vocabulary=None), _arm(GOOD, vocabulary=None), scenario=scenario) is None
