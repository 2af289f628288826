"""Server lifecycle with real processes: startup failures, port conflicts, and nothing left behind."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest
from support.proc_helpers import group_gone, process_gone
from support.tiny_scenario import FAKE_SERVER

from sglang_spec_harness.engines import ServerCommand
from sglang_spec_harness.scenario import NsysSpec
from sglang_spec_harness.run.server import (
    PORT_RANGE,
    PortInUseError,
    ServerProcess,
    _related_pids,
    _tasks_of,
    ServerStartError,
    free_port,
    live_server_pids,
    nsys_export_argv,
    nsys_profile_argv,
)


def fake(mode: str, port: int) -> ServerCommand:
    return ServerCommand([sys.executable, str(FAKE_SERVER), "--port", str(port)], {"FAKE_SERVER_MODE": mode})


@pytest.mark.slow
def test_healthy_server_starts_and_stop_kills_its_whole_group(tmp_path):
    port = free_port()
    # The server leaves a grandchild in its group that ignores SIGTERM: stop must still end it.
    script = (
        "import signal, subprocess, sys, runpy;"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']);"
        f"sys.argv = ['fake', '--port', '{port}']; runpy.run_path('{FAKE_SERVER}', run_name='__main__')"
    )
    command = ServerCommand([sys.executable, "-c", script], {"FAKE_SERVER_MODE": "healthy"})
    with ServerProcess(command, log_path=tmp_path / "server.log", port=port, startup_timeout_s=20, stop_grace_s=1) as server:
        pid = server.pid
        assert pid in live_server_pids()
        assert not process_gone(pid)
    assert process_gone(pid) and group_gone(pid)
    assert pid not in live_server_pids()
    assert "fake_server: mode healthy" in (tmp_path / "server.log").read_text()


def test_a_signal_inside_popen_waits_until_the_server_is_known(tmp_path, monkeypatch):
    """SIGTERM right after the fork, before Popen returns (a bisection interrupted as its server
    starts, CI): the start ends first, so the server has a pid, is registered and is stopped."""
    import signal
    import subprocess

    from sglang_spec_harness.run.interrupts import Terminated, signals_raise_interrupt

    real_popen = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the start
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen_then_signal)
    port = free_port()
    server = ServerProcess(fake("healthy", port), log_path=tmp_path / "server.log", port=port, startup_timeout_s=20,
                           stop_grace_s=1)
    with signals_raise_interrupt():
        with pytest.raises(Terminated):
            server.start()
        pid = server.pid
        assert pid is not None and pid in live_server_pids()
        server.stop()
    assert process_gone(pid) and group_gone(pid)


def test_server_that_exits_at_startup_fails_with_its_last_log_line(tmp_path):
    command = ServerCommand([sys.executable, "-c", "import sys; print('error: unrecognized arguments: --bogus'); sys.exit(2)"])
    server = ServerProcess(command, log_path=tmp_path / "server.log", port=free_port(), startup_timeout_s=20)
    with pytest.raises(ServerStartError) as exc:
        with server:
            pass
    message = str(exc.value)
    assert "exited with code 2 during startup" in message and "unrecognized arguments: --bogus" in message
    assert "\n" not in message
    assert exc.value.log_tail[-1] == "error: unrecognized arguments: --bogus"
    assert process_gone(server.pid)


def test_server_that_never_becomes_healthy_times_out_and_is_killed(tmp_path):
    port = free_port()
    server = ServerProcess(fake("unhealthy", port), log_path=tmp_path / "server.log", port=port, startup_timeout_s=2, stop_grace_s=1)
    started = time.monotonic()
    with pytest.raises(ServerStartError, match=r"did not answer GET /health with 200 within 2 s \(last: HTTP 503"):
        with server:
            pass
    assert time.monotonic() - started < 10
    assert process_gone(server.pid) and group_gone(server.pid)


def test_port_already_taken_is_a_clear_error_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ServerProcess(fake("healthy", port), log_path=tmp_path / "server.log", port=port, startup_timeout_s=5)
        with pytest.raises(PortInUseError, match=rf"127.0.0.1:{port} is already in use"):
            with server:
                pass
        assert server.pid is None  # nothing was started


def test_missing_interpreter_is_a_start_error(tmp_path):
    command = ServerCommand([str(tmp_path / "no-such-python"), "-m", "x"])
    with pytest.raises(ServerStartError, match="cannot start"):
        with ServerProcess(command, log_path=tmp_path / "server.log", port=free_port(), startup_timeout_s=5):
            pass


def test_nsys_argv_wraps_the_server_and_exports_sqlite_beside_the_report():
    spec = NsysSpec(enabled=True)
    argv = nsys_profile_argv(spec, Path("/run/t/profile/nsys"), ["python", "-m", "srv", "--port", "1"])
    assert argv[:4] == ["nsys", "profile", "-o", "/run/t/profile/nsys"]
    assert "--cuda-graph-trace=node" in argv and "--capture-range=cudaProfilerApi" in argv
    assert argv[-5:] == ["python", "-m", "srv", "--port", "1"]
    export = nsys_export_argv(spec, Path("/run/t/profile/nsys.nsys-rep"))
    assert export[:4] == ["nsys", "export", "--type", "sqlite"]
    assert export[-3:] == ["-o", "/run/t/profile/nsys.sqlite", "/run/t/profile/nsys.nsys-rep"]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="CPU pinning needs Linux affinity and two CPUs")
def test_a_pinned_server_starts_on_every_cpu_and_runs_every_thread_and_child_on_its_own_once_healthy(tmp_path):
    """Start-up may use every CPU the harness had (it only waits meanwhile), even while the harness
    keeps off the servers' CPU; from healthy on, every thread of the server and of its children is on
    the pinned CPU, also a thread started before and one started after."""
    from sglang_spec_harness.engines import keep_off_cpus

    cpus = sorted(os.sched_getaffinity(0))
    port = free_port()
    seen = tmp_path / "startup_affinity"
    script = (
        "import os, subprocess, sys, runpy, threading, time;"
        f"open({str(seen)!r}, 'w').write(','.join(map(str, sorted(os.sched_getaffinity(0)))));"
        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start();"
        "subprocess.Popen([sys.executable, '-c', 'import threading, time; "
        "threading.Thread(target=time.sleep, args=(600,)).start(); time.sleep(600)']);"
        f"sys.argv = ['fake', '--port', '{port}']; runpy.run_path('{FAKE_SERVER}', run_name='__main__')"
    )
    command = ServerCommand([sys.executable, "-c", script], {"FAKE_SERVER_MODE": "healthy"}, cpus=(cpus[-1],))
    with keep_off_cpus(command.cpus):
        assert sorted(os.sched_getaffinity(0)) == cpus[:-1]
        with ServerProcess(command, log_path=tmp_path / "server.log", port=port, startup_timeout_s=20,
                           stop_grace_s=1) as server:
            assert seen.read_text() == ",".join(map(str, cpus))
            deadline = time.monotonic() + 10  # the child may still be starting its thread
            while True:
                tasks = {(pid, tid) for pid in _related_pids(server.pid) for tid in _tasks_of(pid)}
                if (len({pid for pid, _ in tasks}) >= 2 and len(tasks) >= 4) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert len(tasks) >= 4, tasks  # the child's late thread inherits: pinned without a second pass
            assert {tid: sorted(os.sched_getaffinity(tid)) for _, tid in tasks} == {tid: [cpus[-1]] for _, tid in tasks}
    assert "pinned to CPU(s)" in (tmp_path / "server.log").read_text()


def test_free_ports_leave_room_for_the_ports_a_server_derives_from_its_own():
    """SGLang 0.5.11-0.5.18 add 10000 for their gRPC port and refuse a result past 65535: the
    harness's ports stay in PORT_RANGE, and a port in use is not handed out."""
    import random

    rng = random.Random(3)
    ports = {free_port(rng=rng) for _ in range(50)}
    assert all(PORT_RANGE[0] <= port < PORT_RANGE[1] and port + 10000 <= 65535 for port in ports)
    taken = free_port(rng=random.Random(5))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", taken))
        sock.listen()
        assert free_port(rng=random.Random(5)) != taken  # the same draw finds it taken and draws again


