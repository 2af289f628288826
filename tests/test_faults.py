"""Faults injected into real `harness run`s of the micro engine, from outside: a server killed or
hung, a trace never written or truncated, a full disk, a taken port, and the interrupt primitives.

Each case checks the exit code and its one line, that no process of the run survived (found by an
environment marker, not only by recorded PIDs), that what was measured before the fault is intact,
and that `harness check` / `harness report` on the remains say INCONCLUSIVE or one clear line. The
many randomised cases (and the interrupts at random moments) live in benchmarks/faults.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.faultkit import (
    default_signals_in_child,
    HarnessProcess,
    Squatter,
    check_and_report,
    cli_behaved,
    complete_but_damaged,
    fill_filesystem,
    free_port,
    has_traceback,
    kill_group,
    lost_measurements,
    mount_tmpfs,
    read_json,
    server_pgids,
    snapshot,
    survivors,
    trial_in_progress,
    umount,
    wait_for,
)
from support.tiny_scenario import FAKE_SERVER, write_scenario

from sglang_spec_harness.run import interrupts

# A generous bound for a tiny run on a loaded 2-core machine; a hang is what it guards against.
RUN_LIMIT_S = 240


def scenario(directory: Path, name: str, *, trials: dict, workload: dict | None = None, server: dict | None = None,
             profile: dict | None = None, **variants: dict) -> Path:
    path = write_scenario(directory, name, trials=trials, server=server,
                          workload={"num_requests": 6, "output_len": 24, "concurrency": 1, **(workload or {})},
                          **variants)
    if profile:
        data = yaml.safe_load(path.read_text())
        data["profile"].update(profile)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trial_record(run: HarnessProcess, name: str) -> dict:
    run_dir = run.run_dir()
    return (read_json(run_dir / "trials" / name / "trial.json") if run_dir else None) or {}


def finish(run: HarnessProcess, *, damaged: bool = True) -> tuple[int, str, Path]:
    """Wait for the run; then: no process of it left, check and report behave. (exit, last line, run dir)"""
    code = run.wait(RUN_LIMIT_S)
    if code is None:
        run.kill_everything()
        pytest.fail(f"the harness hung:\n{run.stderr[-3000:]}")
    run_dir = run.run_dir()
    assert run_dir is not None, run.stderr
    left = wait_for(lambda: not survivors(run.marker, server_pgids(run_dir)), 10) or survivors(run.marker, server_pgids(run_dir))
    assert left is True, f"processes left behind: {left}"
    assert not has_traceback(run.stderr + run.stdout), run.stderr
    assert complete_but_damaged(run_dir) == []
    outcome = check_and_report(run_dir, in_process=True)
    assert cli_behaved(outcome, damaged=damaged) == [], outcome
    lines = run.stderr.strip().splitlines()
    return code, lines[-1] if lines else "", run_dir


# ---- the interrupt primitives (in-process) -------------------------------------------------------


def test_an_interrupt_inside_the_event_loop_cancels_the_work_and_is_raised_after(caplog, terminal_signals):
    """Requests in flight when Ctrl-C lands are cancelled, never completed as failures, and asyncio
    has nothing to complain about at shutdown."""
    finished: list[int] = []

    async def request(i: int) -> None:
        await asyncio.sleep(0.01 if i == 0 else 30)
        finished.append(i)
        if i == 0:
            os.kill(os.getpid(), signal.SIGINT)  # lands inside a task, others in flight

    async def main() -> None:
        await asyncio.gather(*(request(i) for i in range(3)))

    caplog.set_level(logging.DEBUG, logger="asyncio")
    with interrupts.signals_raise_interrupt(), pytest.raises(KeyboardInterrupt):
        interrupts.run_async(main())
    assert finished == [0]
    assert interrupts.interrupt_received() == signal.SIGINT
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_an_interrupt_between_a_check_and_a_set_result_inside_asyncio_breaks_nothing(caplog, terminal_signals):
    """The signal handler runs between two bytecodes of whatever the loop is doing, e.g. inside a
    protocol's data_received between `if not waiter.done()` and `waiter.set_result(...)` (anyio's
    StreamProtocol, asyncio.Event.set). Cancelling the task there cancels that waiter under the
    callback's feet: InvalidStateError, logged by asyncio as "Fatal error: protocol.data_received()
    call failed." with a traceback (seen once in CI). The cancel must wait for the loop's next turn."""
    failures: list[BaseException] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def data_received() -> None:
            try:
                if not waiter.done():
                    signal.raise_signal(signal.SIGINT)  # the handler runs right here
                    waiter.set_result(b"data")
            except BaseException as exc:  # what asyncio would log as a fatal error
                failures.append(exc)

        loop.call_soon(data_received)
        try:
            await waiter  # the cancel lands here, once the callback is done, not inside it
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled_at.append(time.monotonic() - started)
            raise

    cancelled_at: list[float] = []
    started = time.monotonic()
    caplog.set_level(logging.DEBUG, logger="asyncio")
    with interrupts.signals_raise_interrupt(), pytest.raises(KeyboardInterrupt):
        interrupts.run_async(main())
    assert failures == []
    assert len(cancelled_at) == 1 and cancelled_at[0] < 25  # cancelled, not slept out
    assert interrupts.interrupt_received() == signal.SIGINT
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_an_interrupt_during_cleanup_waits_for_its_end_and_sigterm_is_terminated(terminal_signals):
    steps: list[str] = []
    with interrupts.signals_raise_interrupt(), pytest.raises(interrupts.Terminated) as raised:
        with interrupts.interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after the signal")
            os.kill(os.getpid(), signal.SIGINT)  # a second one: only hurries the cleanup
            assert interrupts.hurry()
            steps.append("cleanup done")
    assert steps == ["after the signal", "cleanup done"] and raised.value.signum == signal.SIGTERM
    assert interrupts.interrupt_text(signal.SIGTERM) == "interrupted (terminated by SIGTERM)"


