"""`run_scenario`: the plan, the server launches, the workload, the profiler, the trace analysis;
every artifact written to the run directory as soon as it exists (layout: docs/internals.md).

In `restart` mode every trial starts its own server (its trial directory holds the server.log); in
the warm modes (`interleaved`, `sequential`) a launch serves many trials (blocks and profiled passes)
and has a directory of its own under `launches/`.

A run that dies (an exception, Ctrl-C, SIGTERM, SIGHUP, a failed trial or launch, a run directory that
cannot be written) keeps what it had, marks run.json `incomplete` with the reason and stops every
server it started. The first failure ends the run: with one arm's sample missing, nothing can be
concluded (exit 3, INCONCLUSIVE, in `harness run`). Interrupts are held back while a trial's records
are written and its server stopped (`harness.run.interrupts`), and an interrupt is reported as one
whatever it tore down on its way (requests in flight, a trace being written).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import httpx

from harness.engines import ServerCommand, build_server_command, keep_off_cpus, server_cpus
from harness.errors import EXIT_INCONCLUSIVE
from harness.run.environment import collect_environment, require_engine
from harness.run.plan import (
    Launch,
    Plan,
    Selection,
    Trial,
    block_size,
    make_plan,
    profiled_request_count,
    with_run_seed,
)
from harness.run.interrupts import (
    Terminated,
    interrupt_received,
    interrupt_text,
    interrupts_allowed,
    interrupts_deferred,
    interrupts_held,
    raise_if_interrupted,
    run_async,
    signals_raise_interrupt,
)
from harness.run.profiling import (
    TRACE_SUFFIXES,
    ProfilingError,
    start_profile,
    stop_profile,
    trace_files,
    wait_for_traces,
)
from harness.run.server import (
    LOOPBACK,
    NSYS_STOP_GRACE_S,
    PortInUseError,
    ServerProcess,
    ServerStartError,
    export_nsys_sqlite,
    free_port,
    nsys_profile_argv,
)
from harness.run.workload import (
    Prompt,
    RequestRecord,
    build_prompts,
    flush_cache,
    send_requests,
    summarize,
)
from harness.scenario import Scenario, scenario_to_yaml

SCHEMA_VERSION = 1
DEFAULT_OUT_ROOT = Path("reports/runs")
# After the profiled requests, how long the server gets to finish writing traces by itself (it
# stops after num_steps) before the harness asks it to stop (at most profile.trace_timeout_s). Short:
# a server that is still writing answers /stop_profile with "not profiling", and the harness then
# waits for the files (up to trace_timeout_s); one that ran fewer steps waits for nothing.
TRACE_SELF_STOP_WAIT_S = 2.0
# A self-chosen port that another process took before the server could bind it: start again on
# another port this many times.
PORT_ATTEMPTS = 5


class TrialFailed(Exception):
    """A trial or launch could not produce its measurements. One line; `log_tail` has the server's last lines."""

    def __init__(self, message: str, log_tail: list[str] | None = None):
        super().__init__(message)
        self.log_tail = log_tail or []


class RunDirError(Exception):
    """The run directory cannot be written (disk full, file-size limit, read-only): the run stops,
    keeping the previous version of every record (writes are atomic)."""


def _signum(exc: KeyboardInterrupt) -> int:
    return exc.signum if isinstance(exc, Terminated) else 2


def _interrupt_text(exc: KeyboardInterrupt) -> str:
    return interrupt_text(_signum(exc))


# ---- progress -----------------------------------------------------------------------------------


class RunProgress:
    """Hooks for showing progress; the default does nothing. `harness run` implements them."""

    def run_started(self, run_dir: Path, plan: list[Trial]) -> None: ...

    def launch_ready(self, launch: Launch, info: dict[str, Any]) -> None: ...

    def trial_started(self, trial: Trial, total_requests: int) -> None: ...

    def request_done(self, trial: Trial, done: int, total: int) -> None: ...

    def trial_finished(self, trial: Trial, outcome: "TrialOutcome") -> None: ...

    def note(self, text: str) -> None: ...


# ---- results ------------------------------------------------------------------------------------


@dataclass
class TrialOutcome:
    trial: Trial
    status: Literal["ok", "failed"]
    error: str | None = None
    summary: dict[str, Any] | None = None
    traces: list[str] = field(default_factory=list)
    server_pid: int | None = None
    log_tail: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    run_dir: Path | None  # None for a dry run
    status: Literal["planned", "complete", "incomplete"]
    plan: list[Trial]
    commands: dict[str, ServerCommand] = field(default_factory=dict)  # arm -> command (port 0 in a dry run)
    error: str | None = None
    outcomes: list[TrialOutcome] = field(default_factory=list)
    interrupted_by: int | None = None  # the signal number that ended the run
    log_tail: list[str] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    mode: str = "restart"

    @property
    def exit_code(self) -> int | None:
        """128 + signal when interrupted (130 for Ctrl-C, also after the last trial: the checks did not
        run); None when the run completed (the checks decide); 3 otherwise."""
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        if self.status != "incomplete":
            return None
        return EXIT_INCONCLUSIVE