@pytest.mark.slow
def test_a_server_ends_when_the_harness_that_started_it_is_killed_outright(tmp_path):
    """SIGKILL runs no cleanup (a CI step's timeout, pytest-timeout around a subprocess): the server
    sits in a session of its own, so only the kernel's parent-death signal can end it."""
    import signal
    import subprocess

    port = free_port()
    pid_file = tmp_path / "server.pid"
    harness = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path;"
        "from sglang_spec_harness.engines import ServerCommand; from sglang_spec_harness.run.server import ServerProcess;"
        f"command = ServerCommand([sys.executable, {str(FAKE_SERVER)!r}, '--port', '{port}'], {{'FAKE_SERVER_MODE': 'healthy'}});"
        f"server = ServerProcess(command, log_path=Path({str(tmp_path / 'server.log')!r}), port={port}, startup_timeout_s=20);"
        # written aside and renamed: the file never exists empty (it did between write_text's open and
        # its write, and the read below got '')
        f"server.__enter__(); Path({str(pid_file)!r} + '.part').write_text(str(server.pid));"
        f"Path({str(pid_file)!r} + '.part').replace({str(pid_file)!r}); time.sleep(600)")])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline and harness.poll() is None:
            time.sleep(0.1)
        server_pid = int(pid_file.read_text())
        assert not process_gone(server_pid)
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=10)
        deadline = time.monotonic() + 20
        while not process_gone(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process_gone(server_pid) and group_gone(server_pid)
    finally:
        harness.kill()
