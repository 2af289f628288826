"""Server lifecycle: one server process per trial, on loopback, always cleaned up.

A server starts in its own session (so its own process group, and the terminal's Ctrl-C reaches only
the harness), logs to the trial's `server.log`, and counts as up once `GET /health` answers 200.
Stopping sends SIGTERM to the whole group, then SIGKILL after a grace period. Every live server is
also registered for an `atexit` sweep, and `sglang_spec_harness.run.interrupts` turns SIGINT/SIGTERM/SIGHUP into an
exception (held back while a server is being stopped), so that no server outlives the harness,
whatever ends it. A stopped (SIGSTOP) server gets SIGCONT with its SIGTERM, or it could not act on it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from sglang_spec_harness.engines import ServerCommand, available_cpus
from sglang_spec_harness.pages.numbers import seconds
from sglang_spec_harness.run.interrupts import hurry, interrupts_deferred
from sglang_spec_harness.scenario import NsysSpec

LOOPBACK = "127.0.0.1"
LOG_TAIL_LINES = 20
HEALTH_POLL_S = 0.25
PIN_PASSES = 5
DEFAULT_STOP_GRACE_S = 10.0
# nsys writes its report after the application exits, which takes a while for a large capture.
NSYS_STOP_GRACE_S = 120.0


# Work a run would do later (its imports), done in the main thread while it waits for a server to come
# up. Not in a thread beside it: a signal that landed while the main thread waited for the import
# lock inside importlib's lock callback left the lock held, and the run hung (test_bisect's SIGTERM).
_WHILE_WAITING: list[Callable[[], None]] = []


def do_while_waiting(work: Callable[[], None]) -> None:
    """Queue `work` for the next wait for a server's health (or `run_waiting_work`)."""
    _WHILE_WAITING.append(work)


def run_waiting_work() -> None:
    """Run what `do_while_waiting` queued, now."""
    while _WHILE_WAITING:
        _WHILE_WAITING.pop(0)()


def drop_waiting_work() -> None:
    """Forget what was queued (a run that ended before its first server came up)."""
    _WHILE_WAITING.clear()


class ServerStartError(Exception):
    """The server did not come up. The message is one line; `log_tail` holds the log's last lines."""

    def __init__(self, message: str, log_tail: list[str] | None = None):
        super().__init__(message)
        self.log_tail = log_tail or []


class PortInUseError(ServerStartError):
    pass


# ---- ports --------------------------------------------------------------------------------------


# Servers derive ports of their own from the one they are given: SGLang 0.5.11 to 0.5.18 refuse to
# start when `port + 10000` (their gRPC port) passes 65535, which the OS's ephemeral range (up to
# 60999 on Linux) reaches. So a port is drawn below that, with room above it.
PORT_RANGE = (20000, 45000)


def free_port(host: str = LOOPBACK, *, rng: random.Random | None = None) -> int:
    """A port in PORT_RANGE that is free right now (drawn at random, then tried)."""
    rng = rng or random.Random()
    for _ in range(200):
        port = rng.randrange(*PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded range: the OS's choice
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers bind (uvicorn, SGLang): connections of an earlier server on this port that
        # linger in TIME_WAIT do not count, a socket listening there does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUseError(
                    f"{host}:{port} is already in use (another server running?); choose another port"
                ) from None
            raise


# ---- nsys ---------------------------------------------------------------------------------------


def nsys_profile_argv(nsys: NsysSpec, output_base: Path, argv: list[str]) -> list[str]:
    """`argv` run under `nsys profile`, writing `<output_base>.nsys-rep`."""
    return [nsys.executable, "profile", "-o", str(output_base), "--force-overwrite=true", *nsys.args, *argv]


def nsys_export_argv(nsys: NsysSpec, report: Path) -> list[str]:
    """The command that turns `X.nsys-rep` into `X.sqlite` beside it."""
    return [
        nsys.executable,
        "export",
        "--type",
        "sqlite",
        "--force-overwrite=true",
        "-o",
        str(report.with_suffix(".sqlite")),
        str(report),
    ]


def export_nsys_sqlite(nsys: NsysSpec, report: Path, *, timeout_s: float = 600.0) -> Path:
    if not report.exists():
        raise FileNotFoundError(f"{report}: nsys wrote no report (was the capture range ever opened?)")
    result = subprocess.run(
        nsys_export_argv(nsys, report), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    sqlite = report.with_suffix(".sqlite")
    if result.returncode != 0 or not sqlite.exists():
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"nsys export failed (exit {result.returncode}): {last[0]}")
    return sqlite


# ---- the process --------------------------------------------------------------------------------

_LIVE: dict[int, ServerProcess] = {}
_LIVE_LOCK = threading.Lock()


def _stop_all_live() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE.values())
    for server in servers:
        server.stop(grace_s=min(server.stop_grace_s, 5.0))


atexit.register(_stop_all_live)


def live_server_pids() -> list[int]:
    with _LIVE_LOCK:
        return list(_LIVE)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        data = path.read_bytes()[-64_000:]
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    return [line for line in text.splitlines() if line.strip()][-lines:]