# ---- files --------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def _write_failed(path: Path, exc: OSError) -> RunDirError:
    return RunDirError(f"cannot write {path}: {exc.strerror or exc}")


def write_text_atomic(path: Path, text: str) -> None:
    """A reader never sees half a file, and a crash or a full disk leaves the previous version (the
    temporary file is removed). Raises RunDirError."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _write_failed(path, exc) from None


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))


def new_run_dir(out_root: Path, scenario_name: str) -> Path:
    out_root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        candidate = out_root / (f"{stamp}-{scenario_name}" if n == 1 else f"{stamp}-{scenario_name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run directory under {out_root}")


def latest_link_path(out_root: Path) -> Path:
    """`reports/latest` for the default `reports/runs`; otherwise `<out>/latest`, inside the folder the
    user chose rather than beside it."""
    return out_root.parent / "latest" if out_root.name == "runs" else out_root / "latest"


def update_latest_link(run_dir: Path, link: Path) -> None:
    target = os.path.relpath(run_dir.resolve(), link.parent.resolve())
    tmp = link.with_name(f".{link.name}.tmp")
    if link.exists() and not link.is_symlink():
        return  # a real file or folder named `latest`: not ours to replace
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(target)
        os.replace(tmp, link)
    except OSError:
        pass  # a convenience only: never fail a run over it


class _Reserve:
    """Space set aside in the run directory and given back when the run ends, so that its last
    records (trial.json, launch.json, run.json: `incomplete` and why) still land on a disk that the
    run (or anything else) filled up meanwhile. A harness killed outright leaves it behind."""

    SIZE = 256 * 1024

    def __init__(self, run_dir: Path):
        self.path: Path | None = run_dir / ".harness-reserve"
        try:
            with self.path.open("wb") as f:
                f.write(b"\0" * self.SIZE)
        except OSError:  # nearly full already, or a file-size limit: run without one
            self.release()

    def release(self) -> bool:
        """Give the space back; False if there was none left to give."""
        path, self.path = self.path, None
        if path is None:
            return False
        with contextlib.suppress(OSError):
            path.unlink()
        return True


class _JsonFile:
    """A JSON record rewritten (atomically) on every change."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = path
        self.data = data
        self.save()

    def save(self) -> None:
        write_json(self.path, self.data)

    def update(self, **changes: Any) -> None:
        self.data.update(changes)
        self.save()


# ---- server launches ------------------------------------------------------------------------------


def _server_info(base_url: str, *, timeout_s: float = 30.0) -> dict[str, Any]:
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


