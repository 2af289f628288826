"""The core install (`pip install sglang-spec-harness`, no extras): trace analysis, `validate` and
`check` work without torch, fastapi, uvicorn, matplotlib, jinja2 and sqlalchemy; a command that
needs an extra says which one in one line, exit 2.

Each case runs the harness in a subprocess whose PYTHONPATH starts with a `sitecustomize.py` that
makes those packages unimportable (an ImportError from a meta-path finder, as if not installed),
and that records every import it refused, so the tests also show what the harness tried to import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.rundir_factory import Arm, file_facts, write_run_dir

REPO = Path(__file__).resolve().parents[1]
EXTRAS_PACKAGES = ("torch", "fastapi", "uvicorn", "starlette", "matplotlib", "jinja2", "sqlalchemy")
QWEN3_ROCM = "tracelens_sglang_qwen3_8b_decode_rocm.json.gz"
A100 = "hta_negative_queue_length_rank0.json.gz"

BLOCKER = '''\
import importlib.abc, os, sys

BLOCKED = set(os.environ["TEST_BLOCKED_MODULES"].split(","))
REFUSED = os.environ["TEST_REFUSED_LOG"]


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            with open(REFUSED, "a") as log:
                log.write(name + "\\n")
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
'''


@pytest.fixture
def core(tmp_path):
    """Run `harness ARGS...` (or `python -c CODE`) as in a core install; returns (result, refused imports)."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    refused = tmp_path / "refused.txt"

    def run(*args: str, code: str | None = None, blocked: tuple[str, ...] = EXTRAS_PACKAGES, cwd: Path = REPO):
        refused.write_text("")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),
               "TEST_BLOCKED_MODULES": ",".join(blocked), "TEST_REFUSED_LOG": str(refused)}
        argv = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "sglang_spec_harness.commands.cli", *args]
        result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
        return result, sorted(set(refused.read_text().split()))

    return run


def test_the_blocker_blocks(core):
    result, refused = core(code="import torch")
    assert result.returncode == 1 and "ModuleNotFoundError: No module named 'torch'" in result.stderr
    assert refused == ["torch"]


def test_analyze_a_real_trace_without_the_extras(core, shared_traces):
    result, refused = core("analyze", "--json", str(shared_traces / QWEN3_ROCM))
    assert result.returncode == 0, result.stderr
    assert refused == []  # never even tried
    file = json.loads(result.stdout)["files"][0]
    assert (file["platform"], file["graph_launches"], file["kernels_per_graph_launch"]) == ("rocm", 1, {"544": 1})
    decode = file["regions"]["DRAFT_DECODE"]
    assert (decode["unit"], decode["units"]) == ("graph_launch", 1)
    assert decode["counts"]["softmax"]["per_replay_histogram"] == {"0": 1}
    assert file["validity"]["kernels"] == 555


def test_the_python_api_without_the_extras(core, shared_traces):
    code = f"""
from sglang_spec_harness.traces import analyze_traces, count_in_graph_replays
analysis = analyze_traces([{str(shared_traces / A100)!r}])
print(analysis.files[0].graph_launches, analysis.files[0].kernels_per_graph_launch)
counts = count_in_graph_replays({str(shared_traces / A100)!r}, ".", "(none)")  # every GPU op of a replay, memsets too
print(counts.replays, counts.total, counts.max())
"""
    result, refused = core(code=code)
    assert result.returncode == 0, result.stderr
    assert refused == []
    assert result.stdout.splitlines() == ["70 {1: 35, 2: 30, 8: 5}", "70 345 20"]


def test_validate_and_check_without_the_extras(core, tmp_path):
    result, _ = core("validate", *sorted(str(p) for p in (REPO / "scenarios").glob("*.yaml")))
    assert result.returncode == 0, result.stderr
    rng = np.random.default_rng(3)
    base = Arm(tpot_ms=list(10.0 * np.exp(rng.normal(0, 0.01, 6))), profile=[file_facts(softmax_per_replay=2)])
    cand = Arm(tpot_ms=list(9.0 * np.exp(rng.normal(0, 0.01, 6))), profile=[file_facts(softmax_per_replay=0)])
    run_dir = write_run_dir(tmp_path, base, cand)
    result, refused = core("check", str(run_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verdict: PASS (exit 0)" in result.stdout
    assert refused == []


@pytest.mark.parametrize(("args", "line"), [
    (["report", "reports/latest"],
     "harness report: needs the [report] extra: pip install 'sglang-spec-harness[report]'"),
    (["history", "ingest", "reports/runs"],
     "harness history: needs the [history] extra: pip install 'sglang-spec-harness[history]'"),
    (["history", "report"],
     "harness history: needs the [history] and [report] extras: pip install 'sglang-spec-harness[history,report]'"),
    (["run", "scenarios/micro_topk1.yaml"],
     "harness run: needs the [micro] and [report] extras: pip install 'sglang-spec-harness[micro,report]'"),
    (["run", "scenarios/sglang_cpu_tiny_eagle_topk1.yaml"],
     "harness run: needs the [report] extra: pip install 'sglang-spec-harness[report]'"),
    (["bisect", "scenarios/micro_topk1.yaml", "--source", ".", "--good", "HEAD", "--bad", "HEAD"],
     "harness bisect: needs the [report] extra: pip install 'sglang-spec-harness[report]'"),
])
def test_a_command_that_needs_an_extra_says_which(core, args, line):
    result, _ = core(*args)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (2, [line], "")


def test_run_dry_run_needs_only_the_core(core):
    result, refused = core("run", "scenarios/micro_topk1.yaml", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "server launches" in result.stdout and refused == []


def test_a_path_that_escapes_the_checks_still_gets_one_line(core):
    """Without `report`'s own check, the report's first matplotlib import is caught by the CLI."""
    code = ("import sys, sglang_spec_harness.extras\n"
            "sglang_spec_harness.extras.require_extras = lambda *extras: None\n"
            "from sglang_spec_harness.commands.cli import main\n"
            "sys.exit(main(['report', 'reports/latest']))\n")
    result, refused = core(code=code)
    assert (result.returncode, result.stderr.splitlines()) == (2, [
        "harness report: needs the [report] extra: pip install 'sglang-spec-harness[report]' "
        "(no module named 'matplotlib')"])
    assert refused == ["matplotlib"]