def describe_exit(code: int | None) -> str | None:
    if code is None:
        return None
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def listening_socket_inodes(port: int) -> set[int] | None:
    """Inodes of the TCP sockets listening on `port` (Linux /proc/net/tcp{,6}); None without /proc."""
    inodes: set[int] = set()
    seen = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes if seen else None


def _proc_stats() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgrp) of every process, from /proc."""
    out: dict[int, tuple[int, int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            out[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _related_pids(leader: int) -> set[int]:
    """The leader's process group and every descendant of the leader (which may have left it)."""
    stats = _proc_stats()
    pids = {pid for pid, (_, pgrp) in stats.items() if pgrp == leader} | {leader}
    frontier = list(pids)
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in pids:
                pids.add(pid)
                frontier.append(pid)
    return pids


def _tasks_of(pid: int) -> list[int]:
    """The thread ids of a process (none once it has ended)."""
    try:
        return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


def _socket_inodes_of(pids: set[int]) -> set[int] | None:
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except FileNotFoundError:
            continue
        except OSError:
            return None  # not ours to inspect: cannot tell
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exec_prefix(cpus: list[int] | None, dies_with_us: bool) -> tuple[list[str], list[int] | None]:
    """util-linux wrappers that set up the server's process before it execs the server: SIGTERM when
    its parent dies (`setpriv --pdeathsig`, Linux), its start-up CPUs (`taskset`). Wrappers, not a
    `preexec_fn`: with one, subprocess runs Python's at-fork hooks in the harness, and a Ctrl-C landing
    in them is printed as an ignored exception with a traceback instead of stopping the run. Returns the
    prefix and the CPUs still to set with a preexec_fn (only where taskset is missing)."""
    prefix: list[str] = []
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if dies_with_us and setpriv:
        prefix += [setpriv, "--pdeathsig", "TERM"]
    if cpus:
        taskset = shutil.which("taskset")
        if taskset:
            prefix += [taskset, "--cpu-list", ",".join(map(str, cpus))]
            cpus = None
    return prefix, cpus


def _set_affinity(cpus: list[int]):
    def setup() -> None:
        os.sched_setaffinity(0, cpus)
    return setup


