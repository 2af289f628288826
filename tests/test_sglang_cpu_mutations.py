"""The mutation suite at CI's size: one planted bug of each class on the real SGLang 0.5.23 CPU server
(sglang_spec_harness.patches.sglang_mutations, scenarios/sglang_cpu_mutations.yaml), each of which
must end FAIL on the exact rule its class should trip, loudly: an output-changing bug changes at
least 90% of the requests, an accept-length bug moves accept length beyond the rule's margin, a
token-id bug is caught by output validity. The baseline arm runs once (module fixture) and its
trials are adopted into every mutation's run directory, as benchmarks/mutations.py does for the
whole suite (its figures: benchmarks/README.md, "The mutation suite").

Marked `real_sglang`: skipped without `make sglang-cpu`, failed without it where
HARNESS_REQUIRE_SGLANG_CPU is set (CI).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from sglang_spec_harness.patches.sglang_mutations import MUTATION_ENV, MUTATIONS
from sglang_spec_harness.run.combine import adopt_trials
from sglang_spec_harness.run.execute import run_scenario
from sglang_spec_harness.run.plan import with_run_seed
from sglang_spec_harness.scenario import Scenario, load_scenario
from sglang_spec_harness.sglang_cpu.base import is_current
from sglang_spec_harness.verdict.judge import check_run_dir

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "sglang_cpu_mutations.yaml"
INSTALL = REPO / ".sglang-cpu"
# CI's size: 48 tokens per request instead of 96 (a bug that changes outputs changes them early:
# the context models' next token depends on the last three tokens at every step)
CI_SIZE = ["workload.output_len=48"]
# one mutation per class of bug the issue names (the other variants of a class: the benchmark)
# (each candidate is a server start and two blocks, ~1.5 min on an idle 2-core VM: CI runs one per class)
ONE_PER_CLASS = ["verify_prefix_short_draft", "draft_positions_plus_1", "draft_stale_hidden",
                 "accepted_one_too_many", "token_id_padding", "draft_row_other_request"]
# (token_id_vocab_size is the other invalid-id bug: SGLang itself turns an id >= vocab_size into EOS)
LOUD = 0.9  # the share of requests an output-changing mutation must change


def scenario(mutation: str | None = None, seed: int | None = None) -> Scenario:
    sets = [*CI_SIZE, *([f"variants.candidate.env.{MUTATION_ENV}={mutation}"] if mutation else [])]
    loaded = load_scenario(SCENARIO, sets)
    if seed is None:
        return with_run_seed(loaded)
    return loaded.model_copy(update={"trials": loaded.trials.model_copy(update={"seed": seed})})


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[Path, int]:
    if not is_current(INSTALL):
        why = f"{INSTALL} is missing or out of date: run `make sglang-cpu`"
        if os.environ.get("HARNESS_REQUIRE_SGLANG_CPU"):
            pytest.fail(why)
        pytest.skip(why)
    base = scenario()
    run_dir = tmp_path_factory.mktemp("mutations") / "baseline"
    run = run_scenario(base, SCENARIO, select={("baseline", "timed")}, run_dir=run_dir)
    assert run.status == "complete", run.error
    return run_dir, base.trials.seed


def test_one_mutation_per_class_covers_every_class():
    assert sorted({MUTATIONS[name].bug_class for name in ONE_PER_CLASS}) == sorted(
        {m.bug_class for m in MUTATIONS.values()})


@pytest.mark.real_sglang
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ONE_PER_CLASS)
def test_the_planted_bug_fails_its_exact_rule_loudly(baseline, tmp_path, name):
    baseline_dir, seed = baseline
    run_dir = tmp_path / name
    run = run_scenario(scenario(name, seed), SCENARIO, select={("candidate", "timed")}, run_dir=run_dir)
    assert run.status == "complete", run.error
    log = "\n".join(p.read_text(errors="replace") for p in run_dir.glob("launches/*/server.log"))
    assert f"sglang_mutations: {name}:" in log  # planted, not missed by accident
    adopt_trials(run_dir, baseline_dir)
    results = json.loads(check_run_dir(run_dir).model_dump_json())
    rules = {r["kind"]: r for r in results["rules"]}
    expected = MUTATIONS[name].expected_rule
    assert results["verdict"] == "FAIL" and rules[expected]["verdict"] == "FAIL", rules[expected]["reason"]
    numbers = rules[expected]["numbers"]
    if expected == "output_identity":
        assert numbers["compared"] > 0 and 1 - numbers["identical"] / numbers["compared"] >= LOUD, numbers
    elif expected == "accept_length":
        base, cand = (statistics.fmean(numbers[arm]) for arm in ("baseline", "candidate"))
        assert abs(cand / base - 1) > rules[expected]["params"]["rel_tolerance"], (base, cand)
    else:  # output_validity: the candidate returned ids outside the served vocabulary, the baseline none
        variants = numbers["variants"]
        assert variants["candidate"]["invalid_fraction"] > 0 and variants["baseline"]["invalid_fraction"] == 0, variants
