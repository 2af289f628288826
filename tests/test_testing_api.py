"""sglang_spec_harness.testing on stored real traces (the micro engine's CUDA graphs on an H200, tests/fixtures):
exact counts per replay, the positive controls (replays, eager counts), the tidy frame, the assertion
helpers' messages, bad input; the pytest plugin: registered as an installed entry point, inert until
a test asks for its fixture; and `profile_server` against the micro engine's live server (its
`/start_profile` is SGLang's): through that fixture, from plain code (the caller's event loop and
signal handlers kept, the temporary trace folder removed or kept as asked), and from a unittest file
in SGLang's style run as `python3 FILE` (tests/sglang_style/). The real SGLang server:
tests/test_testing_sglang_cpu.py."""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.sglang_style import run_test_file

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.testing import (
    CountUnavailable,
    ProfilingError,
    ServerProfile,
    assert_eager_kernel,
    assert_kernel,
    assert_no_kernel,
    assert_replays,
    profile_server,
)

FIXTURES = Path(__file__).parent / "fixtures"
NUM_STEPS = 3  # the recorder's --speculative-num-steps: the draft selects NUM_STEPS - 1 times per replay
CYCLES = 5  # EAGLE cycles in the bs1 recordings (tests/test_gpu_fixtures.py)


@pytest.fixture(scope="module")
def fast_path() -> ServerProfile:
    return ServerProfile.from_traces(FIXTURES / "micro_cuda_on_bs1.trace.json.gz", patterns={"argmax": "ArgMaxOps"})


@pytest.fixture(scope="module")
def no_fast_path() -> ServerProfile:
    return ServerProfile.from_traces([FIXTURES / "micro_cuda_off_bs1.trace.json.gz"])


