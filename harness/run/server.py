"""Server lifecycle: one server process per trial, on loopback, always cleaned up.

A server starts in its own session (so its own process group, and the terminal's Ctrl-C reaches only
the harness), logs to the trial's `server.log`, and counts as up once `GET /health` answers 200.
Stopping sends SIGTERM to the whole group, then SIGKILL after a grace period. Every live server is
also registered for an `atexit` sweep, and `signals_raise_interrupt()` turns SIGTERM/SIGHUP into an
exception, so that no server outlives the harness, whatever ends it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from harness.engines import ServerCommand
from harness.scenario import NsysSpec

LOOPBACK = "127.0.0.1"
LOG_TAIL_LINES = 20
HEALTH_POLL_S = 0.25
DEFAULT_STOP_GRACE_S = 10.0
# nsys writes its report after the application exits, which takes a while for a large capture.
NSYS_STOP_GRACE_S = 120.0


class ServerStartError(Exception):
    """The server did not come up. The message is one line; `log_tail` holds the log's last lines."""

    def __init__(self, message: str, log_tail: list[str] | None = None):
        super().__init__(message)
        self.log_tail = log_tail or []


class PortInUseError(ServerStartError):
    pass


class Terminated(KeyboardInterrupt):
    """The harness got SIGTERM or SIGHUP: unwind like Ctrl-C, so every cleanup path runs."""

    def __init__(self, signum: int):
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


# ---- ports --------------------------------------------------------------------------------------


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
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

_LIVE: dict[int, "ServerProcess"] = {}
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


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file = None

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
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        self._log_file.write(f"$ {self.command.shell()}\n".encode())
        env = {**os.environ, **self.command.env}
        try:
            self._proc = subprocess.Popen(
                self.command.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
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
                        f"server exited with code {code} during startup (log: {self.log_path}){cause}", tail
                    )
                try:
                    response = client.get(f"{self.base_url}/health")
                    if response.status_code == 200:
                        return
                    last_answer = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    last_answer = type(exc).__name__
                if time.monotonic() >= deadline:
                    raise ServerStartError(
                        f"server did not answer GET /health with 200 within {self.startup_timeout_s:g} s "
                        f"(last: {last_answer}; log: {self.log_path})",
                        self.log_tail(),
                    )
                time.sleep(HEALTH_POLL_S)

    # -- stop -----------------------------------------------------------------------------------
    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM to the group, SIGKILL after the grace period. Idempotent; returns the exit code."""
        proc = self._proc
        if proc is None:
            return self.returncode
        grace = self.stop_grace_s if grace_s is None else grace_s
        pgid = proc.pid  # start_new_session: the leader's pid is the group id
        try:
            if proc.poll() is None or _group_alive(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGTERM)
                deadline = time.monotonic() + grace
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
                # The leader may be gone while workers it spawned still run: wait for the group too.
                while _group_alive(pgid) and time.monotonic() < deadline:
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

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "ServerProcess":
        try:
            self.start()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# The signal that interrupted the run, once one has: whatever the interrupt unwinds through (an event
# loop, a request that ends with an error because its connection was torn down), the run is
# reported as interrupted, never as a failed trial.
_interrupted_by: int | None = None


def interrupt_received() -> int | None:
    """The signal number of the interrupt received inside `signals_raise_interrupt`, if any."""
    return _interrupted_by


def raise_if_interrupted() -> None:
    """Raise the interrupt again if one was received (for code that may have swallowed it)."""
    if _interrupted_by == signal.SIGINT:
        raise KeyboardInterrupt
    if _interrupted_by is not None:
        raise Terminated(_interrupted_by)


@contextlib.contextmanager
def signals_raise_interrupt() -> Iterator[None]:
    """While active (main thread only), SIGINT raises KeyboardInterrupt and SIGTERM/SIGHUP raise
    `Terminated`, so context managers unwind and stop their servers instead of the process dying
    with servers left behind. The signal is also recorded (`interrupt_received`): asyncio turns a
    Ctrl-C into a task cancellation of its own, and a request torn down by it can look like a failed
    request; the record keeps the run's outcome an interruption."""
    global _interrupted_by
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _interrupted_by = None

    def _raise(signum: int, _frame: object) -> None:
        global _interrupted_by
        first = _interrupted_by is None
        _interrupted_by = _interrupted_by or signum
        if first:  # a second signal while unwinding must not interrupt the cleanup
            raise_if_interrupted()

    previous = {sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
