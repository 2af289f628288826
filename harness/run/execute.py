"""`run_scenario`: the plan, one server per trial, the workload, the profiler, the trace analysis;
every artifact written to the run directory as soon as it exists (layout: docs/internals.md).

A run that dies (an exception, Ctrl-C, SIGTERM, a failed trial) keeps what it had, marks run.json
`incomplete` with the reason and stops every server it started. The first failed trial ends the run:
with one arm's sample missing, nothing can be concluded (exit 3, INCONCLUSIVE, in `harness run`).
"""

from __future__ import annotations

import asyncio
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

from harness.engines import ServerCommand, build_server_command
from harness.run.environment import collect_environment
from harness.errors import EXIT_INCONCLUSIVE
from harness.run.plan import Trial, plan_trials, with_run_seed
from harness.run.profiling import ProfilingError, start_profile, stop_profile, trace_files, wait_for_traces
from harness.scenario import Scenario, scenario_to_yaml
from harness.run.server import (
    LOOPBACK,
    NSYS_STOP_GRACE_S,
    ServerProcess,
    ServerStartError,
    Terminated,
    export_nsys_sqlite,
    free_port,
    nsys_profile_argv,
    signals_raise_interrupt,
)
from harness.run.workload import Prompt, RequestRecord, build_prompts, flush_cache, send_requests, summarize

SCHEMA_VERSION = 1
DEFAULT_OUT_ROOT = Path("reports/runs")
# After the profiled requests, how long the server gets to finish writing traces by itself (it
# stops after num_steps) before the harness asks it to stop, and then to write them.
TRACE_SELF_STOP_WAIT_S = 10.0
TRACE_WRITE_TIMEOUT_S = 300.0


class TrialFailed(Exception):
    """A trial could not produce its measurements. One line; `log_tail` has the server's last lines."""

    def __init__(self, message: str, log_tail: list[str] | None = None):
        super().__init__(message)
        self.log_tail = log_tail or []


# ---- progress -----------------------------------------------------------------------------------


class RunProgress:
    """Hooks for showing progress; the default does nothing. `harness run` implements them."""

    def run_started(self, run_dir: Path, plan: list[Trial]) -> None: ...

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

    @property
    def exit_code(self) -> int | None:
        """None when the run completed (the checks decide); 130 for Ctrl-C (128 + signal); 3 otherwise."""
        if self.status != "incomplete":
            return None
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return EXIT_INCONCLUSIVE