class ServerProcess:
    """A server started from a `ServerCommand`; use as a context manager.

    `__enter__` starts it and waits until it is healthy; `__exit__` stops it, also on an exception
    or Ctrl-C during startup.
    """

    def __init__(
        self,
        command: ServerCommand,
        *,
        log_path: Path,
        port: int,
        host: str = LOOPBACK,
        startup_timeout_s: float = 600.0,
        stop_grace_s: float = DEFAULT_STOP_GRACE_S,
    ):
        self.command = command
        self.log_path = log_path
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.returncode: int | None = None
        self.asked_to_stop = False  # ask_to_stop reached it alive
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        return _tail(self.log_path, lines)

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> None:
        ensure_port_free(self.host, self.port)
        # From the log's creation to the process's registration, an interrupt waits: one landing in
        # Popen (after the fork, before the pid is known) would leave a server nobody stops or records.
        with interrupts_deferred():
            self._start()

    def _start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)  # closed in stop()
        self._log_file.write(f"$ {self.command.shell()}\n".encode())
        env = {**os.environ, **self.command.env}
        try:
            # With `cpus`, start-up (imports, weights, graph capture) may use every CPU the harness had
            # before it kept off the servers' ones (it only waits meanwhile); `pin` narrows the server
            # to `cpus` once it is healthy, before any request. Four micro servers starting at once
            # on one CPU took 12-14 s, on two 7 s.
            startup = available_cpus() if self.command.cpus else None
            # A harness killed outright (SIGKILL, a CI step's timeout) runs no cleanup; the server's own
            # session would outlive it and keep its CPUs busy. The kernel's parent-death signal ends it.
            # It fires when the starting *thread* ends, so only servers started by the main thread get it.
            dies_with_us = threading.current_thread() is threading.main_thread()
            prefix, affinity_left = _exec_prefix(startup, dies_with_us)
            if prefix and shutil.which(self.command.argv[0]) is None:  # the wrapper would hide the OSError
                raise FileNotFoundError(errno.ENOENT, "no such executable file")
            self._proc = subprocess.Popen(
                [*prefix, *self.command.argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_set_affinity(affinity_left) if affinity_left else None,
            )
        except OSError as exc:
            self._close_log()
            raise ServerStartError(f"cannot start {self.command.argv[0]!r}: {exc.strerror or exc}") from None
        with _LIVE_LOCK:
            _LIVE[self._proc.pid] = self

    def wait_healthy(self) -> None:
        """Poll GET /health until 200; fail early if the process exits, or at the startup timeout."""
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        last_answer = "no answer"
        with httpx.Client(timeout=httpx.Timeout(5.0), trust_env=False) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    self.returncode = code
                    tail = self.log_tail()
                    cause = f": {tail[-1].strip()}" if tail else ""
                    raise ServerStartError(
                        f"server {describe_exit(code)} during startup (log: {self.log_path}){cause}", tail
                    )
                try:
                    response = client.get(f"{self.base_url}/health")
                    if response.status_code == 200:
                        self.pin()
                        return
                    last_answer = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    last_answer = type(exc).__name__
                run_waiting_work()
                if time.monotonic() >= deadline:
                    raise ServerStartError(
                        f"server did not answer GET /health with 200 within {seconds(self.startup_timeout_s)} "
                        f"(last: {last_answer}; log: {self.log_path})",
                        self.log_tail(),
                    )
                time.sleep(HEALTH_POLL_S)

    def pin(self) -> None:
        """Every thread of every process of the server onto `command.cpus` (threads started later
        inherit it from the thread that starts them). Passes until one finds nothing left to move, so
        a thread or child started during a pass is caught by the next."""
        cpus = set(self.command.cpus or ())
        if self._proc is None or not cpus:
            return
        moved_any = False
        for _ in range(PIN_PASSES):
            moved = 0
            for pid in _related_pids(self._proc.pid):
                for task in _tasks_of(pid):
                    with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                        if os.sched_getaffinity(task) != cpus:
                            os.sched_setaffinity(task, cpus)
                            moved += 1
            moved_any = moved_any or moved > 0
            if not moved:
                break
        if moved_any and self._log_file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._log_file.write(f"harness: pinned to CPU(s) {','.join(map(str, sorted(cpus)))} after "
                                     "start-up\n".encode())

    # -- stop -----------------------------------------------------------------------------------
    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM (and SIGCONT) to the group, SIGKILL after the grace period. Idempotent; returns the
        exit code. An interrupt that lands meanwhile waits until the group is gone."""
        with interrupts_deferred():
            return self._stop(self.stop_grace_s if grace_s is None else grace_s)

    def ask_to_stop(self) -> None:
        """SIGTERM (and SIGCONT) to the group without waiting: `stop` then waits for several servers
        that shut down at the same time rather than one after another."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self.asked_to_stop = True  # alive when asked: its exit is the harness's doing
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
                os.killpg(proc.pid, signal.SIGCONT)

    def _stop(self, grace: float) -> int | None:
        proc = self._proc
        if proc is None:
            return self.returncode
        pgid = proc.pid  # start_new_session: the leader's pid is the group id
        try:
            if proc.poll() is None or _group_alive(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGTERM)
                    os.killpg(pgid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
                deadline = time.monotonic() + grace
                # The leader may be gone while workers it spawned still run: wait for the group too.
                while (proc.poll() is None or _group_alive(pgid)) and time.monotonic() < deadline and not hurry():
                    time.sleep(0.05)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            self.returncode = proc.wait()
            # SIGKILL is not instant: give the kernel a moment to take the rest of the group away.
            until = time.monotonic() + 2.0
            while _group_alive(pgid) and time.monotonic() < until:
                time.sleep(0.02)
        finally:
            with _LIVE_LOCK:
                _LIVE.pop(proc.pid, None)
            self._close_log()
        return self.returncode

    def exit_status(self, wait_s: float = 0.0) -> str | None:
        """`exited with code N` / `killed by SIGKILL` if the server process has ended (waiting up to
        `wait_s` for it: a connection torn down by a dying server is seen before its exit), else None."""
        proc = self._proc
        if proc is None:
            return describe_exit(self.returncode)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s) if wait_s > 0 else proc.poll()
        return describe_exit(proc.returncode)

    def port_taken(self) -> bool:
        """After the server exited at start-up: is its port held by another process (or did the
        server say so)? Only meaningful once the server is gone (its own socket would count)."""
        try:
            ensure_port_free(self.host, self.port)
        except PortInUseError:
            return True
        except OSError:
            return False
        return any("address already in use" in line.lower() for line in self.log_tail())

    def listener_is_own(self) -> bool | None:
        """Whether the socket listening on the port belongs to this server (its process group or
        its descendants): a port taken by another process between the check and the server's bind
        would have the other process answer /health. None when it cannot be told (no /proc)."""
        proc = self._proc
        if proc is None:
            return None
        inodes = listening_socket_inodes(self.port)
        if not inodes:
            return None
        pids = _related_pids(proc.pid)
        found = _socket_inodes_of(pids)
        if found is None:
            return None
        return bool(inodes & found)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> ServerProcess:
        try:
            self.start()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# ---- what a running server says about itself ----------------------------------------------------


def server_info(base_url: str, *, timeout_s: float = 30.0) -> dict[str, Any]:
    """GET /server_info (free-form: whatever the server reports), {} when it answers none."""
    for path in ("/server_info", "/get_server_info"):  # the second is SGLang's older name
        try:
            response = httpx.get(f"{base_url}{path}", timeout=timeout_s, trust_env=False)
        except httpx.HTTPError:
            continue
        if response.status_code == 200:
            try:
                info = response.json()
            except ValueError:
                continue
            return info if isinstance(info, dict) else {"value": info}
    return {}


def vocab_limit(info: dict[str, Any]) -> int | None:
    """The vocabulary size if the server tells it (the micro engine does, under `micro_model`), so
    that synthetic prompts stay valid for a small vocabulary."""
    for where in (info, info.get("micro_model") or {}):
        value = where.get("vocab_size") if isinstance(where, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None
