"""One trial: on a server of its own (restart mode) or on a running launch (warm modes), its
requests and, for a profiled pass, its traces; trial.json and requests.jsonl written as it goes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from sglang_spec_harness.files import Reserve, WriteError, write_failed
from sglang_spec_harness.run.interrupts import (
    interrupt_received,
    interrupt_signum,
    interrupt_text,
    interrupts_deferred,
    raise_if_interrupted,
    run_async,
)
from sglang_spec_harness.run.launch import ServerLaunch, TrialFailed
from sglang_spec_harness.run.outcome import TrialOutcome
from sglang_spec_harness.run.plan import Trial, block_size, profiled_request_count
from sglang_spec_harness.run.profiling import (
    TRACE_SUFFIXES,
    ProfilingError,
    collect_traces,
    start_profile,
    trace_files,
)
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.run.server import export_nsys_sqlite
from sglang_spec_harness.run.workload import RequestLog, first_failed, send_requests, summarize
from sglang_spec_harness.rundir import RecordFile, TrialAnalysis, TrialRecord, now
from sglang_spec_harness.scenario import Scenario


class TrialRunner:
    """One trial: on its own server (restart mode) or on a running launch (warm modes)."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, run_dir: Path, trial: Trial, progress: RunProgress,
                 host: str, port: int | None, launch: ServerLaunch | None = None, launch_dir: str | None = None,
                 reserve: Reserve | None = None):
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
        self.trial_json = RecordFile(self.dir / "trial.json", TrialRecord(
            index=trial.index, variant=trial.variant, config=trial.config, kind=trial.kind,
            repetition=trial.repetition, launch=launch_dir, status="running", error=None, command=None,
            server_pid=None, port=None, started=now(), finished=None, server_info={}, summary=None, traces=[],
        ), save=False)  # its directory comes first

    def run(self) -> TrialOutcome:
        """Never leaves its server running or its trial.json saying `running`: the end (stop, records)
        runs with interrupts held back. A failed trial returns a failed outcome; an interrupt, a run
        directory that cannot be written or a harness bug is raised after the trial is recorded."""
        outcome = TrialOutcome(self.trial, "failed")
        launch: ServerLaunch | None = None
        log: RequestLog | None = None
        duration: float | None = None
        try:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                if self.profiled:
                    self.profile_dir.mkdir(exist_ok=True)
            except OSError as exc:
                raise write_failed(self.dir, exc) from None
            self.trial_json.save()
            log = RequestLog(self.dir / "requests.jsonl",
                             lambda done: self.progress.request_done(self.trial, done, self.num_requests))
            own = self.launch is None
            launch = self.launch or ServerLaunch(
                self.scenario, self.scenario_dir, self.trial.config, self.dir, host=self.host, port=self.port,
                nsys=self.profiled and self.scenario.profile.nsys.enabled)
            self.trial_json.update(command=launch.command.shell(), port=launch.port)
            self.progress.trial_started(self.trial, self.num_requests)
            try:
                if own:
                    launch.start()
                    self.trial_json.update(server_pid=launch.server.pid, command=launch.command.shell(),
                                           port=launch.port)
                    launch.wait_ready()
                self.trial_json.update(server_pid=launch.server.pid, server_info=launch.info,
                                       vocabulary=launch.vocabulary, command=launch.command.shell(), port=launch.port)
                if own:
                    launch.warm_up(log, fail_on_error=False)
                duration = self._drive(launch, log)
                raise_if_interrupted()
                failed = first_failed(log.records)
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
            outcome.error = interrupt_text(interrupt_signum(exc))
            raise
        except WriteError as exc:
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

    def _finish(self, outcome: TrialOutcome, launch: ServerLaunch | None, log: RequestLog | None,
                duration: float | None) -> WriteError | None:
        """Stop the trial's own server, then record the trial; returns a write that failed."""
        write_error: WriteError | None = None
        if launch is not None:
            outcome.server_pid = launch.server.pid
            if launch.server.pid is not None:  # an interrupt may have landed before it was recorded
                self.trial_json.set(server_pid=launch.server.pid)
            if self.launch is None:
                launch.stop()
                if launch.nsys:
                    self._export_nsys(outcome)
        if log is not None:
            try:
                log.finish()
            except WriteError as exc:  # the appended lines stay; the run stops (disk full)
                write_error = exc
            self.trial_json.set(summary=summarize(log.records, duration) if log.records else None)
        outcome.summary = self.trial_json.record.summary
        outcome.traces = self._trace_paths()
        status, error = outcome.status, outcome.error
        if write_error is not None:
            status, error = "failed", error or str(write_error)
        self.trial_json.set(traces=outcome.traces, status=status, error=error, finished=now())
        try:
            self.trial_json.save()
        except WriteError as exc:
            write_error = write_error or exc
            self.trial_json.set(status="failed", error=error or str(exc))
            if self.reserve is not None and self.reserve.release():  # the disk is full: say so all the same
                with contextlib.suppress(WriteError):
                    self.trial_json.save()
        return write_error

    def _drive(self, launch: ServerLaunch, log: RequestLog) -> float:
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
        collect_traces(url, self.profile_dir, trace_timeout_s=spec.trace_timeout_s,
                       stop_timeout_s=min(spec.trace_timeout_s, self.scenario.server.request_timeout_s))

    def _export_nsys(self, outcome: TrialOutcome) -> None:
        try:
            export_nsys_sqlite(self.scenario.profile.nsys, self.profile_dir / "nsys.nsys-rep")
        except Exception as exc:  # recorded on the trial, the run goes on failing closed
            if outcome.status == "ok":
                outcome.status, outcome.error = "failed", f"nsys: {exc}"

    def _trace_paths(self) -> list[str]:
        """The profile's files (traces, nsys reports), without links or temporary ones a writer left behind."""
        return [str(p.relative_to(self.dir)) for p in trace_files(self.profile_dir)]


def analyze_trial_traces(scenario: Scenario, trial_dir: Path, traces: list[str]) -> TrialAnalysis:
    """The trace analysis of one profiled trial's Kineto traces (its analysis.json section)."""
    from sglang_spec_harness.traces import analyze_traces

    paths = [trial_dir / t for t in traces if t.endswith(TRACE_SUFFIXES)]
    if not paths:
        raise ValueError("no trace files to analyze")
    analysis = analyze_traces(
        paths,
        patterns=scenario.patterns,
        regions=scenario.region_rules(),
        replace_default_regions=scenario.regions.replace,
    )
    return TrialAnalysis.model_validate(analysis.to_json_dict())
