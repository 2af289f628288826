"""results.json's rule numbers, one model per rule kind (sglang_spec_harness.rundir.rule_numbers):
every kind written by the real rules reads back as the same typed numbers, a results.json written
before the numbers were typed (the H200 run) loads and is written again key for key, unknown keys
are kept, and a number of the wrong type is one line naming it."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir import SCHEMA_VERSION, ResultsRecord, load_run_dir, read_record
from sglang_spec_harness.rundir.models import RESULT_OF_KIND
from sglang_spec_harness.rundir.rule_numbers import (
    NUMBERS_OF_KIND,
    AaNoiseNumbers,
    ExplainedGainNumbers,
    KernelCountNumbers,
    KernelObservation,
    TpotGainNumbers,
    ValidityNumbers,
)
from sglang_spec_harness.verdict.compare import compare_runs
from sglang_spec_harness.verdict.judge import check_run_dir, evaluate_run, write_results
from support.history_helpers import series_run

FIXTURES = Path(__file__).parent / "fixtures"


def gpu_run(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURES / "run_micro_topk1_gpu_h200.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "micro_topk1_gpu_h200"


def round_trip(run_dir: Path, results: ResultsRecord) -> ResultsRecord:
    """Written as `harness check` writes it, read back through the run directory's reader."""
    path = write_results(run_dir, results)
    loaded = read_record(path, ResultsRecord)
    assert loaded == results
    assert json.loads(path.read_text()) == loaded.model_dump(mode="json")  # and written again, key for key
    return loaded


def test_every_kind_round_trips_with_its_typed_numbers(tmp_path):
    planted = series_run(tmp_path, 1, base_tpot=20.0, cand_tpot=15.0)
    aa = series_run(tmp_path, 2, base_tpot=20.0, cand_tpot=20.0, aa=True, seed=1)
    run = json.loads((planted / "run.json").read_text())
    (planted / "run.json").write_text(json.dumps({**run, "status": "incomplete", "error": "stopped"}))
    seen: dict[str, type] = {}
    for results in (evaluate_run(load_run_dir(planted)), evaluate_run(load_run_dir(aa)),
                    compare_runs(load_run_dir(planted), load_run_dir(aa), variant="baseline", max_slowdown=0.02)):
        loaded = round_trip(tmp_path, results)
        seen.update({rule.kind: type(rule.numbers) for rule in loaded.rules})
    assert seen == NUMBERS_OF_KIND
    assert set(RESULT_OF_KIND) == set(NUMBERS_OF_KIND)


def test_the_planted_runs_numbers_as_attributes(tmp_path):
    results = round_trip(tmp_path, evaluate_run(load_run_dir(series_run(tmp_path, 1, base_tpot=20.0, cand_tpot=15.0))))
    rules = {rule.name: rule for rule in results.rules}
    counts = rules["cand_no_softmax_dd"].numbers
    assert isinstance(counts, KernelCountNumbers)
    assert counts.observations == [KernelObservation(
        variant="candidate", trial="14-candidate-profiled", rank=0, region="DRAFT_DECODE", pattern="softmax",
        unit="graph_launch", replays=10, total=0, per_replay_min=0, per_replay_max=0, eager_total=0, time_us=0.0,
        ok=True)]
    tpot = rules["tpot"].numbers
    assert isinstance(tpot, TpotGainNumbers)
    assert (tpot.pairs, tpot.paired, tpot.mode, tpot.min_gain) == (6, True, "restart", 0.01)
    assert len(tpot.baseline_ms) == len(tpot.candidate_ms) == 6 and tpot.nested is None
    explained = rules["explained"].numbers
    assert isinstance(explained, ExplainedGainNumbers)
    assert explained.regions is not None and explained.regions["DRAFT_DECODE"].saving_us_per_cycle == pytest.approx(80.0)
    assert explained.profiled_cycles == {"baseline": 10, "candidate": 10}


