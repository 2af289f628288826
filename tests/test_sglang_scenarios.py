"""The shipped SGLang scenarios: valid, every flag known to SGLang 0.5.23, and the command they build."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT, PATCH_BOOTSTRAP_DIR, PATCHES_ENV, build_server_command
from sglang_spec_harness.import_root import harness_import_root
from sglang_spec_harness.engines.sglang import build_command
from sglang_spec_harness.engines.sglang_versions import ENGINE_OWNED_FLAGS, LAUNCH_MODULE, RENAMED_FLAGS, RESTORE_TOPK1_SOFTMAX_PATCH
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.scenario import load_scenario, render_args, scenario_from_dict

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((REPO / "scenarios").glob("sglang_*.yaml"))
CPU_SCENARIO = REPO / "scenarios" / "sglang_cpu_tiny_eagle_topk1.yaml"  # the real server on a CPU
SWEEP_SCENARIO = REPO / "scenarios" / "sglang_cpu_release_sweep.yaml"  # SGLang's releases on a CPU
MUTATIONS_SCENARIO = REPO / "scenarios" / "sglang_cpu_mutations.yaml"  # planted bugs on the CPU server
GPU_SCENARIOS = [p for p in SCENARIOS if p not in (CPU_SCENARIO, SWEEP_SCENARIO, MUTATIONS_SCENARIO)]
HELP_NAME = "sglang-0.5.23-launch-server-help.txt"
ENGINE_ADDED_FLAGS = ("--model-path", "--speculative-draft-model-path", "--host", "--port")


def help_file() -> Path:
    base = os.environ.get("HARNESS_SHARED_REFERENCE")
    path = Path(base) / HELP_NAME if base else Path(__file__).resolve().parents[2] / "shared" / "reference" / HELP_NAME
    if not path.is_file():
        pytest.skip(f"{path} not found (set HARNESS_SHARED_REFERENCE to the directory that holds {HELP_NAME})")
    return path


def flags_in_help(text: str) -> set[str]:
    """Every option string of the `options:` section: lines `  --flag ARG, --alias ARG   help`."""
    flags: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"^  (-\S.*)$", line)
        if not match:
            continue
        spec = re.split(r"\s{2,}", match.group(1))[0]  # drop help text on the same line
        for part in spec.split(", "):
            token = part.split()[0]
            if token.startswith("--"):
                flags.add(token)
    return flags


@pytest.fixture(scope="module")
def sglang_flags() -> set[str]:
    flags = flags_in_help(help_file().read_text())
    # the parser must have found the whole section, not a fragment
    assert len(flags) > 300 and {"--speculative-eagle-topk", "--tp-size", "--tensor-parallel-size"} <= flags
    return flags


def test_sglang_scenarios_are_shipped():
    assert [p.name for p in SCENARIOS] == [
        "sglang_cpu_mutations.yaml",
        "sglang_cpu_release_sweep.yaml",
        "sglang_cpu_tiny_eagle_topk1.yaml",
        "sglang_deepseek_v32_mtp_rocm_tp8.yaml",
        "sglang_kimi_k25_nvfp4_tp4_eagle3.yaml",
        "sglang_llama31_8b_eagle3_topk1.yaml",
    ]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_server_argument_exists_in_sglang_0_5_23(path, sglang_flags):
    scenario = load_scenario(path)
    used = {flag: "server.args" for flag in scenario.server.args}
    for name, variant in scenario.variants.items():
        used.update({flag: f"variants.{name}.args" for flag in variant.args})
    used.update({flag: "added by the engine" for flag in ENGINE_ADDED_FLAGS})
    unknown = [f"{flag} ({where})" for flag, where in used.items() if flag not in sglang_flags]
    assert not unknown, f"{path.name}: not in SGLang 0.5.23 --help: {', '.join(unknown)}"
    renamed = {old: new for old, new in RENAMED_FLAGS["0.5.23"].items() if old in used}
    if path == SWEEP_SCENARIO:  # the old names on purpose: the new ones do not exist before 0.5.23
        assert set(renamed) == {"--disable-cuda-graph"}, renamed
        return
    assert not renamed, f"{path.name}: renamed in 0.5.23: {renamed}"


@pytest.mark.parametrize("path", GPU_SCENARIOS, ids=lambda p: p.stem)
def test_scenario_shape(path):
    scenario = load_scenario(path)
    assert scenario.engine == "sglang" and scenario.server.model_path
    args = scenario.server.args
    # EAGLE3 needs a draft head; EAGLE/NEXTN MTP models carry their draft layer in the checkpoint
    assert scenario.server.draft_model_path or args["--speculative-algorithm"] in ("EAGLE", "NEXTN")
    assert args["--speculative-eagle-topk"] == 1
    # SGLang forces draft tokens to steps + 1 at topk 1: say it, rather than have it silently changed
    assert args["--speculative-num-draft-tokens"] == args["--speculative-num-steps"] + 1
    assert scenario.variants["baseline"].patches == [RESTORE_TOPK1_SOFTMAX_PATCH]
    assert scenario.variants["candidate"].patches == [] and not scenario.variants["candidate"].args
    assert scenario.workload.concurrency == 1 and scenario.workload.temperature == 0.0
    assert scenario.trials.repetitions >= 10 and scenario.profile.activities == ["CPU", "GPU"]
    kinds = {rule.kind for rule in scenario.rules}
    assert {"kernel_count", "accept_length", "output_identity", "tpot_gain"} <= kinds
    regions = {(c.region, tuple(c.variants)) for c in scenario.rules if c.kind == "kernel_count"}
    assert regions == {("DRAFT_DECODE", ("candidate",)), ("DRAFT_EXTEND", ("candidate",)), ("DRAFT_DECODE", ("baseline",))}
    # both ways to get a baseline are documented in the file
    text = path.read_text()
    assert "python: /" in text and "pythonpath: [" in text and "harness patch applied" in text


def test_cpu_scenario_shape():
    scenario = load_scenario(CPU_SCENARIO)
    args = scenario.server.args
    assert scenario.engine == "sglang" and scenario.server.sglang_version == "0.5.23"
    assert scenario.server.setup == "make sglang-cpu"
    assert (args["--device"], args["--speculative-eagle-topk"], args["--sleep-on-idle"]) == ("cpu", 1, True)
    assert args["--speculative-num-draft-tokens"] == args["--speculative-num-steps"] + 1
    # the CPU shims in both arms, the restore patch in the baseline only; both arms SGLang's own venv
    assert scenario.variants["baseline"].patches == ["sglang_spec_harness.sglang_cpu.shims", RESTORE_TOPK1_SOFTMAX_PATCH]
    assert scenario.variants["candidate"].patches == ["sglang_spec_harness.sglang_cpu.shims"]
    assert scenario.variants["baseline"].python == scenario.variants["candidate"].python == str(
        REPO / ".sglang-cpu" / "venv" / "bin" / "python")
    assert scenario.profile.activities == ["CPU"] and scenario.profile.with_stack  # spans and frames
    assert scenario.trials.mode == "interleaved" and scenario.trials.launches_per_arm == 3
    counted = {(c.region, c.pattern, tuple(c.variants)) for c in scenario.rules if c.kind == "kernel_count"}
    assert {("DRAFT_DECODE", "softmax", ("candidate",)), ("DRAFT_EXTEND", "softmax", ("candidate",)),
            ("DRAFT_DECODE", "softmax", ("baseline",)), ("DRAFT_DECODE", "argmax", ("candidate",))} <= counted
    assert {"accept_length", "output_identity", "tpot_gain"} <= {c.kind for c in scenario.rules}


def test_mutations_scenario_shape():
    """The mutation suite's scenario: both arms SGLang as installed with the CPU shims, the candidate with
    the mutations module (which plants the bug HARNESS_MUTATION names), only exact rules."""
    scenario = load_scenario(MUTATIONS_SCENARIO)
    assert scenario.variants["baseline"].patches == ["sglang_spec_harness.sglang_cpu.shims"]
    assert scenario.variants["candidate"].patches == ["sglang_spec_harness.sglang_cpu.shims",
                                                      "sglang_spec_harness.patches.sglang_mutations"]
    assert "HARNESS_MUTATION" in scenario.variants["candidate"].env
    assert {c.kind for c in scenario.rules} == {"output_identity", "accept_length", "output_validity"}
    assert scenario.trials.profiled == 0


def test_release_sweep_scenario_shape():
    """The sweep's scenario: the CPU scenario's model and draft configuration, settings every release
    from 0.5.10 on accepts, regions that mean the same in every release, and only exact rules."""
    sweep, cpu = load_scenario(SWEEP_SCENARIO), load_scenario(CPU_SCENARIO)
    # the baseline's release (it runs once, on `make sglang-cpu`'s venv); a sweep sets each point's own
    assert sweep.server.sglang_version == cpu.server.sglang_version
    for flag in ("--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
                 "--speculative-num-draft-tokens", "--attention-backend", "--device"):
        assert sweep.server.args[flag] == cpu.server.args[flag], flag
    assert (sweep.server.model_path, sweep.server.draft_model_path) == (cpu.server.model_path, cpu.server.draft_model_path)
    # 0.5.23's --cuda-graph-backend-* flags do not exist before it; --disable-cuda-graph does in every release
    assert sweep.server.args["--disable-cuda-graph"] is True
    assert not any(flag.startswith("--cuda-graph-backend") for flag in sweep.server.args)
    assert sweep.server.env["SGLANG_ENABLE_SPEC_V2"] == "1"
    # regions from the EAGLE worker's methods only (the stage spans exist from 0.5.16 on)
    assert sweep.regions.replace and {r.name for r in sweep.regions.rules} >= {"DRAFT_DECODE", "DRAFT_EXTEND"}
    assert all("eagle_worker_v2" in r.regex for r in sweep.regions.rules)
    assert sweep.profile.with_stack and {c.kind for c in sweep.rules} == {"kernel_count", "output_identity"}
    assert sweep.variants["baseline"].patches == cpu.variants["baseline"].patches
    assert sweep.variants["candidate"].patches == cpu.variants["candidate"].patches


def test_patch_module_named_by_the_scenarios_exists():
    spec = importlib.util.find_spec(RESTORE_TOPK1_SOFTMAX_PATCH)
    assert spec is not None and spec.origin and Path(spec.origin).is_file()
    assert (PATCH_BOOTSTRAP_DIR / "sitecustomize.py").is_file()


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_build_command_argv_and_environment(path, tmp_path):
    scenario = load_scenario(path)
    profile_dir = tmp_path / "profile"
    for variant in ("baseline", "candidate"):
        command = build_server_command(scenario, variant, host="127.0.0.1", port=30123, profile_dir=profile_dir)
        engine_only = build_command(scenario, variant, host="127.0.0.1", port=30123, profile_dir=profile_dir)
        assert (command.argv, command.env) == (engine_only.argv, engine_only.env)  # + server.cpus, resolved here
        draft = ["--speculative-draft-model-path", scenario.server.draft_model_path] if scenario.server.draft_model_path else []
        assert command.argv == [
            scenario.variants[variant].python or sys.executable, "-m", LAUNCH_MODULE,
            "--model-path", scenario.server.model_path,
            *draft,
            "--host", "127.0.0.1", "--port", "30123",
            *render_args(scenario.server_args(variant)),
        ]
        pythonpath = command.env["PYTHONPATH"].split(os.pathsep)
        # the harness alone, never the folder that holds it (site-packages after `pip install .`)
        assert str(harness_import_root()) in pythonpath
        assert str(HARNESS_SOURCE_ROOT) not in pythonpath
        assert command.env["SGLANG_TORCH_PROFILER_DIR"] == str(profile_dir)
        patches = scenario.variants[variant].patches
        if patches:
            assert command.env[PATCHES_ENV] == ",".join(patches)
            # the bootstrap must come before the harness root and anything inherited
            assert pythonpath.index(str(PATCH_BOOTSTRAP_DIR)) < pythonpath.index(str(harness_import_root()))
        else:
            assert PATCHES_ENV not in command.env
            assert str(PATCH_BOOTSTRAP_DIR) not in pythonpath
        # the baseline patch in the baseline only (the mutation suite's arms: SGLang as installed, both)
        assert (RESTORE_TOPK1_SOFTMAX_PATCH in patches) == (variant == "baseline" and path != MUTATIONS_SCENARIO)
    assert "--speculative-eagle-topk 1" in command.shell()


def _scenario(**server):
    return scenario_from_dict({
        "name": "s", "engine": "sglang",
        "server": server,
        "variants": {
            "baseline": {"python": "/opt/old/bin/python", "pythonpath": ["/src/old/python"]},
            "candidate": {},
        },
    })


def test_build_command_two_installs_baseline(tmp_path):
    scenario = _scenario(model_path="/models/m", args={"--tp-size": 2})
    command = build_command(scenario, "baseline", host="127.0.0.1", port=1, profile_dir=tmp_path)
    assert command.argv[:3] == ["/opt/old/bin/python", "-m", LAUNCH_MODULE]
    assert "--speculative-draft-model-path" not in command.argv  # no draft path: no flag
    assert command.argv[-2:] == ["--tp-size", "2"]
    assert command.env["PYTHONPATH"].split(os.pathsep)[0] == "/src/old/python"
    assert PATCHES_ENV not in command.env


def test_build_command_requires_model_path(tmp_path):
    with pytest.raises(HarnessInputError, match=r"server.model_path: required for engine 'sglang'"):
        build_command(_scenario(), "candidate", host="127.0.0.1", port=1, profile_dir=tmp_path)


@pytest.mark.parametrize("flag", sorted(ENGINE_OWNED_FLAGS))
def test_flags_the_engine_sets_are_refused_in_args(flag, tmp_path):
    scenario = _scenario(model_path="/models/m", args={flag: "x"})
    with pytest.raises(HarnessInputError, match=rf"server.args: {re.escape(flag)} is set by"):
        build_command(scenario, "candidate", host="127.0.0.1", port=1, profile_dir=tmp_path)


def test_restore_patch_with_multi_layer_eagle_is_refused_before_starting(tmp_path):
    scenario = scenario_from_dict({
        "name": "s", "engine": "sglang",
        "server": {"model_path": "/models/m", "args": {"--enable-multi-layer-eagle": True}},
        "variants": {"baseline": {"patches": [RESTORE_TOPK1_SOFTMAX_PATCH]}, "candidate": {}},
    })
    build_command(scenario, "candidate", host="127.0.0.1", port=1, profile_dir=tmp_path)  # no patch: fine
    with pytest.raises(HarnessInputError, match=r"variants.baseline: patch sglang_spec_harness.patches.sglang_restore_topk1_softmax "
                                                r"cannot be combined with --enable-multi-layer-eagle: .*MultiLayerEagleWorkerV2"):
        build_command(scenario, "baseline", host="127.0.0.1", port=1, profile_dir=tmp_path)


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_no_shipped_rule_cannot_fail(path):
    # A rule with every bound unset is only informational (INFO): none is shipped.
    from sglang_spec_harness.verdict.judge import informational

    scenario = load_scenario(path)
    assert scenario.rules
    assert [c.name for c in scenario.rules if informational(c)] == []


def test_rocm_scenario_reproduces_26358():
    scenario = load_scenario(REPO / "scenarios" / "sglang_deepseek_v32_mtp_rocm_tp8.yaml")
    args = scenario.server.args
    assert scenario.server.model_path == "deepseek-ai/DeepSeek-V3.2" and scenario.server.draft_model_path is None
    # SGLang 0.5.23's own DSA + MTP fixture (sglang/test/server_fixtures/dsa_mtp_fixture.py)
    assert (args["--tp-size"], args["--speculative-algorithm"], args["--speculative-num-steps"],
            args["--speculative-eagle-topk"], args["--speculative-num-draft-tokens"],
            args["--mem-fraction-static"]) == (8, "EAGLE", 5, 1, 6, 0.7)
    identity = [c for c in scenario.rules if c.kind == "output_identity"]
    assert len(identity) == 1 and identity[0].min_fraction == 1.0  # what #26358 needed
    assert scenario.workload.temperature == 0.0 and scenario.workload.concurrency == 1


def test_rocm_scenario_matches_sglang_own_dsa_mtp_fixture():
    # The fixture in the 0.5.23 wheel (tests/support/sglang_wheel.py downloads it once).
    import ast

    from support import sglang_wheel

    try:
        root = sglang_wheel.source_root()
    except sglang_wheel.WheelUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    tree = ast.parse((root / "sglang/test/server_fixtures/dsa_mtp_fixture.py").read_text())
    base = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DsaMtpServerBase")
    fixture = {t.target.id: ast.literal_eval(t.value) for t in base.body if isinstance(t, ast.AnnAssign) and t.value}
    args = load_scenario(REPO / "scenarios" / "sglang_deepseek_v32_mtp_rocm_tp8.yaml").server.args
    assert (args["--tp-size"], args["--speculative-algorithm"], args["--speculative-num-steps"],
            args["--speculative-eagle-topk"], args["--speculative-num-draft-tokens"], args["--mem-fraction-static"]) == (
        fixture["tp_size"], fixture["speculative_algorithm"], fixture["speculative_num_steps"],
        fixture["speculative_eagle_topk"], fixture["speculative_num_draft_tokens"], fixture["mem_fraction_static"])
    assert '"deepseek-ai/DeepSeek-V3.2"' in ast.unparse(tree)  # the model its docstring example names


def test_every_sglang_scenario_names_the_version_the_extra_pins_and_the_code_knows():
    import tomllib

    from sglang_spec_harness.sglang_cpu import SGLANG_VERSION

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["sglang"]
    (pin,) = [spec for spec in extra if spec.startswith("sglang") and not spec.startswith("sglang-spec-harness")]
    assert pin == f"sglang=={SGLANG_VERSION}"  # `pip install .[sglang]` installs what the tables know
    assert SGLANG_VERSION in RENAMED_FLAGS  # the flag table has a row for it
    for path in SCENARIOS:
        assert load_scenario(path).server.sglang_version == SGLANG_VERSION, path.name
