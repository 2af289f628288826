"""Server launches: one server process from start to stop (`ServerLaunch`: its own port, healthy,
patches verified, warmed up; in the warm modes with its launch.json), and the warm modes' set of
launches (`Launches`: started when first needed, stopped after their last trial)."""

from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

from sglang_spec_harness.engines import ServerCommand, build_server_command
from sglang_spec_harness.files import WriteError, write_failed
from sglang_spec_harness.run.interrupts import interrupts_deferred, raise_if_interrupted, run_async
from sglang_spec_harness.run.plan import Launch, Plan, Trial
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.run.server import (
    NSYS_STOP_GRACE_S,
    PortInUseError,
    ServerProcess,
    ServerStartError,
    free_port,
    nsys_profile_argv,
    server_info,
    vocab_limit,
)
from sglang_spec_harness.run.workload import Prompt, RequestLog, build_prompts, first_failed, flush_cache, send_requests
from sglang_spec_harness.run.vocabulary import served_vocabulary
from sglang_spec_harness.rundir import LaunchRecord, RecordFile, Vocabulary, now
from sglang_spec_harness.scenario import Scenario

# A self-chosen port that another process took before the server could bind it: start again on
# another port this many times.
PORT_ATTEMPTS = 5


class TrialFailed(Exception):
    """A trial or launch could not produce its measurements. One line; `log_tail` has the server's last lines."""

    def __init__(self, message: str, log_tail: list[str] | None = None):
        super().__init__(message)
        self.log_tail = log_tail or []


class ServerLaunch:
    """One server process: started, healthy, patches verified, warmed up; stopped at the end.

    `directory` holds its server.log (a trial's own directory in restart mode, `launches/<name>/` in
    the warm modes, with launch.json there). A port the harness chose itself that another process
    takes before the server binds it (the server then exits, or the other process answers in its
    place) is replaced by another one; a port the user chose fails the launch."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, config: str, directory: Path, *, host: str,
                 port: int | None, nsys: bool, launch_json: RecordFile[LaunchRecord] | None = None,
                 clock0: float | None = None):
        self.scenario = scenario
        self.scenario_dir = scenario_dir
        self.config = config
        self.dir = directory
        self.host = host
        self.port_chosen = port is None  # by the harness: it may choose another
        self.port = port if port is not None else free_port(host)
        self.nsys = nsys
        self.launch_json = launch_json  # warm modes
        self.clock0 = clock0  # the run's start (monotonic), for the `*_at_s` times in launch.json
        self.profile_dir = directory / "profile"
        self.info: dict[str, Any] = {}
        self.vocabulary: Vocabulary | None = None
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
        if self.launch_json is not None:
            self.launch_json.update(**changes)

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
        self._update(status="starting", command=self.command.shell(), port=self.port, started=now())
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
        timeout_s = min(30.0, self.scenario.server.request_timeout_s)
        self.info = server_info(self.url, timeout_s=timeout_s)
        self.vocabulary = served_vocabulary(self.url, timeout_s=timeout_s, model_path=self.scenario.server.model_path)
        self._update(status="up", ready=now(), startup_s=round(time.monotonic() - self.started_at, 3),
                     server_info=self.info, vocabulary=self.vocabulary)
        self._mark("ready")

    def _verify_patches_imported(self) -> None:
        """A variant whose patches did not load would silently measure the wrong code."""
        from sglang_spec_harness.engines.bootstrap.sitecustomize import IMPORTED_MARKER

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
                             vocab_limit=vocab_limit(self.info), first=first)

    def warm_up(self, log: RequestLog, *, fail_on_error: bool = True) -> None:
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
        failed = first_failed([r for r in log.records if r.warmup])
        if failed and fail_on_error:
            raise self._fail(TrialFailed(f"warm-up: {self.with_exit_status(failed)}", self.server.log_tail()))
        self._update(warmup_s=round(time.monotonic() - started, 3))

    def with_exit_status(self, reason: str) -> str:
        """A failure's reason, plus how the server ended if it did (killed, crashed): requests that
        fail because the server died say so."""
        status = self.server.exit_status(wait_s=1.0)
        return f"{reason} (server {status})" if status else reason

    def stop(self) -> None:
        # before the harness stopped it (or asked it to): it crashed or was killed
        died = None if self.server.asked_to_stop else self.server.exit_status()
        code = self.server.stop()
        if self.launch_json is not None and self.launch_json.record.status != "failed":
            if died:
                self._update(status="failed", error=f"server {died} before the harness stopped it")
            else:
                self._update(status="stopped")
        # server_pid again: an interrupt may have landed between the start and its first record
        pid = {} if self.server.pid is None else {"server_pid": self.server.pid}
        self._update(stopped=now(), exit_code=code, **pid)
        self._mark("stopped")


class Launches:
    """The warm modes' servers: started when first needed (all at once in interleaved mode), stopped
    after the last trial that uses them (sequential) or at the end. With a `port`, launch k listens
    on port + k."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, run_dir: Path, plan: Plan, progress: RunProgress,
                 host: str, port: int | None = None):
        self.scenario, self.scenario_dir, self.run_dir = scenario, scenario_dir, run_dir
        self.plan, self.progress, self.host, self.port = plan, progress, host, port
        self.running: dict[int, ServerLaunch] = {}
        self.started: list[ServerLaunch] = []
        self.clock0 = time.monotonic()

    def _make(self, launch: Launch) -> ServerLaunch:
        directory = (self.run_dir / launch.dir).resolve()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_failed(directory, exc) from None
        launch_json = RecordFile(directory / "launch.json",
                                 LaunchRecord(**launch.model_dump(), status="planned", error=None))
        server = ServerLaunch(self.scenario, self.scenario_dir, launch.config, directory, host=self.host,
                              port=None if self.port is None else self.port + launch.index,
                              nsys=False, launch_json=launch_json, clock0=self.clock0)
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
            log = RequestLog(server.dir / "requests.jsonl")
            try:
                self._step(launch, functools.partial(server.warm_up, log))
            finally:
                with interrupts_deferred(), contextlib.suppress(WriteError):
                    log.finish()  # the appended lines stay if the rewrite fails
            assert server.launch_json is not None  # made by _make
            self.progress.launch_ready(launch, server.launch_json.record)

    @staticmethod
    def _step(launch: Launch, action: Callable[[], None]) -> None:
        try:
            action()
        except TrialFailed as exc:
            raise TrialFailed(f"{launch.dir_name}: {exc}", exc.log_tail) from None

    def serving(self, trial: Trial) -> ServerLaunch | None:
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

    def stop_all(self) -> WriteError | None:
        """Stop every launch still running (all of them, whatever fails); returns a record that could
        not be written."""
        write_error: WriteError | None = None
        with interrupts_deferred():
            for launch in self.running.values():
                launch.server.ask_to_stop()  # all shut down together
            for index in list(self.running):
                try:
                    self.running.pop(index).stop()
                except WriteError as exc:
                    write_error = write_error or exc
        return write_error