# ---- files --------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def write_json(path: Path, data: Any) -> None:
    """Atomically: a reader never sees half a file, and a crash leaves the previous version."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)


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


class _RunFile:
    """run.json, rewritten on every change."""

    def __init__(self, run_dir: Path, scenario: Scenario, plan: list[Trial], aa: bool):
        self.path = run_dir / "run.json"
        self.data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "scenario": scenario.name,
            "aa": aa,
            "status": "running",
            "error": None,
            "started": _now(),
            "finished": None,
            "plan": [t.to_json_dict() for t in plan],
            "trials_done": 0,
        }
        self.save()

    def save(self) -> None:
        write_json(self.path, self.data)

    def update(self, **changes: Any) -> None:
        self.data.update(changes)
        self.save()


# ---- one trial ----------------------------------------------------------------------------------


def _server_info(base_url: str) -> dict[str, Any]:
    for path in ("/server_info", "/get_server_info"):  # the second is SGLang's older name
        try:
            response = httpx.get(f"{base_url}{path}", timeout=30.0, trust_env=False)
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


class _TrialRunner:
    def __init__(
        self,
        scenario: Scenario,
        scenario_dir: Path,
        run_dir: Path,
        trial: Trial,
        progress: RunProgress,
        host: str,
        port: int | None,
    ):
        self.scenario = scenario
        self.scenario_dir = scenario_dir
        self.trial = trial
        self.progress = progress
        self.host = host
        self.port = port if port is not None else free_port(host)
        # Absolute: the server gets the profile path (env, /start_profile) and may run elsewhere.
        self.dir = (run_dir / trial.dir).resolve()
        self.profile_dir = self.dir / "profile"
        self.requests_path = self.dir / "requests.jsonl"
        self.records: list[RequestRecord] = []
        self._lock = threading.Lock()
        self.data: dict[str, Any] = {
            "index": trial.index,
            "variant": trial.variant,
            "config": trial.config,
            "kind": trial.kind,
            "repetition": trial.repetition,
            "status": "running",
            "error": None,
            "command": None,
            "server_pid": None,
            "port": self.port,
            "started": _now(),
            "finished": None,
            "server_info": {},
            "summary": None,
            "traces": [],
        }

    def save(self) -> None:
        write_json(self.dir / "trial.json", self.data)

    def command(self) -> ServerCommand:
        command = build_server_command(
            self.scenario, self.trial.config, host=self.host, port=self.port, profile_dir=self.profile_dir
        )
        nsys = self.scenario.profile.nsys
        if self.trial.kind == "profiled" and nsys.enabled:
            command = ServerCommand(nsys_profile_argv(nsys, self.profile_dir / "nsys", command.argv), command.env)
        return command

    def _on_record(self, record: RequestRecord) -> None:
        # Appended as each request finishes, so an interrupted trial keeps the requests it completed.
        with self._lock:
            self.records.append(record)
            with self.requests_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record.to_json_dict()) + "\n")
            done = sum(1 for r in self.records if not r.warmup)
        if not record.warmup:
            self.progress.request_done(self.trial, done, self._measured_total)

    def run(self) -> TrialOutcome:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.trial.kind == "profiled":
            self.profile_dir.mkdir(exist_ok=True)
        self.requests_path.touch()
        command = self.command()
        self.data["command"] = command.shell()
        self.save()
        profiled = self.trial.kind == "profiled"
        nsys = self.scenario.profile.nsys.enabled and profiled
        workload = self.scenario.workload
        num_requests = (self.scenario.profile.requests or workload.num_requests) if profiled else workload.num_requests
        self._measured_total = num_requests
        self.progress.trial_started(self.trial, num_requests)
        server = ServerProcess(
            command,
            log_path=self.dir / "server.log",
            host=self.host,
            port=self.port,
            startup_timeout_s=self.scenario.server.startup_timeout_s,
            stop_grace_s=NSYS_STOP_GRACE_S if nsys else 10.0,
        )
        outcome = TrialOutcome(self.trial, "failed")
        try:
            try:
                server.start()
                self.data["server_pid"] = outcome.server_pid = server.pid
                self.save()
                server.wait_healthy()
            except ServerStartError as exc:
                raise TrialFailed(str(exc), exc.log_tail) from None
            self._verify_patches_imported(server)
            info = _server_info(server.base_url)
            self.data["server_info"] = info
            self.save()
            warmup, measured = build_prompts(
                workload, scenario_dir=self.scenario_dir, num_requests=num_requests, vocab_limit=_vocab_limit(info)
            )
            duration = self._drive(server, warmup, measured, profiled)
            self.data["summary"] = summarize(self.records, duration)
            failed = [r for r in self.records if r.error is not None]
            if failed:
                first = min(failed, key=lambda r: r.index)
                raise TrialFailed(
                    f"{len(failed)} of {len(self.records)} requests failed; request {first.index}: {first.error}",
                    server.log_tail(),
                )
        except TrialFailed as exc:
            outcome.error, outcome.log_tail = str(exc), exc.log_tail
        except ProfilingError as exc:
            outcome.error, outcome.log_tail = str(exc), server.log_tail()
        except KeyboardInterrupt as exc:
            outcome.error = f"interrupted ({exc})" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"
            raise
        except Exception as exc:  # a harness bug must still leave the trial on disk with its reason
            outcome.error = f"{type(exc).__name__}: {exc}"
            raise
        else:
            outcome.status = "ok"
        finally:
            server.stop()
            if nsys:
                self._export_nsys(outcome)
            self.records.sort(key=lambda r: r.index)
            write_jsonl(self.requests_path, [r.to_json_dict() for r in self.records])
            if self.data["summary"] is None and self.records:
                self.data["summary"] = summarize(self.records, None)
            outcome.summary = self.data["summary"]
            outcome.traces = self.data["traces"] = self._trace_paths()
            self.data.update(status=outcome.status, error=outcome.error, finished=_now())
            self.save()
        return outcome

    def _verify_patches_imported(self, server: ServerProcess) -> None:
        """A variant whose patches did not load would silently measure the wrong code."""
        from harness.engines.bootstrap.sitecustomize import IMPORTED_MARKER

        patches = self.scenario.variants[self.trial.config].patches
        log = (self.dir / "server.log").read_text(encoding="utf-8", errors="replace")
        if patches and IMPORTED_MARKER not in log:
            raise TrialFailed(
                f"variant {self.trial.config!r} names patches {patches} but server.log has no "
                f"{IMPORTED_MARKER!r} line: was the harness's sitecustomize shadowed by another one?",
                server.log_tail(),
            )

    def _drive(self, server: ServerProcess, warmup: list[Prompt], measured: list[Prompt], profiled: bool) -> float:
        workload = self.scenario.workload
        timeout = self.scenario.server.request_timeout_s
        url = server.base_url

        async def main() -> float:
            if warmup:
                await send_requests(url, warmup, workload, request_timeout_s=timeout, on_record=self._on_record)
            await flush_cache(url)
            if profiled:
                await asyncio.to_thread(
                    start_profile, url, self.scenario.profile, output_dir=self.profile_dir, profile_id=self.trial.dir_name
                )
            start = time.perf_counter()
            await send_requests(
                url, measured, workload, request_timeout_s=timeout, on_record=self._on_record, rate_seed=self.trial.index
            )
            return time.perf_counter() - start

        duration = asyncio.run(main())
        if profiled:
            self._collect_traces(url)
        return duration

    def _collect_traces(self, url: str) -> None:
        if not {"CPU", "GPU"} & set(self.scenario.profile.activities):
            return  # e.g. CUDA_PROFILER alone: nsys records, the torch profiler writes no trace
        try:
            wait_for_traces(self.profile_dir, timeout_s=TRACE_SELF_STOP_WAIT_S)
            return
        except ProfilingError:
            pass
        # Fewer forward steps than num_steps ran: the profiler is still on. Stop it.
        stop_profile(url)
        wait_for_traces(self.profile_dir, timeout_s=TRACE_WRITE_TIMEOUT_S)

    def _export_nsys(self, outcome: TrialOutcome) -> None:
        try:
            export_nsys_sqlite(self.scenario.profile.nsys, self.profile_dir / "nsys.nsys-rep")
        except Exception as exc:  # noqa: BLE001 - recorded on the trial, the run goes on failing closed
            if outcome.status == "ok":
                outcome.status, outcome.error = "failed", f"nsys: {exc}"

    def _trace_paths(self) -> list[str]:
        return [str(p.relative_to(self.dir)) for p in trace_files(self.profile_dir)]


# ---- trace analysis -----------------------------------------------------------------------------


def analyze_trial_traces(scenario: Scenario, trial_dir: Path, traces: list[str]) -> dict[str, Any]:
    """The TraceAnalysis JSON of one profiled trial's Kineto traces."""
    from harness.traces import analyze_traces

    paths = [trial_dir / t for t in traces if ".trace.json" in t]
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
) -> RunResult:
    """Run every trial of the scenario's plan and write the run directory. Never raises for a failed
    trial or an interruption: the RunResult says what happened. Bad input raises HarnessInputError
    before anything starts."""
    progress = progress or RunProgress()
    scenario = with_run_seed(scenario)  # written into the run's scenario.yaml: the order is reproducible
    plan = plan_trials(scenario, aa=aa)
    commands = describe_commands(scenario, plan, host=host)
    scenario_dir = Path(scenario_path).resolve().parent
    # Prompt files are read (and their errors reported) before any server starts.
    build_prompts(scenario.workload, scenario_dir=scenario_dir)
    if dry_run:
        return RunResult(run_dir=None, status="planned", plan=plan, commands=commands)

    run_dir = new_run_dir(out_root, scenario.name)
    result = RunResult(run_dir=run_dir, status="incomplete", plan=plan, commands=commands)
    (run_dir / "scenario.yaml").write_text(scenario_to_yaml(scenario), encoding="utf-8")
    run_file = _RunFile(run_dir, scenario, plan, aa)
    update_latest_link(run_dir, latest_link_path(out_root))
    progress.run_started(run_dir, plan)
    analysis: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "trials": {}}
    analysis_errors: dict[str, str] = {}
    try:
        with signals_raise_interrupt():
            environment = collect_environment(scenario, variants=sorted({t.config for t in plan}))
            write_json(run_dir / "environment.json", environment)
            for trial in plan:
                outcome = _TrialRunner(scenario, scenario_dir, run_dir, trial, progress, host, port).run()
                result.outcomes.append(outcome)
                run_file.update(trials_done=len(result.outcomes))
                progress.trial_finished(trial, outcome)
                if outcome.status == "failed":
                    result.error = f"trial {trial.dir_name} failed: {outcome.error}"
                    result.log_tail = outcome.log_tail
                    break
                if trial.kind == "profiled" and outcome.traces:
                    try:
                        analysis["trials"][trial.dir_name] = analyze_trial_traces(scenario, run_dir / trial.dir, outcome.traces)
                    except Exception as exc:  # noqa: BLE001 - recorded; checks then lack evidence
                        analysis_errors[trial.dir_name] = f"{type(exc).__name__}: {exc}"
                        analysis["errors"] = analysis_errors
                    write_json(run_dir / "analysis.json", analysis)
            else:
                if analysis_errors:
                    name, message = next(iter(analysis_errors.items()))
                    result.error = f"trace analysis of {name} failed: {message}"
                else:
                    result.status = "complete"
    except KeyboardInterrupt as exc:
        result.interrupted_by = exc.signum if isinstance(exc, Terminated) else 2
        result.error = f"interrupted ({exc})" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"
    except Exception as exc:  # a harness bug: keep the run, the reason and the traceback on disk
        result.error = f"{type(exc).__name__}: {exc} (traceback: {run_dir / 'traceback.txt'})"
        (run_dir / "traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
    run_file.update(status=result.status, error=result.error, finished=_now())
    return result