def _vocab_limit(server_info: dict[str, Any]) -> int | None:
    """The vocabulary size if the server tells it (the micro engine does, under `micro_model`), so
    that synthetic prompts stay valid for a small vocabulary."""
    for where in (server_info, server_info.get("micro_model") or {}):
        value = where.get("vocab_size") if isinstance(where, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


class _RequestLog:
    """requests.jsonl of one trial (or a launch's warm-up): appended as each request finishes, so an
    interrupted trial keeps the requests it completed; rewritten in prompt order at the end."""

    def __init__(self, path: Path, on_measured: Any = None):
        self.path = path
        self.records: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._on_measured = on_measured
        try:
            path.touch()
        except OSError as exc:
            raise _write_failed(path, exc) from None

    def __call__(self, record: RequestRecord) -> None:
        line = (json.dumps(record.to_json_dict()) + "\n").encode()
        with self._lock:
            self.records.append(record)
            # One write of the whole line; a line cut short (a full disk) is cut off again, so
            # that the lines before it stay readable. Then the run stops: nothing more can be kept.
            with interrupts_deferred():
                fd = None
                try:
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                    size = os.fstat(fd).st_size
                    try:
                        written = 0
                        while written < len(line):  # a short write: the next one says why (ENOSPC, EFBIG)
                            written += os.write(fd, line[written:])
                    except OSError:
                        with contextlib.suppress(OSError):
                            os.ftruncate(fd, size)
                        raise
                except OSError as exc:
                    raise _write_failed(self.path, exc) from None
                finally:
                    if fd is not None:
                        os.close(fd)
            done = sum(1 for r in self.records if not r.warmup)
        if not record.warmup and self._on_measured is not None:
            self._on_measured(done)

    def finish(self) -> None:
        """Rewrite in prompt order (atomically: on failure the appended lines stay as they are)."""
        self.records.sort(key=lambda r: r.index)
        write_jsonl(self.path, [r.to_json_dict() for r in self.records])


def _first_failed(records: list[RequestRecord]) -> str | None:
    failed = [r for r in records if r.error is not None]
    if not failed:
        return None
    first = min(failed, key=lambda r: r.index)
    return f"{len(failed)} of {len(records)} requests failed; request {first.index}: {first.error}"


class _ServerLaunch:
    """One server process: started, healthy, patches verified, warmed up; stopped at the end.

    `directory` holds its server.log (a trial's own directory in restart mode, `launches/<name>/` in
    the warm modes, with launch.json there). A port the harness chose itself that another process
    takes before the server binds it (the server then exits, or the other process answers in its
    place) is replaced by another one; a port the user chose fails the launch."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, config: str, directory: Path, *, host: str,
                 port: int | None, nsys: bool, record: _JsonFile | None = None, clock0: float | None = None):
        self.scenario = scenario
        self.scenario_dir = scenario_dir
        self.config = config
        self.dir = directory
        self.host = host
        self.port_chosen = port is None  # by the harness: it may choose another
        self.port = port if port is not None else free_port(host)
        self.nsys = nsys
        self.record = record  # launch.json (warm modes)
        self.clock0 = clock0  # the run's start (monotonic), for the `*_at_s` times in launch.json
        self.profile_dir = directory / "profile"
        self.info: dict[str, Any] = {}
        self.started_at = 0.0
        self.port_attempts = 1
        self._build()

    def _build(self) -> None:
        scenario = self.scenario
        self.command = build_server_command(scenario, self.config, host=self.host, port=self.port,
                                            profile_dir=self.profile_dir)
        if self.nsys:
            self.command = ServerCommand(nsys_profile_argv(scenario.profile.nsys, self.profile_dir / "nsys",
                                                           self.command.argv), self.command.env, self.command.cpus)
        self.server = ServerProcess(
            self.command,
            log_path=self.dir / "server.log",
            host=self.host,
            port=self.port,
            startup_timeout_s=scenario.server.startup_timeout_s,
            stop_grace_s=NSYS_STOP_GRACE_S if self.nsys else 10.0,
        )

    @property
    def url(self) -> str:
        return self.server.base_url

    def _update(self, **changes: Any) -> None:
        if self.record is not None:
            self.record.update(**changes)

    def _mark(self, event: str) -> None:
        """`<event>_at_s`: seconds since the run started (ordering launches finer than timestamps)."""
        if self.clock0 is not None:
            self._update(**{f"{event}_at_s": round(time.monotonic() - self.clock0, 3)})

    def _fail(self, exc: ServerStartError | TrialFailed) -> TrialFailed:
        self._update(status="failed", error=str(exc))
        return TrialFailed(str(exc), exc.log_tail)

    def _another_port(self, why: str) -> bool:
        """Move to a fresh port if the harness chose this one (and attempts are left)."""
        if not self.port_chosen or self.port_attempts >= PORT_ATTEMPTS:
            return False
        self.server.stop()
        with contextlib.suppress(OSError):
            with self.server.log_path.open("a", encoding="utf-8") as log:
                log.write(f"harness: {why}; starting again on another port\n")
        self.port_attempts += 1
        self.port = free_port(self.host)
        self._build()
        self._update(status="starting", command=self.command.shell(), port=self.port, port_attempts=self.port_attempts)
        return True

    def _start_process(self) -> None:
        while True:
            try:
                self.server.start()
                return
            except PortInUseError as exc:
                if not self._another_port(str(exc)):
                    raise self._fail(exc) from None
            except ServerStartError as exc:
                raise self._fail(exc) from None

    def start(self) -> None:
        """Start the process (it comes up in the background: see `wait_ready`)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.nsys:
            self.profile_dir.mkdir(exist_ok=True)
        self.started_at = time.monotonic()
        self._update(status="starting", command=self.command.shell(), port=self.port, started=_now())
        self._mark("started")
        self._start_process()
        self._update(server_pid=self.server.pid)

    def wait_ready(self) -> None:
        """Healthy (on a port this server listens on), patches imported, /server_info read."""
        while True:
            try:
                self.server.wait_healthy()
                if self.server.listener_is_own() is False:
                    raise PortInUseError(f"{self.host}:{self.port} is answered by another process, not by the "
                                         "server the harness started (another server running there?)",
                                         self.server.log_tail())
                self._verify_patches_imported()
                break
            except PortInUseError as exc:
                if not self._another_port(str(exc)):
                    raise self._fail(exc) from None
            except ServerStartError as exc:
                # The server exited at start-up: because another process took its port meanwhile?
                # (One that is still up but never answered keeps its port, and fails.)
                exited = self.server.exit_status() is not None
                if not (exited and self.server.port_taken()
                        and self._another_port(f"{self.host}:{self.port} was taken by another process during start-up")):
                    raise self._fail(exc) from None
            except TrialFailed as exc:
                raise self._fail(exc) from None
            self._start_process()
            self._update(server_pid=self.server.pid)
        self.info = _server_info(self.url, timeout_s=min(30.0, self.scenario.server.request_timeout_s))
        self._update(status="up", ready=_now(), startup_s=round(time.monotonic() - self.started_at, 3),
                     server_info=self.info)
        self._mark("ready")

    def _verify_patches_imported(self) -> None:
        """A variant whose patches did not load would silently measure the wrong code."""
        from harness.engines.bootstrap.sitecustomize import IMPORTED_MARKER

        patches = self.scenario.variants[self.config].patches
        log = self.server.log_path.read_text(encoding="utf-8", errors="replace")
        if patches and IMPORTED_MARKER not in log:
            raise TrialFailed(
                f"variant {self.config!r} names patches {patches} but server.log has no "
                f"{IMPORTED_MARKER!r} line: was the harness's sitecustomize shadowed by another one?",
                self.server.log_tail(),
            )

    def prompts(self, num_requests: int, first: int) -> tuple[list[Prompt], list[Prompt]]:
        return build_prompts(self.scenario.workload, scenario_dir=self.scenario_dir, num_requests=num_requests,
                             vocab_limit=_vocab_limit(self.info), first=first)

    def warm_up(self, log: _RequestLog, *, fail_on_error: bool = True) -> None:
        """The warm-up requests, then /flush_cache (SGLang resets its accept-length counters there).
        A restart trial records failed warm-up requests with its own (fail_on_error=False)."""
        warmup, _ = self.prompts(0, 0)
        workload = self.scenario.workload
        timeout = self.scenario.server.request_timeout_s

        async def main() -> None:
            if warmup:
                await send_requests(self.url, warmup, workload, request_timeout_s=timeout, on_record=log)
            await flush_cache(self.url, timeout_s=timeout)

        started = time.monotonic()
        run_async(main())
        raise_if_interrupted()
        failed = _first_failed([r for r in log.records if r.warmup])
        if failed and fail_on_error:
            raise self._fail(TrialFailed(f"warm-up: {self.with_exit_status(failed)}", self.server.log_tail()))
        self._update(warmup_s=round(time.monotonic() - started, 3))

    def with_exit_status(self, reason: str) -> str:
        """A failure's reason, plus how the server ended if it did (killed, crashed): requests that
        fail because the server died say so."""
        status = self.server.exit_status(wait_s=1.0)
        return f"{reason} (server {status})" if status else reason

    def stop(self) -> None:
        died = self.server.exit_status()  # before the harness stopped it: it crashed or was killed
        code = self.server.stop()
        if died and self.record is not None and self.record.data.get("status") != "failed":
            self._update(status="failed", error=f"server {died} before the harness stopped it")
        elif self.record is not None and self.record.data.get("status") != "failed":
            self._update(status="stopped")
        self._update(stopped=_now(), exit_code=code)
        self._mark("stopped")


# ---- one trial ----------------------------------------------------------------------------------


class _TrialRunner:
    """One trial: on its own server (restart mode) or on a running launch (warm modes)."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, run_dir: Path, trial: Trial, progress: RunProgress,
                 host: str, port: int | None, launch: _ServerLaunch | None = None, launch_dir: str | None = None,
                 reserve: _Reserve | None = None):
        self.reserve = reserve
        self.scenario = scenario
        self.scenario_dir = scenario_dir
        self.trial = trial
        self.progress = progress
        self.host = host
        self.port = port
        self.launch = launch
        # Absolute: the server gets the profile path (env, /start_profile) and may run elsewhere.
        self.dir = (run_dir / trial.dir).resolve()
        self.profile_dir = self.dir / "profile"
        self.profiled = trial.kind == "profiled"
        self.num_requests = (profiled_request_count(scenario) if self.profiled
                             else block_size(scenario) if scenario.trials.warm else scenario.workload.num_requests)
        self.data: dict[str, Any] = {
            "index": trial.index,
            "variant": trial.variant,
            "config": trial.config,
            "kind": trial.kind,
            "repetition": trial.repetition,
            "launch": launch_dir,
            "status": "running",
            "error": None,
            "command": None,
            "server_pid": None,
            "port": None,
            "started": _now(),
            "finished": None,
            "server_info": {},
            "summary": None,
            "traces": [],
        }

    def save(self) -> None:
        write_json(self.dir / "trial.json", self.data)

    def run(self) -> TrialOutcome:
        """Never leaves its server running or its trial.json saying `running`: the end (stop, records)
        runs with interrupts held back. A failed trial returns a failed outcome; an interrupt, a run
        directory that cannot be written or a harness bug is raised after the trial is recorded."""
        outcome = TrialOutcome(self.trial, "failed")
        launch: _ServerLaunch | None = None
        log: _RequestLog | None = None
        duration: float | None = None
        try:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                if self.profiled:
                    self.profile_dir.mkdir(exist_ok=True)
            except OSError as exc:
                raise _write_failed(self.dir, exc) from None
            self.save()
            log = _RequestLog(self.dir / "requests.jsonl",
                              lambda done: self.progress.request_done(self.trial, done, self.num_requests))
            own = self.launch is None
            launch = self.launch or _ServerLaunch(
                self.scenario, self.scenario_dir, self.trial.config, self.dir, host=self.host, port=self.port,
                nsys=self.profiled and self.scenario.profile.nsys.enabled)
            self.data.update(command=launch.command.shell(), port=launch.port)
            self.save()
            self.progress.trial_started(self.trial, self.num_requests)
            try:
                if own:
                    launch.start()
                    self.data.update(server_pid=launch.server.pid, command=launch.command.shell(), port=launch.port)
                    self.save()
                    launch.wait_ready()
                self.data.update(server_pid=launch.server.pid, server_info=launch.info, command=launch.command.shell(),
                                 port=launch.port)
                self.save()
                if own:
                    launch.warm_up(log, fail_on_error=False)
                duration = self._drive(launch, log)
                raise_if_interrupted()
                failed = _first_failed(log.records)
                if failed:
                    raise TrialFailed(launch.with_exit_status(failed), launch.server.log_tail())
            except ProfilingError as exc:
                raise TrialFailed(launch.with_exit_status(str(exc)), launch.server.log_tail()) from None
        except TrialFailed as exc:
            signum = interrupt_received()
            if signum is None:
                outcome.error, outcome.log_tail = str(exc), exc.log_tail
            else:  # the interrupt tore the requests down: report it as what it is
                outcome.error = interrupt_text(signum)
                raise_if_interrupted()
        except KeyboardInterrupt as exc:
            outcome.error = _interrupt_text(exc)
            raise
        except RunDirError as exc:
            outcome.error = str(exc)
            raise
        except Exception as exc:  # a harness bug must still leave the trial on disk with its reason
            outcome.error = f"{type(exc).__name__}: {exc}"
            raise
        else:
            outcome.status = "ok"
        finally:
            with interrupts_deferred():
                write_error = self._finish(outcome, launch, log, duration)
        if write_error is not None:
            outcome.status, outcome.error = "failed", str(write_error)
            raise write_error
        return outcome

    def _finish(self, outcome: TrialOutcome, launch: _ServerLaunch | None, log: _RequestLog | None,
                duration: float | None) -> RunDirError | None:
        """Stop the trial's own server, then record the trial; returns a write that failed."""
        write_error: RunDirError | None = None
        if launch is not None:
            outcome.server_pid = launch.server.pid
            if self.launch is None:
                launch.stop()
                if launch.nsys:
                    self._export_nsys(outcome)
        if log is not None:
            try:
                log.finish()
            except RunDirError as exc:  # the appended lines stay; the run stops (disk full)
                write_error = exc
            self.data["summary"] = summarize(log.records, duration) if log.records else None
        outcome.summary = self.data["summary"]
        outcome.traces = self.data["traces"] = self._trace_paths()
        status, error = outcome.status, outcome.error
        if write_error is not None:
            status, error = "failed", error or str(write_error)
        self.data.update(status=status, error=error, finished=_now())
        try:
            self.save()
        except RunDirError as exc:
            write_error = write_error or exc
            self.data.update(status="failed", error=error or str(exc))
            if self.reserve is not None and self.reserve.release():  # the disk is full: say so all the same
                with contextlib.suppress(RunDirError):
                    self.save()
        return write_error

    def _drive(self, launch: _ServerLaunch, log: _RequestLog) -> float:
        workload = self.scenario.workload
        timeout = self.scenario.server.request_timeout_s
        url = launch.url
        _, measured = launch.prompts(self.num_requests, self.trial.first_prompt)

        async def main() -> float:
            if self.profiled:
                await asyncio.to_thread(
                    start_profile, url, self.scenario.profile, output_dir=self.profile_dir, profile_id=self.trial.dir_name,
                    timeout_s=min(120.0, timeout))
            start = time.perf_counter()
            await send_requests(url, measured, workload, request_timeout_s=timeout, on_record=log,
                                rate_seed=self.trial.index)
            return time.perf_counter() - start

        duration = run_async(main())
        raise_if_interrupted()
        if self.profiled:
            self._collect_traces(url)
        return duration

    def _collect_traces(self, url: str) -> None:
        spec = self.scenario.profile
        if not {"CPU", "GPU"} & set(spec.activities):
            return  # e.g. CUDA_PROFILER alone: nsys records, the torch profiler writes no trace
        started = time.monotonic()
        try:
            wait_for_traces(self.profile_dir, timeout_s=min(TRACE_SELF_STOP_WAIT_S, spec.trace_timeout_s))
            return
        except ProfilingError:
            pass
        # Fewer forward steps than num_steps ran: the profiler is still on. Stop it.
        stop_profile(url, timeout_s=min(spec.trace_timeout_s, self.scenario.server.request_timeout_s))
        left = spec.trace_timeout_s - (time.monotonic() - started)
        wait_for_traces(self.profile_dir, timeout_s=max(left, 1.0), waiting_since=started)

    def _export_nsys(self, outcome: TrialOutcome) -> None:
        try:
            export_nsys_sqlite(self.scenario.profile.nsys, self.profile_dir / "nsys.nsys-rep")
        except Exception as exc:  # noqa: BLE001 - recorded on the trial, the run goes on failing closed
            if outcome.status == "ok":
                outcome.status, outcome.error = "failed", f"nsys: {exc}"

    def _trace_paths(self) -> list[str]:
        """The profile's files (traces, nsys reports), without links or temporary ones a writer left behind."""
        return [str(p.relative_to(self.dir)) for p in trace_files(self.profile_dir)]


# ---- trace analysis -----------------------------------------------------------------------------


def analyze_trial_traces(scenario: Scenario, trial_dir: Path, traces: list[str]) -> dict[str, Any]:
    """The TraceAnalysis JSON of one profiled trial's Kineto traces."""
    from harness.traces import analyze_traces

    paths = [trial_dir / t for t in traces if t.endswith(TRACE_SUFFIXES)]
    if not paths:
        raise ValueError("no trace files to analyze")
    analysis = analyze_traces(
        paths,
        patterns=scenario.patterns,
        regions=scenario.region_rules(),
        replace_default_regions=scenario.regions.replace,
    )
    return analysis.to_json_dict()


# ---- the run ------------------------------------------------------------------------------------


def describe_commands(scenario: Scenario, plan: list[Trial], *, host: str = LOOPBACK, port: int = 0) -> dict[str, ServerCommand]:
    """Arm -> the server command its trials run (with a placeholder port)."""
    commands: dict[str, ServerCommand] = {}
    for trial in plan:
        if trial.variant not in commands:
            commands[trial.variant] = build_server_command(
                scenario, trial.config, host=host, port=port, profile_dir=Path("<trial>/profile")
            )
    return commands


class _Launches:
    """The warm modes' servers: started when first needed (all at once in interleaved mode), stopped
    after the last trial that uses them (sequential) or at the end. With a `port`, launch k listens
    on port + k."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, run_dir: Path, plan: Plan, progress: RunProgress,
                 host: str, port: int | None = None):
        self.scenario, self.scenario_dir, self.run_dir = scenario, scenario_dir, run_dir
        self.plan, self.progress, self.host, self.port = plan, progress, host, port
        self.running: dict[int, _ServerLaunch] = {}
        self.started: list[_ServerLaunch] = []
        self.clock0 = time.monotonic()

    def _make(self, launch: Launch) -> _ServerLaunch:
        directory = (self.run_dir / launch.dir).resolve()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _write_failed(directory, exc) from None
        record = _JsonFile(directory / "launch.json", {**launch.to_json_dict(), "status": "planned", "error": None})
        server = _ServerLaunch(self.scenario, self.scenario_dir, launch.config, directory, host=self.host,
                               port=None if self.port is None else self.port + launch.index,
                               nsys=False, record=record, clock0=self.clock0)
        self.running[launch.index] = server
        self.started.append(server)
        return server

    def _bring_up(self, launches: list[Launch]) -> None:
        """Start the processes together (start-up overlaps), then wait for each and warm it up in turn."""
        servers = [self._make(launch) for launch in launches]
        for launch, server in zip(launches, servers):
            self._step(launch, server.start)
        for launch, server in zip(launches, servers):
            self._step(launch, server.wait_ready)
            log = _RequestLog(server.dir / "requests.jsonl")
            try:
                self._step(launch, lambda: server.warm_up(log))
            finally:
                with interrupts_deferred(), contextlib.suppress(RunDirError):
                    log.finish()  # the appended lines stay if the rewrite fails
            self.progress.launch_ready(launch, server.record.data if server.record else {})

    @staticmethod
    def _step(launch: Launch, action: Any) -> None:
        try:
            action()
        except TrialFailed as exc:
            raise TrialFailed(f"{launch.dir_name}: {exc}", exc.log_tail) from None

    def serving(self, trial: Trial) -> _ServerLaunch | None:
        launch = self.plan.launch_of(trial)
        if launch is None:
            return None
        if launch.index not in self.running:
            if self.plan.mode == "sequential":
                pending = [launch]
            elif self.scenario.trials.servers_up == "pair":
                pending = [item for item in self.plan.launches if item.number == launch.number]
            else:
                pending = self.plan.launches
            self._bring_up([item for item in pending if item.index not in self.running])
        return self.running[launch.index]

    def done_with(self, position: int) -> None:
        """After the trial at `position`: stop the launches no later trial uses (unless all stay up)."""
        if self.plan.mode == "interleaved" and self.scenario.trials.servers_up == "all":
            return
        with interrupts_deferred():
            for index, last in self.plan.last_use().items():
                if last == position and index in self.running:
                    self.running.pop(index).stop()

    def stop_all(self) -> RunDirError | None:
        """Stop every launch still running (all of them, whatever fails); returns a record that could
        not be written."""
        write_error: RunDirError | None = None
        with interrupts_deferred():
            for index in list(self.running):
                try:
                    self.running.pop(index).stop()
                except RunDirError as exc:
                    write_error = write_error or exc
        return write_error


def run_scenario(
    scenario: Scenario,
    scenario_path: Path,
    *,
    out_root: Path = DEFAULT_OUT_ROOT,
    aa: bool = False,
    dry_run: bool = False,
    progress: RunProgress | None = None,
    host: str = LOOPBACK,
    port: int | None = None,
    select: Selection | None = None,
    run_dir: Path | None = None,
) -> RunResult:
    """Run every trial of the scenario's plan and write the run directory. Never raises for a failed
    trial, an interruption or a run directory that cannot be written: the RunResult says what
    happened. Bad input raises HarnessInputError before anything starts. `port`: the servers' port
    (restart mode) or the first launch's (warm modes: launch k gets port + k); default: free ports.

    `select`: run only these (arm, kind) pairs of the plan (see `make_plan`); fix `trials.seed` first
    (`with_run_seed`) when several subsets must come from one plan. `run_dir`: write into this new
    directory instead of a fresh `<timestamp>-<name>` under `out_root` (the `latest` link is then
    left alone)."""
    progress = progress or RunProgress()
    scenario = with_run_seed(scenario)  # written into the run's scenario.yaml: the order is reproducible
    plan = make_plan(scenario, aa=aa, select=select)
    commands = describe_commands(scenario, plan.trials, host=host)
    scenario_dir = Path(scenario_path).resolve().parent
    # Prompt files are read (and their errors reported) before any server starts.
    build_prompts(scenario.workload, scenario_dir=scenario_dir)
    result = RunResult(run_dir=None, status="planned" if dry_run else "incomplete", plan=plan.trials,
                       commands=commands, launches=plan.launches, mode=plan.mode)
    if dry_run:
        return result
    # Each variant's interpreter, asked once: recorded in environment.json, and checked before any
    # server starts (a missing SGLang, or the wrong version, is bad input: exit 2, not a failed launch).
    environment = collect_environment(scenario, variants=sorted({t.config for t in plan.trials}))
    require_engine(scenario, environment)
    run = _Run(scenario, scenario_dir, plan, result, progress=progress, out_root=out_root, aa=aa, host=host, port=port,
               run_dir=run_dir, environment=environment)
    with signals_raise_interrupt(), keep_off_cpus(server_cpus(scenario)):
        # Interrupts raise only inside `interrupts_allowed()`: the bookkeeping around it always runs.
        with interrupts_held():
            failure: str | None = None
            try:
                with interrupts_allowed():
                    run.trials()
            except KeyboardInterrupt:
                pass  # recorded: interrupt_received()
            except RunDirError as exc:
                failure = str(exc)
            except Exception as exc:  # a harness bug: keep the run, the reason and the traceback on disk
                failure = run.harness_bug(exc)
            run.finish(failure)
        result.interrupted_by = interrupt_received()
    return result


class _Run:
    """The state of one run while it goes: run.json, the analysis, the warm launches."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, plan: Plan, result: RunResult, *,
                 progress: RunProgress, out_root: Path, aa: bool, host: str, port: int | None,
                 environment: dict[str, Any], run_dir: Path | None = None):
        self.scenario, self.scenario_dir, self.plan, self.result = scenario, scenario_dir, plan, result
        self.given_run_dir = run_dir
        self.environment = environment
        self.progress, self.out_root, self.aa, self.host, self.port = progress, out_root, aa, host, port
        self.started = time.monotonic()
        self.run_file: _JsonFile | None = None
        self.reserve: _Reserve | None = None
        self.launches: _Launches | None = None
        self.analysis: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "trials": {}}
        self.analysis_errors: dict[str, str] = {}

    def trials(self) -> None:
        scenario, plan, result = self.scenario, self.plan, self.result
        try:
            if self.given_run_dir is None:
                run_dir = new_run_dir(self.out_root, scenario.name)
            else:
                run_dir = self.given_run_dir
                run_dir.mkdir(parents=True)  # never write into an existing run
        except OSError as exc:
            where = self.given_run_dir or f"a run directory under {self.out_root}"
            raise RunDirError(f"cannot create {where}: {exc.strerror or exc}") from None
        result.run_dir = run_dir
        write_text_atomic(run_dir / "scenario.yaml", scenario_to_yaml(scenario))
        self.run_file = _JsonFile(run_dir / "run.json", {
            "schema_version": SCHEMA_VERSION, "scenario": scenario.name, "aa": self.aa, "status": "running",
            "error": None, "started": _now(), "finished": None, **plan.to_json_dict(), "trials_done": 0,
        })
        self.reserve = _Reserve(run_dir)
        if self.given_run_dir is None:
            update_latest_link(run_dir, latest_link_path(self.out_root))
        self.progress.run_started(run_dir, plan.trials)
        self.launches = _Launches(scenario, self.scenario_dir, run_dir, plan, self.progress, self.host, self.port)
        write_json(run_dir / "environment.json", self.environment)
        for position, trial in enumerate(plan.trials):
            try:
                server = self.launches.serving(trial)
            except TrialFailed as exc:
                raise_if_interrupted()  # an interrupt that tore the start-up down is what ended it
                result.error = f"server launch failed: {exc}"
                result.log_tail = exc.log_tail
                return
            launch = plan.launch_of(trial)
            try:
                outcome = _TrialRunner(scenario, self.scenario_dir, run_dir, trial, self.progress, self.host,
                                       self.port, server, launch.dir if launch else None, self.reserve).run()
            except RunDirError as exc:
                raise RunDirError(f"trial {trial.dir_name} failed: {exc}") from None
            result.outcomes.append(outcome)
            self.run_file.update(trials_done=len(result.outcomes))
            self.progress.trial_finished(trial, outcome)
            if outcome.status == "failed":
                result.error = f"trial {trial.dir_name} failed: {outcome.error}"
                result.log_tail = outcome.log_tail
                return
            self.launches.done_with(position)
            if trial.kind == "profiled" and outcome.traces:
                self._analyze(trial, outcome)
        if self.analysis_errors:
            name, message = next(iter(self.analysis_errors.items()))
            result.error = f"trace analysis of {name} failed: {message}"
        else:
            result.status = "complete"

    def _analyze(self, trial: Trial, outcome: TrialOutcome) -> None:
        assert self.result.run_dir is not None
        try:
            self.analysis["trials"][trial.dir_name] = analyze_trial_traces(
                self.scenario, self.result.run_dir / trial.dir, outcome.traces)
        except Exception as exc:  # noqa: BLE001 - recorded; checks then lack evidence
            self.analysis_errors[trial.dir_name] = f"{type(exc).__name__}: {exc}"
            self.analysis["errors"] = self.analysis_errors
        write_json(self.result.run_dir / "analysis.json", self.analysis)

    def harness_bug(self, exc: Exception) -> str:
        """The reason of an unexpected exception; its traceback goes to traceback.txt when it can."""
        text = f"{type(exc).__name__}: {exc}"
        run_dir = self.result.run_dir
        if run_dir is not None:
            try:
                (run_dir / "traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
                text += f" (traceback: {run_dir / 'traceback.txt'})"
            except OSError:
                pass
        return text

    def finish(self, failure: str | None) -> None:
        """Stop every server, then the final run.json (interrupts are held here)."""
        result = self.result
        if (failure is not None or result.status != "complete") and self.reserve is not None:
            self.reserve.release()  # room for the last records, if the disk is what failed
        write_error = self.launches.stop_all() if self.launches is not None else None
        if self.reserve is not None:
            self.reserve.release()
        signum = interrupt_received()
        if failure is None and write_error is not None and result.status == "complete":
            failure = str(write_error)
        if result.status != "complete" and signum is not None:
            result.error = interrupt_text(signum)  # whatever it tore down on its way
        elif failure is not None:
            result.status, result.error = "incomplete", failure
        if self.run_file is None:
            return
        outcomes = result.outcomes
        measured = sum((o.summary or {}).get("duration_s") or 0.0 for o in outcomes if o.trial.kind == "timed")
        launches = len(self.launches.started) if self.launches is not None else 0
        try:
            self.run_file.update(status=result.status, error=result.error, finished=_now(),
                                 wall_s=round(time.monotonic() - self.started, 3), measured_s=round(measured, 3),
                                 server_launches=launches + sum(1 for o in outcomes if o.trial.launch is None))
        except RunDirError as exc:  # run.json keeps its last version (`running`): never read as complete
            result.status = "incomplete"
            result.error = f"{result.error}; {exc}" if result.error else str(exc)
