"""The scenario schema: defaults, merging, and errors that point at the YAML line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.scenario import (
    DEFAULT_PATTERNS,
    load_scenario,
    render_args,
    scenario_from_dict,
    scenario_json_schema,
    scenario_to_yaml,
)

REPO = Path(__file__).resolve().parents[1]

MINIMAL = """\
name: t
engine: micro
server:
  args:
    --speculative-num-steps: 3
variants:
  baseline:
    args: {--disable-topk1-fast-path: true, --speculative-num-steps: 2}
  candidate: {}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_defaults_and_variant_args_merge_over_server_args(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL))
    assert s.server_args("baseline") == {"--speculative-num-steps": 2, "--disable-topk1-fast-path": True}
    assert s.server_args("candidate") == {"--speculative-num-steps": 3}
    assert s.patterns == DEFAULT_PATTERNS
    assert s.workload.temperature == 0.0 and s.trials.order == "random" and s.trials.seed is None
    assert s.region_rules() == []


def test_render_args_bare_flags_lists_and_dropped_values():
    assert render_args({"--a": True, "--b": False, "--c": None, "--d": 3, "--e": [1, "x"]}) == [
        "--a", "--d", "3", "--e", "1", "x"
    ]


def test_resolved_yaml_round_trips(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL))
    again = load_scenario(write(tmp_path, scenario_to_yaml(s)))
    assert again == s


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("workload:\n  concurency: 2\n", "s.yaml:11: workload.concurency: unknown key"),
        ("workload:\n  num_requests: many\n", "s.yaml:11: workload.num_requests: Input should be a valid integer"),
        ("regions:\n  rules:\n    - {name: DRAFT_DECODE, regex: 'step[('}\n", "s.yaml:12: regions.rules.0.regex: not a valid regular expression"),
        (
            "rules:\n  - name: c\n    kind: kernel_count\n    region: DRAFT_DECODE\n    pattern: nosuch\n"
            "    variants: [candidate]\n    equals: 0\n",
            "s.yaml:14: rules.0.pattern: unknown pattern 'nosuch'",
        ),
        (
            "rules:\n  - name: c\n    kind: kernel_count\n    region: DRAFT_DECODE\n    pattern: softmax\n"
            "    variants: [candidate]\n",
            "s.yaml:11: rules.0: give exactly one bound",
        ),
        ("rules:\n  - name: c\n    kind: tpot_gain\n    min_gain: 2\n", "s.yaml:13: rules.0.min_gain: Input should be less than 1"),
        ("regions:\n  replace: true\n", "s.yaml:10: regions: replace: true needs at least one rule"),
        ("rules:\n  - {name: c, kind: nosuch}\n", "s.yaml:11: rules.0: Input tag 'nosuch' found using 'kind' does not match"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path, extra, expected):
    with pytest.raises(HarnessInputError) as exc:
        load_scenario(write(tmp_path, MINIMAL + extra))
    message = str(exc.value)
    assert "\n" not in message
    assert message.split("/")[-1].startswith(expected), message


def test_a_scenario_that_says_checks_reads_as_rules(tmp_path):
    """`checks:`, the old name of `rules:`: the same scenario, its errors named and
    located as the file writes them; both names in one file is one line."""
    rule = "  - {name: c, kind: tpot_gain, min_gain: 0.02}\n"
    old, new = (load_scenario(write(tmp_path, MINIMAL + f"{key}:\n{rule}")) for key in ("checks", "rules"))
    assert old == new and [r.name for r in old.rules] == ["c"]
    with pytest.raises(HarnessInputError, match=r"s.yaml:13: checks.0.min_gain: Input should be less than 1$"):
        load_scenario(write(tmp_path, MINIMAL + "checks:\n  - name: c\n    kind: tpot_gain\n    min_gain: 2\n"))
    with pytest.raises(HarnessInputError, match=r"s.yaml:12: checks.1.name: duplicate rule name 'c'$"):
        load_scenario(write(tmp_path, MINIMAL + f"checks:\n{rule}{rule}"))
    with pytest.raises(HarnessInputError, match=r"s.yaml:12: checks: the old name of `rules`, which the scenario also "
                                                 r"gives: keep `rules` only$"):
        load_scenario(write(tmp_path, MINIMAL + f"rules:\n{rule}checks:\n{rule}"))
    # `--set` on such a file gives the rules by their current name
    over = load_scenario(write(tmp_path, MINIMAL + f"checks:\n{rule}"), ["rules=[{name: d, kind: output_identity}]"])
    assert [r.name for r in over.rules] == ["d"]