def test_counts_per_graph_replay_are_exact(fast_path, no_fast_path):
    assert fast_path.unit == no_fast_path.unit == "graph_launch"
    assert fast_path.count("softmax", region="DRAFT_DECODE") == (0,) * CYCLES
    assert fast_path.count("argmax", region="DRAFT_DECODE") == (NUM_STEPS - 1,) * CYCLES
    assert no_fast_path.count("softmax", region="DRAFT_DECODE") == (NUM_STEPS - 1,) * CYCLES
    assert no_fast_path.count("softmax", region="DRAFT_DECODE", per="total") == (NUM_STEPS - 1) * CYCLES
    assert no_fast_path.count("softmax", region="DRAFT_EXTEND") == (1,) * CYCLES
    extend = no_fast_path.counts("softmax", "DRAFT_EXTEND")
    # inside the replays, one per replay; one more launched eagerly in each span, outside the graph
    assert (extend.replays, extend.eager, extend.matched_names) == (CYCLES, CYCLES, {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)": CYCLES})
    assert no_fast_path.count("softmax", region="TARGET_VERIFY", per="total") == 0
    assert set(fast_path.regions) >= {"DRAFT_DECODE", "DRAFT_EXTEND", "TARGET_VERIFY"}


def test_a_pattern_or_region_not_counted_yet_is_counted_on_the_same_traces(no_fast_path):
    # a regex pattern, and a regex region over the step label: the analysis runs again with them
    assert no_fast_path.count("cunn_SoftMaxForward", region="DRAFT_DECODE") == (NUM_STEPS - 1,) * CYCLES
    assert no_fast_path.count("softmax", region=r"^step\[DECODE bs=1\]$") == (NUM_STEPS - 1,) * CYCLES


def test_the_frame_is_one_row_per_pattern_region_and_replay(fast_path):
    frame = fast_path.frame()
    assert list(frame.columns) == ["pattern", "region", "unit", "file", "rank", "replay", "ts", "count"]
    draft = frame[(frame["region"] == "DRAFT_DECODE")].set_index(["pattern", "replay"])["count"]
    assert draft.loc["argmax"].tolist() == [NUM_STEPS - 1] * CYCLES
    assert draft.loc["softmax"].tolist() == [0] * CYCLES
    assert frame.groupby(["pattern", "region"]).size().to_dict() == {
        (p, r): CYCLES for p in ("argmax", "softmax") for r in ("DRAFT_DECODE", "DRAFT_EXTEND", "TARGET_VERIFY")}


def test_assert_no_kernel_passes_and_fails_with_a_readable_message(fast_path, no_fast_path):
    assert assert_no_kernel(fast_path, "softmax", region="DRAFT_DECODE").replays == CYCLES
    assert assert_kernel(no_fast_path, "softmax", region="DRAFT_DECODE", at_least=NUM_STEPS - 1).min() == NUM_STEPS - 1
    with pytest.raises(AssertionError) as failed:
        assert_no_kernel(no_fast_path, "softmax", region="DRAFT_DECODE")
    assert str(failed.value).startswith(
        "micro_cuda_off_bs1.trace.json.gz: 'cunn_SoftMaxForward|softmax_warp_forward|^aten::_softmax$' in DRAFT_DECODE "
        "(5 graph replays): expected none, found 2 per replay (5 of 5 replays, 10 in all; void at::native::")
    # the draft extend's eager softmax (outside the graph) fails an absence too
    with pytest.raises(AssertionError, match=r"found 1 per replay \(5 of 5 replays, 5 in all, 5 launched eagerly"):
        assert_no_kernel(no_fast_path, "softmax", region="DRAFT_EXTEND")
    with pytest.raises(AssertionError, match=r"in DRAFT_DECODE \(5 graph replays\): expected >= 1 in every replay, found 0 per replay"):
        assert_kernel(fast_path, "softmax", region="DRAFT_DECODE")


def test_the_positive_controls_need_no_internals(fast_path, no_fast_path):
    # replays: graph replays on a GPU trace (PREFILL ran eagerly: none); a regex region is counted too
    assert [no_fast_path.replays(r) for r in ("DRAFT_DECODE", "DRAFT_EXTEND", "TARGET_VERIFY", "PREFILL")] == [CYCLES] * 3 + [0]
    assert no_fast_path.replays(r"^step\[DECODE bs=1\]$") == CYCLES and no_fast_path.replays("no such span") == 0
    assert assert_replays(fast_path, "DRAFT_DECODE", at_least=CYCLES) == CYCLES
    with pytest.raises(AssertionError, match=r"micro_cuda_on_bs1.trace.json.gz: PREFILL has 0 graph replays, expected >= 1 "
                       r"\(regions that have some: DRAFT_EXTEND 5, DRAFT_DECODE 5, TARGET_VERIFY 5\)$"):
        assert_replays(fast_path, "PREFILL")
    # eager: the softmax outside the graphs, in the draft extend's spans (one each) and the prefill's
    assert no_fast_path.eager_count("softmax", region="DRAFT_EXTEND") == CYCLES
    assert (no_fast_path.eager_count("softmax", region="PREFILL"), fast_path.eager_count("softmax", region="PREFILL")) == (1, 1)
    assert no_fast_path.eager_count("softmax", region="DRAFT_DECODE") == 0  # its softmax is all in the replays
    assert no_fast_path.eager_count("softmax") == CYCLES + 1 and fast_path.eager_count("softmax") == 1
    ops = no_fast_path.analyzed.ops_frame()  # the same figure, from the trace's every op
    assert int(ops.loc[~ops["is_graph"], "match:softmax"].sum()) == CYCLES + 1
    assert no_fast_path.eager_count("cunn_SoftMaxForward") == CYCLES + 1  # a regex, counted on the same traces
    assert assert_eager_kernel(fast_path, "softmax", region="PREFILL") == 1
    with pytest.raises(AssertionError, match=r": 'cunn_SoftMaxForward\|softmax_warp_forward\|\^aten::_softmax\$' ran eagerly "
                       r"0 times in DRAFT_DECODE's spans, outside graph replays; expected >= 1$"):
        assert_eager_kernel(no_fast_path, "softmax", region="DRAFT_DECODE")
    with pytest.raises(AssertionError, match=r": 'no_such_kernel' ran eagerly 0 times anywhere"):
        assert_eager_kernel(fast_path, re.compile("no_such_kernel"))


def test_a_region_without_replays_is_unavailable_not_zero(fast_path):
    with pytest.raises(CountUnavailable, match="region 'PREFILL' has no graph replays; it ran eagerly"):
        assert_no_kernel(fast_path, "softmax", region="PREFILL")


def test_bad_input_is_one_line():
    with pytest.raises(HarnessInputError, match="no trace file given"):
        ServerProfile.from_traces([])
    for options, message in (({"num_steps": 0}, "num_steps=0: expected an integer >= 1"),
                             ({"prompts": []}, "prompts: expected a non-empty list"),
                             ({"prompts": ["ok", [1, "x"]]}, r"prompt \[1, 'x'\]: expected a text or a list of token ids"),
                             ({"max_new_tokens": 1}, "max_new_tokens=1: expected an integer >= 2"),
                             ({"activities": ["TPU"]}, r"activities \['TPU'\]: expected a list of CPU, GPU"),
                             ({"activities": ["MEM"]}, "activities name neither CPU nor GPU")):
        with pytest.raises(HarnessInputError, match=message) as raised:
            profile_server("http://127.0.0.1:9", **options)  # checked before anything is sent
        assert "\n" not in str(raised.value)


def test_the_plugin_is_an_installed_entry_point_and_imports_little(pytestconfig):
    (entry,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "harness"]
    assert entry.value == "sglang_spec_harness.pytest_plugin"
    assert pytestconfig.pluginmanager.has_plugin("harness")  # loaded here through that entry point
    # loading it (as pytest does at start-up) imports neither the analysis nor pandas nor httpx
    probe = ("import sys; import sglang_spec_harness.pytest_plugin; "
             "print(sorted(m for m in ('sglang_spec_harness.testing', 'sglang_spec_harness.traces.analysis', 'pandas', 'httpx') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
    # and the API itself needs only the core install (no torch, no server extras)
    probe = ("import sys; import sglang_spec_harness.testing; print(sorted(m for m in "
             "('torch', 'fastapi', 'uvicorn', 'matplotlib', 'jinja2', 'sqlalchemy') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_fixture_is_there_for_a_suite_that_only_installed_the_harness(tmp_path):
    # a test suite of its own, as SGLang's would be: no conftest, no `-p`; the entry point brings the fixture
    (tmp_path / "test_suite.py").write_text(
        "import pytest\n"
        "from sglang_spec_harness.errors import HarnessInputError\n\n"
        "def test_fixture(sglang_profile):\n"
        "    with pytest.raises(HarnessInputError, match='num_steps=0'):\n"
        "        sglang_profile('http://127.0.0.1:9', num_steps=0)\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:]


# ---- profile_server end to end, on the built-in micro engine (SGLang's HTTP API, in seconds) -----

MICRO_FLAGS = ["--vocab-size", "8192", "--num-threads", "1", "--log-level", "warning"]
MICRO_NUM_STEPS = 3  # the micro engine's default --speculative-num-steps


@pytest.fixture(scope="module", params=["on", "off"])
def micro_server(request, tmp_path_factory):
    from sglang_spec_harness.engines import ServerCommand
    from sglang_spec_harness.run.server import ServerProcess, free_port

    port = free_port()
    flags = MICRO_FLAGS + ([] if request.param == "on" else ["--disable-topk1-fast-path"])
    command = ServerCommand([sys.executable, "-m", "sglang_spec_harness.micro.server", "--port", str(port), *flags])
    with ServerProcess(command, log_path=tmp_path_factory.mktemp("micro") / "server.log", port=port,
                       startup_timeout_s=120) as server:
        yield request.param, server.base_url


@pytest.mark.slow
def test_the_fixture_profiles_a_live_server_through_start_profile(micro_server, sglang_profile):
    variant, url = micro_server
    # one request: a prefill, then one EAGLE cycle per step (the profiler stops itself after 5)
    profile = sglang_profile(url, num_steps=5, prompts=[[11, 12, 13, 14]], max_new_tokens=64)
    assert profile.base_url == url and profile.unit == "span" and len(profile.traces) == 1
    softmax = 0 if variant == "on" else MICRO_NUM_STEPS - 1
    assert profile.count("softmax", region="DRAFT_DECODE") == (softmax,) * 4
    assert profile.count("softmax", region="TARGET_VERIFY") == (0,) * 4
    if variant == "on":
        assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")
    else:
        with pytest.raises(AssertionError, match=f"{url}: .* in DRAFT_DECODE \\(4 spans\\): expected none, found 2 per replay"):
            assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")
    # fewer steps ran than asked for: the profiler is stopped and its trace read all the same
    short = sglang_profile(url, num_steps=50, prompts=["again"], max_new_tokens=8)
    assert short.traces != profile.traces and 0 < len(short.count("softmax", region="DRAFT_DECODE")) < 50


@pytest.mark.slow
def test_a_failed_request_stops_the_profiler_and_says_which(micro_server, tmp_path):
    _, url = micro_server
    with pytest.raises(ProfilingError, match=f"{url}: prompt 1 failed while profiling: HTTP 400"):
        profile_server(url, num_steps=50, prompts=["fine", [10**9]], output_dir=tmp_path)  # an id past the vocabulary
    profile_server(url, num_steps=2, prompts=["fine"], max_new_tokens=8, output_dir=tmp_path / "next")  # not still profiling


@pytest.mark.slow
def test_profile_server_leaves_the_callers_event_loop_and_signal_handlers_as_they_were(micro_server, tmp_path):
    """A test (or SGLang's test utilities) may have set an event loop in its thread: asyncio.run there
    would leave none set ('There is no current event loop') and replace the SIGINT handler meanwhile."""
    _, url = micro_server
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    handler = signal.getsignal(signal.SIGINT)
    try:
        profile_server(url, num_steps=2, prompts=["fine"], max_new_tokens=8, output_dir=tmp_path / "a")
        assert asyncio.get_event_loop() is loop and signal.getsignal(signal.SIGINT) is handler

        async def inside_a_running_loop() -> int:  # pytest-asyncio, IsolatedAsyncioTestCase
            return profile_server(url, num_steps=2, prompts=["fine"], max_new_tokens=8, output_dir=tmp_path / "b").replays("DRAFT_DECODE")

        assert loop.run_until_complete(inside_a_running_loop()) >= 1
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.mark.slow
def test_a_temporary_trace_folder_goes_with_its_profile_and_keep_traces_keeps_it(micro_server, tmp_path, monkeypatch):
    _, url = micro_server
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes the temporary folders
    ask = {"num_steps": 2, "prompts": ["fine"], "max_new_tokens": 8}
    profile = profile_server(url, **ask)
    folder = profile.trace_dir
    assert folder is not None and folder.parent == tmp_path and not profile.kept
    assert all(path.parent == folder and path.is_file() for path in profile.traces)
    profile.close()
    assert not folder.exists() and profile.count("softmax", region="DRAFT_DECODE")  # counted already: still read
    with profile_server(url, **ask) as profile:
        folder = profile.trace_dir
    assert folder is not None and not folder.exists()
    folder = profile_server(url, **ask).trace_dir  # dropped at once: collected
    gc.collect()
    assert folder is not None and not folder.exists()
    with pytest.raises(ProfilingError):  # a failure removes it too
        profile_server(url, num_steps=50, prompts=["fine", [10**9]])
    assert not list(tmp_path.glob("harness-server-profile-*"))
    # kept: in a folder of keep_traces (or $HARNESS_KEEP_TRACES), named where an assertion fails
    kept = profile_server(url, keep_traces=tmp_path / "kept", **ask)
    monkeypatch.setenv("HARNESS_KEEP_TRACES", str(tmp_path / "kept-too"))
    also = profile_server(url, **ask)
    assert kept.kept and also.kept and kept.trace_dir.parent == tmp_path / "kept" and also.trace_dir.parent == tmp_path / "kept-too"
    with pytest.raises(AssertionError, match=rf"expected >= 1 in every replay, found 0 per replay .* \[traces: {re.escape(str(kept.trace_dir))}\]$"):
        assert_kernel(kept, "softmax", region="TARGET_VERIFY")
    kept_dir, also_dir = kept.trace_dir, also.trace_dir
    kept.close()
    del kept, also
    gc.collect()
    assert list(kept_dir.glob("*.trace.json.gz")) and list(also_dir.glob("*.trace.json.gz"))
    with pytest.raises(HarnessInputError, match="give output_dir or keep_traces, not both"):
        profile_server(url, output_dir=tmp_path / "out", keep_traces=tmp_path / "kept", **ask)


@pytest.mark.slow
@pytest.mark.parametrize("fast_path", ["on", "off"])
def test_a_unittest_file_in_sglangs_style_passes_or_fails_as_python3_file(fast_path, tmp_path):
    """tests/sglang_style/test_micro_draft_runs_no_softmax.py as SGLang's CI runs a file: `python3
    FILE`, unittest, its exit status. pytest cannot be imported there (the API must not need it)."""
    (tmp_path / "no-pytest").mkdir()
    for name in ("pytest", "_pytest"):
        (tmp_path / "no-pytest" / f"{name}.py").write_text("raise ImportError('pytest imported')\n")
    (tmp_path / "tmp").mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
           "PYTHONPATH": str(tmp_path / "no-pytest"), "TMPDIR": str(tmp_path / "tmp"),
           "MICRO_SERVER_ARGS": "" if fast_path == "on" else "--disable-topk1-fast-path"}
    run = run_test_file(sys.executable, "test_micro_draft_runs_no_softmax.py", env=env, cwd=tmp_path, timeout=240)
    if fast_path == "on":
        assert run.returncode == 0 and re.search(r"^Ran 1 test in .*\n\nOK$", run.output, re.M), run.output[-4000:]
    else:
        assert run.returncode == 1 and "FAILED (failures=1)" in run.output, run.output[-4000:]
        assert re.search(rf"^AssertionError: http://127\.0\.0\.1:\d+: '[^']+' in DRAFT_DECODE \(4 spans\): expected none, "
                         rf"found {MICRO_NUM_STEPS - 1} per replay \(4 of 4 replays, 8 in all; aten::_softmax x8\)$",
                         run.output, re.M), run.output[-4000:]
    assert "pytest imported" not in run.output and not run.leftover
    assert not list((tmp_path / "tmp").glob("harness-server-profile-*")), "a trace folder was left"