def test_a_results_json_written_before_the_numbers_were_typed_loads_key_for_key(tmp_path):
    run_dir = gpu_run(tmp_path)
    recorded = json.loads((run_dir / "results.json").read_text())  # as the H200 run wrote it
    results = read_record(run_dir / "results.json", ResultsRecord)
    # key for key; only the version moves: the H200 run is of schema 1, read migrated to today's
    assert recorded["schema_version"] == 1
    assert results.model_dump(mode="json") == {**recorded, "schema_version": SCHEMA_VERSION}
    observations = results.rules[0].numbers
    assert isinstance(observations, KernelCountNumbers)
    assert [(o.region, o.unit, o.replays, o.total) for o in observations.observations] == [
        ("DRAFT_DECODE", "graph_launch", 21, 0)]
    tpot = results.rules[-1].numbers
    assert isinstance(tpot, TpotGainNumbers) and tpot.nested is not None and tpot.blocks is not None
    assert (tpot.mode, tpot.nested.n_blocks, len(tpot.blocks)) == ("interleaved", 32, 32)


def test_unknown_keys_are_kept(tmp_path):
    run_dir = gpu_run(tmp_path)
    recorded = json.loads((run_dir / "results.json").read_text())
    recorded["rules"][0]["numbers"]["from_a_newer_harness"] = [1, 2]
    recorded["rules"][0]["numbers"]["observations"][0]["lanes"] = 4
    (run_dir / "results.json").write_text(json.dumps(recorded))
    results = read_record(run_dir / "results.json", ResultsRecord)
    assert results.model_dump(mode="json") == {**recorded, "schema_version": SCHEMA_VERSION}


@pytest.mark.parametrize(("rule", "key", "value", "message"), [
    (5, "ratio", "0.9", "rules.5.tpot_gain.numbers.ratio: Input should be a valid number"),
    (5, "pairs", 2.5, "rules.5.tpot_gain.numbers.pairs: Input should be a valid integer"),
    (4, "first_difference", [1, 2], "rules.4.output_identity.numbers.first_difference: Input should be a valid "
                                    "dictionary or instance of FirstDifference"),
])
def test_a_number_of_the_wrong_type_is_one_line_naming_it(tmp_path, rule, key, value, message):
    run_dir = gpu_run(tmp_path)
    recorded = json.loads((run_dir / "results.json").read_text())
    recorded["rules"][rule]["numbers"][key] = value
    (run_dir / "results.json").write_text(json.dumps(recorded))
    with pytest.raises(HarnessInputError) as caught:
        read_record(run_dir / "results.json", ResultsRecord)
    assert str(caught.value) == f"{run_dir / 'results.json'}: {message}"


def test_an_unknown_kind_is_one_line(tmp_path):
    run_dir = gpu_run(tmp_path)
    recorded = json.loads((run_dir / "results.json").read_text())
    recorded["rules"][0]["kind"] = "kernel_time"
    (run_dir / "results.json").write_text(json.dumps(recorded))
    with pytest.raises(HarnessInputError, match=r"results.json: rules.0: Input tag 'kernel_time' found using 'kind' "
                                                r"does not match any of the expected tags"):
        read_record(run_dir / "results.json", ResultsRecord)


def test_numbers_are_plain_and_written_as_set():
    numbers = TpotGainNumbers(ratio=float("nan"), pairs=3, baseline_ms=[20, 19.5])
    assert numbers.model_dump() == {"baseline_ms": [20, 19.5], "pairs": 3, "ratio": None}
    assert ExplainedGainNumbers().model_dump() == {}  # a rule blocked before it measured anything
    assert ValidityNumbers(problems=["x"]).updated(problems=["x", "y"]).model_dump() == {"problems": ["x", "y"]}
    assert AaNoiseNumbers.model_validate({"a_ms": [1.0], "pairs": 0}).model_dump() == {"a_ms": [1.0], "pairs": 0}


def test_check_rewrites_the_h200_run_with_the_same_keys(tmp_path):
    run_dir = gpu_run(tmp_path)
    recorded = json.loads((run_dir / "results.json").read_text())
    check_run_dir(run_dir)
    written = json.loads((run_dir / "results.json").read_text())
    assert [(r["name"], r["kind"], r["verdict"], list(r["numbers"])) for r in written["rules"]] == [
        (r["name"], r["kind"], r["verdict"], list(r["numbers"])) for r in recorded["rules"]]
    assert [r["numbers"] for r in written["rules"][:5]] == [r["numbers"] for r in recorded["rules"][:5]]