def test_missing_candidate_variant(tmp_path):
    text = MINIMAL.replace("  candidate: {}\n", "")
    with pytest.raises(HarnessInputError, match=r"s.yaml:6: variants: missing variant\(s\) candidate"):
        load_scenario(write(tmp_path, text))


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(HarnessInputError, match="no such file"):
        load_scenario(tmp_path / "absent.yaml")
    with pytest.raises(HarnessInputError, match=r"s.yaml:2: not valid YAML"):
        load_scenario(write(tmp_path, "name: t\n  engine: [micro\n"))
    with pytest.raises(HarnessInputError, match="expected a mapping"):
        load_scenario(write(tmp_path, "- a\n- b\n"))


def test_shipped_json_schema_is_current():
    shipped = json.loads((REPO / "scenarios" / "scenario.schema.json").read_text())
    assert shipped == json.loads(scenario_json_schema()), "regenerate: harness validate --schema > scenarios/scenario.schema.json"


def test_resolved_warm_scenario_reloads_unchanged(tmp_path):
    """scenario.yaml in a run directory is the resolved scenario (every default written out): it
    must load again as the same scenario, in every mode."""
    for trials in ({"mode": "restart"}, {"mode": "interleaved", "servers_up": "pair", "launches": 3, "repetitions": 6},
                   {"mode": "sequential", "block_requests": 2, "repetitions": 4}):
        scenario = scenario_from_dict({"name": "r", "engine": "micro", "variants": {"baseline": {}, "candidate": {}},
                                       "trials": trials})
        path = tmp_path / "scenario.yaml"
        path.write_text(scenario_to_yaml(scenario))
        assert load_scenario(path) == scenario


# ---- `harness run --set PATH=VALUE` -----------------------------------------------------------------


def test_set_changes_fields_and_flags_as_if_written_in_the_file(tmp_path):
    path = write(tmp_path, MINIMAL)
    scenario = load_scenario(path, ["trials.repetitions=9", "server.args.--speculative-num-steps=5",
                                    "variants.candidate.args={--speculative-eagle-topk: 1}", "profile.activities=[CPU]",
                                    "server.model_path=./models/m", "workload.output_len= 48"])
    assert scenario.trials.repetitions == 9 and scenario.workload.output_len == 48
    assert scenario.server.args["--speculative-num-steps"] == 5
    assert scenario.variants["candidate"].args == {"--speculative-eagle-topk": 1}
    # a relative path is the file's, as in the file
    assert scenario.server.model_path == str(tmp_path / "models" / "m")
    assert load_scenario(path) == load_scenario(path, [])  # the file itself is left alone


@pytest.mark.parametrize("item, expected", [
    ("trials.repetitions", "--set trials.repetitions: expected PATH=VALUE, e.g. --set trials.repetitions=6"),
    ("trials..repetitions=3", "--set trials..repetitions=3: expected PATH=VALUE"),
    ("=3", "--set =3: expected PATH=VALUE"),
    ("name.part=3", "--set name.part=3: name is not a mapping, so it has no 'part'"),
    ("workload.output_len=[1", "--set workload.output_len=[1: the value is not valid YAML"),
])
def test_a_malformed_set_is_one_line_naming_it(tmp_path, item, expected):
    with pytest.raises(HarnessInputError) as err:
        load_scenario(write(tmp_path, MINIMAL), [item])
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def test_a_set_value_the_schema_refuses_names_the_field_not_a_line_of_the_file(tmp_path, capsys):
    from sglang_spec_harness.commands.cli import main

    path = write(tmp_path, MINIMAL)
    with pytest.raises(HarnessInputError, match=rf"^{path} with --set: trials.repetitions: .*greater than or equal to 1"):
        load_scenario(path, ["trials.repetitions=0"])
    with pytest.raises(HarnessInputError, match=rf"^{path} with --set: workload.nope: unknown key"):
        load_scenario(path, ["workload.nope=1"])
    # the CLI: exit 2, one line, nothing started; a valid --set shows in the dry run's plan
    assert main(["run", str(path), "--dry-run", "--set", "trials.repetitions=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"harness run: {path} with --set: trials.repetitions:") and "\n" not in err
    assert main(["run", str(path), "--dry-run", "--set", "trials.repetitions=7", "--out", str(tmp_path / "runs")]) == 0
    assert "16 trials" in capsys.readouterr().out and not (tmp_path / "runs").exists()  # 2 profiled + 7 x 2 timed


def test_patch_modules_named_by_the_package_s_old_import_name_still_load(tmp_path):
    """Scenarios and stored run directories from before the rename say `harness.patches...`."""
    old = MINIMAL.replace("  candidate: {}", "  candidate:\n    patches: [harness.patches.sglang_restore_topk1_softmax, harness_x.y, mine]")
    s = load_scenario(write(tmp_path, old))
    assert s.variants["candidate"].patches == [
        "sglang_spec_harness.patches.sglang_restore_topk1_softmax", "harness_x.y", "mine"]
    import importlib.util
    # the module that name means today (found, not imported: importing installs its hook here)
    assert importlib.util.find_spec(s.variants["candidate"].patches[0]) is not None
