"""`hardware:` in a scenario and `harness scenario-info`: the runner labels CI's jobs come from, and
`--sglang` of the CPU install (the GPU workflows' SGLang sources on a CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.sglang_cpu.base import DEFAULT_SGLANG_SOURCE
from sglang_spec_harness.sglang_cpu.install import InstallError, sglang_requirement

REPO = Path(__file__).resolve().parents[1]
KIMI = REPO / "scenarios" / "sglang_kimi_k25_nvfp4_tp4_eagle3.yaml"


def scenario_with(tmp_path: Path, hardware: dict | None) -> Path:
    data = yaml.safe_load((REPO / "scenarios" / "micro_topk1.yaml").read_text())
    if hardware is not None:
        data["hardware"] = hardware
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_scenario_without_hardware_runs_on_a_hosted_cpu_runner(tmp_path):
    hw = load_scenario(scenario_with(tmp_path, None)).hardware
    assert (hw.accelerator, hw.gpus, hw.runs_on()) == ("cpu", 0, [("ubuntu-latest", ["ubuntu-latest"])])


def test_the_nvfp4_scenario_runs_on_blackwell_only():
    hw = load_scenario(KIMI).hardware
    assert (hw.accelerator, hw.gpus) == ("cuda", 4)
    # SGLang's runners carry one label each (scripts/ci/runner_configs.yml there): runs-on is that label alone
    assert hw.runs_on() == [("4-gpu-b200", ["4-gpu-b200"]), ("8-gpu-b200", ["8-gpu-b200"]), ("8-gpu-b300", ["8-gpu-b300"])]


def test_sglang_single_labels_are_accepted_and_passed_through(tmp_path, capsys):
    path = scenario_with(tmp_path, {"accelerator": "cuda", "gpus": 1, "runners": ["1-gpu-h100", "linux-mi35x-gpu-8.fabric"]})
    assert main(["scenario-info", "--github-matrix", str(path), "--runner", "1-gpu-h100"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["include"]
    assert (entry["runner"], entry["runs_on"]) == ("1-gpu-h100", ["1-gpu-h100"])


@pytest.mark.parametrize(("hardware", "message"), [
    ({"accelerator": "cpu", "gpus": 2}, "hardware.gpus: accelerator cpu needs no GPUs"),
    ({"accelerator": "cuda", "runners": ["h200"]}, "hardware.gpus: accelerator cuda needs at least one GPU"),
    ({"accelerator": "rocm", "gpus": 8}, "hardware.runners: name the runner label"),
    ({"accelerator": "cuda", "gpus": 1, "runners": ["h 200"]}, "hardware.runners: runner label 'h 200'"),
    ({"accelerator": "cuda", "gpus": 1, "runners": ["h200", "h200"]}, "listed twice"),
    ({"accelerator": "tpu"}, "hardware.accelerator"),
])
def test_hardware_that_cannot_be_is_bad_input_at_its_line(tmp_path, hardware, message):
    path = scenario_with(tmp_path, hardware)
    with pytest.raises(HarnessInputError, match=r"s\.yaml:\d+: ") as info:
        load_scenario(path)
    assert message in str(info.value)


def test_scenario_info_github_matrix_and_runner_filter(capsys):
    assert main(["scenario-info", "--github-matrix", str(KIMI), "--runner", "8-gpu-b300"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["include"]
    assert entry == {"scenario": str(KIMI), "name": "sglang_kimi_k25_nvfp4_tp4_eagle3", "runner": "8-gpu-b300",
                     "runs_on": ["8-gpu-b300"], "accelerator": "cuda", "gpus": 4}


def test_scenario_info_refuses_a_runner_the_scenario_cannot_use(capsys):
    assert main(["scenario-info", "--github-matrix", str(KIMI), "--runner", "1-gpu-h100"]) == 2
    err = capsys.readouterr().err
    assert "--runner 1-gpu-h100: no scenario given runs there (they list: 4-gpu-b200, 8-gpu-b200, 8-gpu-b300)" in err


def test_scenario_info_set_changes_the_labels(capsys):
    assert main(["scenario-info", "--json", str(KIMI), "--set", "hardware.runners=[gb200]"]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["jobs"] == [{"runner": "gb200", "runs_on": ["gb200"]}]


def test_sglang_sources_of_the_cpu_install(tmp_path):
    assert sglang_requirement(DEFAULT_SGLANG_SOURCE) == ["sglang==0.5.23"]
    checkout = tmp_path / "sglang"
    (checkout / "python").mkdir(parents=True)
    (checkout / "python" / "pyproject.toml").write_text("")
    assert sglang_requirement(str(checkout)) == ["-e", str((checkout / "python").resolve())]
    sdist = tmp_path / "sglang-0.5.23"
    sdist.mkdir()
    (sdist / "pyproject.toml").write_text("")
    assert sglang_requirement(str(sdist)) == [str(sdist.resolve())]
    download = tmp_path / "download"
    download.mkdir()
    with pytest.raises(InstallError, match="0 sglang-"):
        sglang_requirement(str(download))
    wheel = download / "sglang-0.5.23-py3-none-any.whl"
    wheel.write_text("")
    assert sglang_requirement(str(download)) == [str(wheel.resolve())]
    assert sglang_requirement(str(wheel)) == [str(wheel.resolve())]
