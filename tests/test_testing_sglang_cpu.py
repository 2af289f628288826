"""`sglang_spec_harness.testing` inside SGLang's own test style, against the real SGLang 0.5.23 server
on this CPU: tests/sglang_style/test_eagle_topk1_draft_runs_no_softmax.py (a `CustomTestCase` that
launches the server with the real wheel's `popen_launch_server`) run as SGLang's CI runs it,
`python3 FILE`, in SGLang's environment (.sglang-cpu, with what its test utilities and the harness
need besides: tests/support/sglang_style.py) with the harness installed.

The server's environment is scenarios/sglang_cpu_tiny_eagle_topk1.yaml's (CPU engine, shims): as
installed (argmax in the draft) the file passes; with the harness's baseline patch that restores
the softmax it fails, naming what it found. Either way it leaves no server and no trace folder.
Marked `real_sglang`: skipped without `make sglang-cpu` (failed where HARNESS_REQUIRE_SGLANG_CPU
is set), one server at a time.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from support.sglang_style import run_test_file, sglang_test_python

from sglang_spec_harness.engines import build_server_command
from sglang_spec_harness.run.server import LOOPBACK
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.sglang_cpu.base import is_current

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "sglang_cpu_tiny_eagle_topk1.yaml"
INSTALL = REPO / ".sglang-cpu"
SGLANG_BIN = INSTALL / "venv" / "bin"  # SGLang's `sglang` command, which popen_launch_server runs
REQUIRED_ENV = "HARNESS_REQUIRE_SGLANG_CPU"
TEST_FILE = "test_eagle_topk1_draft_runs_no_softmax.py"
STEPS = 5  # the file's --speculative-num-steps: the draft selects STEPS - 1 times per span
# the server's start (DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH, 600 s) and a CPU trace with stacks (minutes)
FILE_TIMEOUT_S = 1200


def sglang_test_environment(variant: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The file's interpreter and environment: the scenario's for `variant`'s server (CPU engine,
    shims, patches; the harness package on PYTHONPATH), SGLang's `sglang` first on PATH, and a
    temporary folder of its own to watch."""
    if not is_current(INSTALL):
        why = f"{INSTALL} is missing or out of date: run `make sglang-cpu`"
        if os.environ.get(REQUIRED_ENV):
            pytest.fail(why)
        pytest.skip(why)
    try:
        python = sglang_test_python(INSTALL)
    except RuntimeError as exc:
        if os.environ.get(REQUIRED_ENV):
            raise
        pytest.skip(f"SGLang's test environment could not be built: {exc}")
    command = build_server_command(load_scenario(SCENARIO), variant, host=LOOPBACK, port=0,
                                   profile_dir=tmp_path / "profile")
    (tmp_path / "tmp").mkdir()
    return python, {**{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))},
                    **command.env, "TMPDIR": str(tmp_path / "tmp"),
                    "PATH": os.pathsep.join([str(SGLANG_BIN), os.environ.get("PATH", "")]),
                    "SGLANG_CPU_MODELS": str(INSTALL / "models")}


@pytest.mark.real_sglang
@pytest.mark.timeout(FILE_TIMEOUT_S + 120)
def test_the_file_passes_on_the_server_as_installed(tmp_path):
    python, env = sglang_test_environment("candidate", tmp_path)
    run = run_test_file(python, TEST_FILE, env=env, cwd=tmp_path, timeout=FILE_TIMEOUT_S)
    assert run.returncode == 0 and re.search(r"^Ran 1 test in .*\n\nOK$", run.output, re.M), run.output[-6000:]
    assert "[CI Test Method] TestEagleTopk1DraftRunsNoSoftmax.test_no_softmax_in_the_draft" in run.output  # CustomTestCase's
    assert not run.leftover, "the file left processes of its own"
    assert not list((tmp_path / "tmp").glob("harness-server-profile-*")), "a trace folder was left"


@pytest.mark.real_sglang
@pytest.mark.timeout(FILE_TIMEOUT_S + 120)
def test_the_file_fails_with_the_softmax_restored_saying_what_it_found(tmp_path):
    python, env = sglang_test_environment("baseline", tmp_path)
    run = run_test_file(python, TEST_FILE, env=env, cwd=tmp_path, timeout=FILE_TIMEOUT_S)
    # SGLang's CustomTestCase runs each method through its `retry`, which prints the failure's traceback
    # and raises its own Exception: unittest then counts an error, not a failure
    assert run.returncode == 1 and "FAILED (errors=1)" in run.output, run.output[-6000:]
    assert "Exception: retry() exceed maximum number of retries." in run.output
    assert "harness patch applied" in run.output  # the server's own stderr: the baseline really ran
    found = re.search(r"^AssertionError: http://127\.0\.0\.1:\d+: '[^']+' in DRAFT_DECODE \((\d+) spans\): expected none, "
                      rf"found {STEPS - 1} per replay \(\1 of \1 replays, (\d+) in all; aten::_softmax x\2\)$", run.output, re.M)
    assert found is not None and int(found[2]) == (STEPS - 1) * int(found[1]), run.output[-6000:]
    assert not run.leftover, "the file left processes of its own"
    assert not list((tmp_path / "tmp").glob("harness-server-profile-*")), "a trace folder was left"
