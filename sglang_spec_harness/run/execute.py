"""`run_scenario`: the plan, the server launches, the workload, the profiler, the trace analysis;
every artifact written to the run directory as soon as it exists (layout: docs/internals.md).

In `restart` mode every trial starts its own server (its trial directory holds the server.log); in
the warm modes (`interleaved`, `sequential`) a launch serves many trials (blocks and profiled passes)
and has a directory of its own under `launches/`.

A run that dies (an exception, Ctrl-C, SIGTERM, SIGHUP, a failed trial or launch, a run directory that
cannot be written) keeps what it had, marks run.json `incomplete` with the reason and stops every
server it started. The first failure ends the run: with one arm's sample missing, nothing can be
concluded (exit 3, INCONCLUSIVE, in `harness run`). Interrupts are held back while a trial's records
are written and its server stopped (`sglang_spec_harness.run.interrupts`), and an interrupt is reported as one
whatever it tore down on its way (requests in flight, a trace being written).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sglang_spec_harness.engines import ServerCommand, build_server_command, keep_off_cpus, server_cpus
from sglang_spec_harness.errors import EXIT_INCONCLUSIVE
from sglang_spec_harness.files import Reserve, WriteError, latest_link_path, new_stamped_dir, update_latest_link, write_text_atomic
from sglang_spec_harness.run.environment import collect_environment, require_engine, require_interpreters
from sglang_spec_harness.run.interrupts import (
    interrupt_received,
    interrupt_text,
    interrupts_allowed,
    interrupts_held,
    raise_if_interrupted,
    signals_raise_interrupt,
)
from sglang_spec_harness.run.launch import Launches, TrialFailed
from sglang_spec_harness.run import adaptive
from sglang_spec_harness.run.plan import Launch, Plan, Selection, Trial, extend, make_plan, with_run_seed
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.run.server import LOOPBACK, do_while_waiting, drop_waiting_work, run_waiting_work
from sglang_spec_harness.run.outcome import TrialOutcome
from sglang_spec_harness.run.trial import TrialRunner, analyze_trial_traces
from sglang_spec_harness.run.workload import build_prompts
from sglang_spec_harness.rundir import (
    SCHEMA_VERSION,
    AnalysisRecord,
    EnvironmentRecord,
    RecordFile,
    RunRecord,
    now,
    write_record,
)
from sglang_spec_harness.rundir.models import LookRecord
from sglang_spec_harness.scenario import Scenario, scenario_to_yaml

DEFAULT_OUT_ROOT = Path("reports/runs")
# What a run imports after its first trial (the trace analysis, a look's rules: scipy, pandas), imported
# while the first server comes up, where the harness waits anyway (run.server.do_while_waiting): a run
# that FAILs on its first profile would otherwise wait ~1.2 s for them. Before the first timed trial
# at the latest (the client's CPU).
RUN_IMPORTS = ("sglang_spec_harness.traces.analysis", "sglang_spec_harness.verdict.judge")


# ---- results ------------------------------------------------------------------------------------


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
        """128 + signal when interrupted (130 for Ctrl-C, also after the last trial: the rules were
        not judged); None when the run completed (the rules decide); 3 otherwise."""
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        if self.status != "incomplete":
            return None
        return EXIT_INCONCLUSIVE


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
    select: Selection | None = None,
    run_dir: Path | None = None,
    also_import: Sequence[str] = (),
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
    # Each variant's interpreter, asked once (~0.1 s: torch is not imported): recorded in
    # environment.json, and checked before any server starts (a missing SGLang, or the wrong version,
    # is bad input: exit 2, not a failed launch).
    variants = sorted({t.config for t in plan.trials})
    require_interpreters(scenario, variants)
    environment = collect_environment(scenario, variants=variants)
    require_engine(scenario, environment)
    with signals_raise_interrupt(), keep_off_cpus(server_cpus(scenario)):
        do_while_waiting(functools.partial(_import_quietly, (*RUN_IMPORTS, *also_import)))
        run = _Run(scenario, scenario_dir, plan, result, progress=progress, out_root=out_root, aa=aa, host=host,
                   port=port, run_dir=run_dir, environment=environment)
        # Interrupts raise only inside `interrupts_allowed()`: the bookkeeping around it always runs.
        with interrupts_held():
            failure: str | None = None
            try:
                with interrupts_allowed():
                    run.trials()
            except KeyboardInterrupt:
                pass  # recorded: interrupt_received()
            except WriteError as exc:  # the run directory cannot be written: the run stops
                failure = str(exc)
            except Exception as exc:  # a harness bug: keep the run, the reason and the traceback on disk
                failure = run.harness_bug(exc)
            run.finish(failure)
        result.interrupted_by = interrupt_received()
    return result


def _import_quietly(names: Sequence[str]) -> None:
    """Import ahead of need; a module that fails is left to the import that needs it, which says why."""
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


class _Run:
    """The state of one run while it goes: run.json, the analysis, the warm launches."""

    def __init__(self, scenario: Scenario, scenario_dir: Path, plan: Plan, result: RunResult, *,
                 progress: RunProgress, out_root: Path, aa: bool, host: str, port: int | None,
                 environment: EnvironmentRecord, run_dir: Path | None = None):
        self.scenario, self.scenario_dir, self.plan, self.result = scenario, scenario_dir, plan, result
        self.given_run_dir = run_dir
        self.environment = environment
        self.progress, self.out_root, self.aa, self.host, self.port = progress, out_root, aa, host, port
        self.started = time.monotonic()
        self.run_json: RecordFile[RunRecord] | None = None
        self.reserve: Reserve | None = None
        self.launches: Launches | None = None
        self.analysis = AnalysisRecord(schema_version=SCHEMA_VERSION, trials={})
        self.analysis_errors: dict[str, str] = {}
        # the adaptive design (trials.budget): its looks so far, and what the next one needs to know
        self.looks: list[LookRecord] = []
        self.rounds_looked = 0
        self.stage_started = time.monotonic()
        self.launch_s = 0.0  # the longest bring-up of launches seen: what adding one would cost

    def trials(self) -> None:
        scenario, plan, result = self.scenario, self.plan, self.result
        try:
            if self.given_run_dir is None:
                run_dir = new_stamped_dir(self.out_root, scenario.name, "a run directory")
            else:
                run_dir = self.given_run_dir
                run_dir.mkdir(parents=True)  # never write into an existing run
        except OSError as exc:
            where = self.given_run_dir or f"a run directory under {self.out_root}"
            raise WriteError(f"cannot create {where}: {exc.strerror or exc}", path=where, cause=exc) from None
        result.run_dir = run_dir
        write_text_atomic(run_dir / "scenario.yaml", scenario_to_yaml(scenario))
        self.run_json = RecordFile(run_dir / "run.json", RunRecord(
            schema_version=SCHEMA_VERSION, scenario=scenario.name, aa=self.aa, status="running", error=None,
            started=now(), finished=None, **plan.record_fields(), trials_done=0,
        ))
        self.reserve = Reserve(run_dir)
        if self.given_run_dir is None:
            update_latest_link(run_dir, latest_link_path(self.out_root))
        self.progress.run_started(run_dir, plan.trials)
        self.launches = Launches(scenario, self.scenario_dir, run_dir, plan, self.progress, self.host, self.port)
        write_record(run_dir / "environment.json", self.environment)
        position = -1
        while position + 1 < len(plan.trials):  # an adaptive run's plan grows at its looks
            position += 1
            trial = plan.trials[position]
            bring_up = time.monotonic()
            launches_before = len(self.launches.running)
            try:
                server = self.launches.serving(trial)
            except TrialFailed as exc:
                raise_if_interrupted()  # an interrupt that tore the start-up down is what ended it
                result.error = f"server launch failed: {exc}"
                result.log_tail = exc.log_tail
                return
            if trial.kind == "timed":
                run_waiting_work()
            launch = plan.launch_of(trial)
            try:
                outcome = TrialRunner(scenario, self.scenario_dir, run_dir, trial, self.progress, self.host,
                                      self.port, server, launch.dir if launch else None, self.reserve).run()
            except WriteError as exc:
                raise WriteError(f"trial {trial.dir_name} failed: {exc}", path=exc.filename, cause=exc) from None
            result.outcomes.append(outcome)
            self.run_json.update(trials_done=len(result.outcomes))
            self.progress.trial_finished(trial, outcome)
            if outcome.status == "failed":
                result.error = f"trial {trial.dir_name} failed: {outcome.error}"
                result.log_tail = outcome.log_tail
                return
            if trial.kind == "profiled" and outcome.traces:
                self._analyze(trial, outcome)
            if len(self.launches.running) > launches_before:
                took = (outcome.summary.duration_s if outcome.summary else None) or 0.0
                self.launch_s = max(self.launch_s, time.monotonic() - bring_up - took)
            if scenario.trials.budget is not None and not self._look(position):
                break
            self.launches.done_with(position)  # after an adaptive run's look: a stage may go on with them
        if self.analysis_errors:
            name, message = next(iter(self.analysis_errors.items()))
            result.error = f"trace analysis of {name} failed: {message}"
        else:
            result.status = "complete"

    def _look(self, position: int) -> bool:
        """An adaptive run (trials.budget) at the end of a stage: look, record it, and grow the plan
        when the look says so. False: stop here (the plan ends at this trial)."""
        assert self.result.run_dir is not None and self.run_json is not None
        plan, scenario, run_dir = self.plan, self.scenario, self.result.run_dir
        trials = plan.trials
        last_profiled = max((i for i, t in enumerate(trials) if t.kind == "profiled"), default=None)
        elapsed = time.monotonic() - self.started
        if trials[position].kind == "profiled":
            # After every profiled pass: a kernel rule that FAILs on the passes so far is certain.
            if self.analysis_errors:
                return True  # the rules report it; the exact look has no evidence to judge
            look, nxt = adaptive.exact_look(run_dir, scenario, elapsed)
            if not nxt.stop and position != last_profiled:
                return True
        elif position == len(trials) - 1:
            rounds = 1 + max(t.repetition for t in trials if t.kind == "timed")
            stage_rounds = rounds - self.rounds_looked
            per_round = (time.monotonic() - self.stage_started) / max(1, stage_rounds)
            per_arm = 1 + max(launch.number for launch in plan.launches)
            look, nxt = adaptive.tpot_look(run_dir, scenario, self.looks, rounds=rounds, launches_per_arm=per_arm,
                                           elapsed_s=elapsed, per_round_s=per_round, launch_s=self.launch_s)
            self.rounds_looked = rounds
        else:
            return True
        self.looks.append(look)
        self.progress.note(f"look {len(self.looks)}: {look.action}: {look.reason}")
        self.stage_started = time.monotonic()
        if not nxt.stop and position == len(trials) - 1:
            extend(plan, scenario, aa=self.aa, rounds=nxt.rounds, launches_per_arm=nxt.launches_per_arm)
        self.run_json.update(looks=list(self.looks), **plan.record_fields())
        if nxt.stop and position < len(trials) - 1:
            del plan.trials[position + 1:]  # the rounds planned with the first stage never run
            used = {t.launch for t in plan.trials}
            plan.launches[:] = [launch for launch in plan.launches if launch.index in used]
            self.run_json.update(**plan.record_fields())
        return not nxt.stop

    def _analyze(self, trial: Trial, outcome: TrialOutcome) -> None:
        assert self.result.run_dir is not None
        try:
            self.analysis.trials[trial.dir_name] = analyze_trial_traces(
                self.scenario, self.result.run_dir / trial.dir, outcome.traces)
        except Exception as exc:  # recorded; the rules then lack evidence
            self.analysis_errors[trial.dir_name] = f"{type(exc).__name__}: {exc}"
            self.analysis.errors = self.analysis_errors
        write_record(self.result.run_dir / "analysis.json", self.analysis)

    def harness_bug(self, exc: Exception) -> str:
        """The reason of an unexpected exception; its traceback goes to traceback.txt when it can."""
        text = f"{type(exc).__name__}: {exc}"
        run_dir = self.result.run_dir
        if run_dir is not None:
            try:
                write_text_atomic(run_dir / "traceback.txt", traceback.format_exc())
                text += f" (traceback: {run_dir / 'traceback.txt'})"
            except OSError:
                pass
        return text

    def finish(self, failure: str | None) -> None:
        """Stop every server, then the final run.json (interrupts are held here)."""
        result = self.result
        if (failure is not None or result.status != "complete") and self.reserve is not None:
            self.reserve.release()  # room for the last records, if the disk is what failed
        drop_waiting_work()  # a run that ended before its first server came up
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
        if self.run_json is None:
            return
        outcomes = result.outcomes
        measured = sum((o.summary.duration_s if o.summary else None) or 0.0
                       for o in outcomes if o.trial.kind == "timed")
        launches = len(self.launches.started) if self.launches is not None else 0
        try:
            self.run_json.update(status=result.status, error=result.error, finished=now(),
                                 wall_s=round(time.monotonic() - self.started, 3), measured_s=round(measured, 3),
                                 server_launches=launches + sum(1 for o in outcomes if o.trial.launch is None))
        except WriteError as exc:  # run.json keeps its last version (`running`): never read as complete
            result.status = "incomplete"
            result.error = f"{result.error}; {exc}" if result.error else str(exc)