class _SignalsWhenCollected:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here, inside a finalizer


def test_an_interrupt_inside_a_finalizer_is_kept_without_a_traceback(terminal_signals, capfd):
    """Python cannot propagate an exception out of `__del__`: it prints "Exception ignored in" and goes
    on (benchmarks/faults.py, seed 33: a SIGTERM after the last trial gave a traceback and exit 0)."""
    with interrupts.signals_raise_interrupt():
        _SignalsWhenCollected()  # collected at once
        assert interrupts.interrupt_received() == signal.SIGTERM
        assert interrupts.exit_code_after(0) == 143 and interrupts.exit_code_after(143) == 143
        with pytest.raises(interrupts.Terminated):  # the run's next check raises it
            interrupts.raise_if_interrupted()
    assert "Traceback" not in capfd.readouterr().err


def test_a_command_interrupted_inside_a_finalizer_exits_128_plus_signal(tmp_path):
    """End to end, a real process: the command goes on to its end, and `harness` says interrupted."""
    script = (
        "import os, signal, sys\n"
        "from sglang_spec_harness.commands import cli, validate\n"
        "class SignalsWhenCollected:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "def run(args):\n"
        "    SignalsWhenCollected()\n"
        "    print('went on to the end')\n"
        "    return 0\n"
        "validate.run = run\n"
        "sys.exit(cli.main(['validate', 'any.yaml']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          preexec_fn=default_signals_in_child)
    assert done.returncode == 143 and done.stdout == "went on to the end\n", done.stderr
    assert done.stderr == "harness validate: interrupted\n"


def test_ctrl_c_inside_a_pyrun_string_call_still_exits_130(tmp_path):
    """A `python -m` process whose bare KeyboardInterrupt once escaped a PyRun_String call (Cython's
    modules run some at import) ends by SIGINT at exit, whatever code it returns: the harness raises a
    subclass (benchmarks/faults.py, seed 34: exit -2 after `harness run: interrupted`)."""
    (tmp_path / "ctrl_c_in_pyrun.py").write_text(
        "import ctypes, os, signal, sys\n"
        "from sglang_spec_harness.commands import cli, validate\n"
        "pyrun = ctypes.pythonapi.PyRun_String\n"
        "pyrun.restype, pyrun.argtypes = ctypes.py_object, [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]\n"
        "def run(args):\n"
        "    scope = {'os': os, 'signal': signal}\n"
        "    pyrun(b'os.kill(os.getpid(), signal.SIGINT)\\nimport time\\ntime.sleep(5)', 257, scope, scope)\n"
        "    return 0\n"
        "validate.run = run\n"
        "sys.exit(cli.main(['validate', 'any.yaml']))\n"
    )
    done = subprocess.run([sys.executable, "-m", "ctrl_c_in_pyrun"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, preexec_fn=default_signals_in_child)
    assert done.returncode == 130 and done.stderr == "harness validate: interrupted\n", (done.returncode, done.stderr)


def test_a_signal_the_harness_was_started_to_ignore_stays_ignored(terminal_signals):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup (the fixture restores it)
    with interrupts.signals_raise_interrupt():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        os.kill(os.getpid(), signal.SIGHUP)
    assert interrupts.interrupt_received() is None


# ---- interrupts of real runs --------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_while_a_server_is_being_stopped_lets_the_stop_finish(tmp_path):
    """The server (a stand-in) signals the harness while the harness stops it: the stop runs to its
    end (the server exits by itself, nothing is killed or left), the finished trial stays recorded,
    the run says why it ended, exit 143."""
    path = scenario(tmp_path, "stopsig", trials={"profiled": 0},
                    baseline={"python": str(FAKE_SERVER), "env": {"FAKE_SERVER_MODE": "term_signals_parent"}})
    run = HarnessProcess(path, tmp_path / "runs").start()
    code, last, run_dir = finish(run)
    assert code == 143, run.stderr
    assert last.startswith("harness run: interrupted: interrupted (terminated by SIGTERM); results so far: ")
    run_json = read_json(run_dir / "run.json")
    assert run_json["status"] == "incomplete" and run_json["error"] == "interrupted (terminated by SIGTERM)"
    trial = read_json(run_dir / "trials/00-baseline-timed/trial.json")
    assert trial["status"] == "ok" and trial["summary"]["requests"] == 6 and trial["summary"]["errors"] == 0
    log = (run_dir / "trials/00-baseline-timed/server.log").read_text()
    assert "fake_server: exiting" in log  # it ended by itself: the stop was not cut short
    assert not (run_dir / "trials/01-candidate-timed").exists()


# ---- servers that die, hang or never come up ----------------------------------------------------


@pytest.mark.slow
def test_server_killed_mid_block_in_interleaved_mode(tmp_path):
    path = scenario(tmp_path, "killblock", trials={"mode": "interleaved", "repetitions": 2, "launches": 1,
                                                   "profiled": 0, "order": "abba"})
    run = HarnessProcess(path, tmp_path / "runs").start()
    target = wait_for(lambda: trial_in_progress(run.run_dir(), "timed", 2), RUN_LIMIT_S)
    assert target, run.stderr
    before = snapshot(run.run_dir())
    assert kill_group(target["pid"], signal.SIGKILL)
    code, last, run_dir = finish(run)
    assert code == 3
    assert last.startswith(f"harness run: INCONCLUSIVE (run incomplete): trial {target['trial']} failed: ")
    assert "(server killed by SIGKILL)" in last
    assert lost_measurements(before, run_dir) == []
    launches = [read_json(p) for p in sorted(run_dir.glob("launches/*/launch.json"))]
    killed = [x for x in launches if x["server_pid"] == target["pid"]]
    assert killed[0]["status"] == "failed" and killed[0]["error"] == "server killed by SIGKILL before the harness stopped it"
    assert all(x["status"] == "stopped" for x in launches if x not in killed)
    assert read_json(run_dir / "run.json")["status"] == "incomplete"


@pytest.mark.slow
def test_server_hung_mid_stream_ends_at_the_request_timeout(tmp_path):
    """SIGSTOP mid-stream: the request times out, the stopped server is still stopped for good."""
    path = scenario(tmp_path, "hang", trials={"mode": "sequential", "repetitions": 1, "launches": 1, "profiled": 0},
                    server={"request_timeout_s": 4})
    run = HarnessProcess(path, tmp_path / "runs").start()
    target = wait_for(lambda: trial_in_progress(run.run_dir(), "timed", 1), RUN_LIMIT_S)
    assert target, run.stderr
    before = snapshot(run.run_dir())
    assert kill_group(target["pid"], signal.SIGSTOP)
    code, last, run_dir = finish(run)
    assert code == 3 and "timed out after 4 s" in last, last
    assert lost_measurements(before, run_dir) == []


@pytest.mark.slow
def test_trace_truncated_on_disk_fails_the_trial(tmp_path):
    """A rank's trace cut short (its writer died): never taken for a complete one."""
    path = scenario(tmp_path, "trunc", trials={"profiled": 1, "repetitions": 1}, profile={"trace_timeout_s": 3})
    run = HarnessProcess(path, tmp_path / "runs").start()
    profile_dir = wait_for(lambda: next(iter((run.run_dir() or tmp_path).glob("trials/00-*/profile")), None), RUN_LIMIT_S)
    assert profile_dir, run.stderr
    whole = gzip.compress(b'{"traceEvents": [' + b'{"ph": "X", "name": "x", "ts": 1, "dur": 1},' * 2000 + b"{}]}")
    (profile_dir / "00-baseline-profiled-TP-1.trace.json.gz").write_bytes(whole[: len(whole) // 2])
    code, last, run_dir = finish(run)
    assert code == 3
    assert "no complete trace file" in last and "00-baseline-profiled-TP-1.trace.json.gz (truncated)" in last, last
    trial = read_json(run_dir / "trials/00-baseline-profiled/trial.json")
    assert trial["status"] == "failed" and trial["summary"]["errors"] == 0  # the requests themselves were fine


# ---- the run directory's filesystem ---------------------------------------------------------------


@pytest.mark.slow
def test_file_size_limit_stops_the_run_with_one_line_and_keeps_what_fit(tmp_path):
    """RLIMIT_FSIZE: requests.jsonl cannot grow past the limit. The harness neither dies (SIGXFSZ)
    nor leaves a cut line: the lines that fit stay readable, the run ends incomplete."""
    path = scenario(tmp_path, "fsize", trials={"profiled": 0}, workload={"num_requests": 14, "output_len": 16})
    run = HarnessProcess(path, tmp_path / "runs", fsize_limit=4000).start()
    code, last, run_dir = finish(run)
    assert code == 3
    assert last.startswith("harness run: INCONCLUSIVE (run incomplete): trial 00-baseline-timed failed: cannot write ")
    assert "requests.jsonl: File too large; results so far: " in last, last
    requests = run_dir / "trials/00-baseline-timed/requests.jsonl"
    text = requests.read_text()
    assert text.endswith("\n") and 1 <= len(text.splitlines()) < 15  # whole lines only
    assert all(json.loads(line)["completion_tokens"] == 16 for line in text.splitlines())
    trial = read_json(run_dir / "trials/00-baseline-timed/trial.json")
    assert trial["status"] == "failed" and "File too large" in trial["error"]
    assert read_json(run_dir / "run.json")["status"] == "incomplete"


@pytest.mark.slow
def test_disk_full_mid_run(tmp_path):
    """A small filesystem (tmpfs) filled up from outside once the first trial has finished."""
    mount = tmp_path / "small"
    if not mount_tmpfs(mount, "64m"):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); the file-size-limit test covers writes")
    try:
        path = scenario(tmp_path, "full", trials={"profiled": 0, "repetitions": 2, "order": "abba"})
        run = HarnessProcess(path, mount / "runs", logs=tmp_path).start()
        assert wait_for(lambda: trial_record(run, "00-baseline-timed").get("status") == "ok", RUN_LIMIT_S), run.stderr
        before = snapshot(run.run_dir())
        filler = fill_filesystem(mount)
        code, last, run_dir = finish(run)
        assert code == 3 and "No space left on device" in last, last
        assert lost_measurements(before, run_dir) == []
        filler.unlink()  # with space again, the remains check as INCONCLUSIVE and report
        outcome = check_and_report(run_dir, in_process=True)
        assert outcome["check"]["exit"] == 3 and outcome["report"]["exit"] == 0, outcome
    finally:
        umount(mount)


# ---- ports ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_user_port_taken_in_warm_mode_fails_the_launch_clearly(tmp_path):
    port = free_port()
    taken = Squatter(port + 1)  # the candidate's launch: port + 1
    if not taken.start():
        pytest.skip(f"port {port + 1} is in use on this machine")
    try:
        path = scenario(tmp_path, "port", trials={"mode": "interleaved", "repetitions": 1, "launches": 1, "profiled": 0})
        run = HarnessProcess(path, tmp_path / "runs", args=("--port", str(port))).start()
        code, last, run_dir = finish(run)
    finally:
        taken.stop()
    assert code == 3
    assert last == (f"harness run: INCONCLUSIVE (run incomplete): server launch failed: 01-candidate-launch0: "
                    f"127.0.0.1:{port + 1} is already in use (another server running?); choose another port; "
                    f"results so far: {run_dir}")
    launches = [read_json(p) for p in sorted(run_dir.glob("launches/*/launch.json"))]
    assert [x["status"] for x in launches] == ["stopped", "failed"] and launches[0]["port"] == port


@pytest.mark.slow
def test_a_port_taken_by_another_server_before_ours_binds_it_is_replaced(tmp_path):
    """Another process takes the port the harness chose and answers /health in the server's place:
    the harness notices that the answer is not its server's and starts it again on another port."""
    path = scenario(tmp_path, "rogue", trials={"profiled": 0, "repetitions": 1})
    run = HarnessProcess(path, tmp_path / "runs").start()
    first = wait_for(lambda: trial_record(run, "00-baseline-timed").get("server_pid"), RUN_LIMIT_S, poll=0.005)
    assert first, run.stderr
    port = trial_record(run, "00-baseline-timed")["port"]
    kill_group(first, signal.SIGSTOP)  # freeze the server before it binds (it is still importing torch)
    rogue = Squatter(port, answer=True)
    injected = rogue.start()
    kill_group(first, signal.SIGCONT)
    try:
        _code, last, run_dir = finish(run, damaged=False)
    finally:
        rogue.stop()
    assert read_json(run_dir / "run.json")["status"] == "complete", last
    trial = read_json(run_dir / "trials/00-baseline-timed/trial.json")
    assert trial["status"] == "ok" and trial["server_info"]["engine"] == "micro"
    if injected:  # (the server could in principle have bound the port first: then nothing was injected)
        assert rogue.hits >= 1 and trial["port"] != port
        assert "starting again on another port" in (run_dir / "trials/00-baseline-timed/server.log").read_text()
