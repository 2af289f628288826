"""The run as a library call: run a scenario, check its rules, write its report, and return what
happened as one typed `RunOutcome`.

`harness run` (commands/run.py) only parses its arguments, calls `run_scenario_file` and prints the
outcome; `sglang_spec_harness.testing.run_scenario` is the same call for a test; the points of a
bisection or a sweep (`sglang_spec_harness.points.runner`) call `run_pipeline` with the part of the
plan they run and the run directory whose trials they adopt. Nothing here prints.

Bad input raises HarnessInputError before any server starts; a run that fails, is interrupted or
cannot be checked returns an outcome that says so (`status`, `error`, `interrupted_by`,
`evaluation_error`, `exit_code`). The verdict, the report and the job summary come after the run,
so `verdict` and `report` (imported where they are used) stay out of a dry run's imports.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    InstanceOf,
    SerializerFunctionWrapHandler,
    computed_field,
    field_serializer,
    model_serializer,
)

from sglang_spec_harness.errors import EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_PASS, HarnessInputError, one_line
from sglang_spec_harness.run.execute import DEFAULT_OUT_ROOT, RunResult, run_scenario
from sglang_spec_harness.run.interrupts import signals_raise_interrupt
from sglang_spec_harness.run.plan import Selection
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.rundir import ResultsRecord, RunRecord, SweepPoint, read_record, write_record
from sglang_spec_harness.rundir.schemas import schema_text
from sglang_spec_harness.scenario import Scenario, load_scenario
from sglang_spec_harness.vocabulary import Verdict

# The report's modules (matplotlib) load while the first server comes up, not after the last trial.
REPORT_IMPORTS = ("sglang_spec_harness.report.html",)
# planned: a dry run; complete / incomplete: the run's own status (run.json); bad_input: refused
# before anything started (exit 2)
RunStatus = Literal["planned", "complete", "incomplete", "bad_input"]
# `harness run --json`'s keys in the order it prints them (`plan` last, a dry run's only)
JSON_KEYS = ("schema_version", "scenario", "status", "run_dir", "verdict", "exit_code", "error", "results", "report")


class DryRunPlan(BaseModel):
    """What a dry run would do: its mode, trial and launch directories in run order, each arm's server command."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: str
    trials: list[str]
    launches: list[str]
    commands: dict[str, str]


class RunOutcome(BaseModel):
    """One scenario run, checked and reported (or planned, for a dry run; or refused, for bad input).

    The one model of a run's outcome: the library's callers read its attributes, and its JSON form
    (`model_dump(mode="json")`, `to_json_dict`) is `harness run --json`, whose JSON Schema
    (docs/schemas/run.schema.json, `outcome_json_schema`) is generated from this class. `run`,
    `interrupted_by` and `evaluation_error` stay in memory (the run's own records say them).
    In JSON: `scenario` is the scenario's name; run_dir, results and report are null where the run
    made none (a dry run, bad input, a run that ended before its checks); `results` is results.json
    as written (the same model, dumped the same way); verdict is results' verdict; `plan` is a dry run's only."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_assignment=True)

    schema_version: Literal[1] = 1
    scenario: Scenario | None = Field(description="the scenario's name (null where it could not be read); "
                                      "in memory, the scenario as it ran: overrides applied, the seed fixed")
    status: RunStatus
    run_dir: Path | None = Field(default=None, description="the run directory (null: a dry run, bad input)")
    exit_code: int = Field(description="what `harness run` exits with: 0 PASS, 1 FAIL, 2 bad input (or results "
                           "that cannot be written), 3 INCONCLUSIVE or incomplete, 128 + signal when interrupted")
    error: str | None = Field(default=None, description="why the run did not complete, or why its input was refused")
    results: ResultsRecord | None = Field(
        default=None, description="the rules' results, as the run's results.json holds them (its schema: "
        "results.schema.json); null where the checks did not run")
    report: Path | None = Field(default=None, description="the run's index.html (null where its checks did not run)")
    plan: DryRunPlan | None = Field(default=None, description="a dry run's plan (absent otherwise)")
    # in memory only
    run: InstanceOf[RunResult] | None = Field(default=None, exclude=True)  # the run stage's result (None: bad input)
    interrupted_by: int | None = Field(default=None, exclude=True)  # the signal that ended the run (not checked)
    evaluation_error: str | None = Field(default=None, exclude=True)  # the checks or the report could not be written

    @computed_field  # type: ignore[prop-decorator]  # mypy: a property under pydantic's decorator
    @property
    def verdict(self) -> Verdict | None:
        """The rules' overall verdict (results.json's); null where the checks did not run."""
        return self.results.verdict if self.results is not None else None

    @field_serializer("scenario")
    def _scenario_name(self, scenario: Scenario | None) -> str | None:
        return scenario.name if scenario is not None else None

    @model_serializer(mode="wrap")
    def _as_printed(self, handler: SerializerFunctionWrapHandler):  # no return annotation: pydantic would take it for the schema
        """In `harness run --json`'s order, `plan` only for a dry run."""
        document = handler(self)
        if not isinstance(document, dict):
            return document
        keys = [*JSON_KEYS, *(["plan"] if self.plan is not None else [])]
        return {key: document[key] for key in keys}

    @classmethod
    def bad_input(cls, message: str) -> RunOutcome:
        """What `harness run --json` says when its input is refused (exit 2): the message, nothing run."""
        return cls(scenario=None, status="bad_input", exit_code=EXIT_BAD_INPUT, error=message)

    def to_json_dict(self) -> dict[str, Any]:
        """`harness run --json`: what a CI step reads."""
        return self.model_dump(mode="json")


def outcome_json_schema() -> str:
    """The JSON Schema of `harness run --json`'s object (docs/schemas/run.schema.json), as text: the
    outcome as it is printed (pydantic's serialization mode: the scenario's name, the verdict), and
    its results as results.json's readers accept them (validation mode, as results.schema.json)."""
    schema = RunOutcome.model_json_schema(mode="serialization")
    results = ResultsRecord.model_json_schema(mode="validation")
    schema["$defs"].update({**results.pop("$defs", {}), "ResultsRecord": results})
    return schema_text(schema)


def load_run_scenario(scenario: str | os.PathLike[str], overrides: tuple[str, ...] | list[str] = (),
                      repetitions: int | None = None) -> tuple[Scenario, Path]:
    """The scenario to run and its file: a path, or a shipped scenario's name (e.g. micro_topk1);
    `--set` overrides applied, and `repetitions` (timed trials per variant) when given."""
    from sglang_spec_harness.shipped import scenario_path as resolve_scenario

    path = resolve_scenario(str(scenario))
    loaded = load_scenario(path, list(overrides))
    if repetitions is not None:
        loaded = loaded.model_copy(update={"trials": loaded.trials.model_copy(update={"repetitions": repetitions})})
    return loaded, path


def run_scenario_file(scenario: str | os.PathLike[str], *, overrides: tuple[str, ...] | list[str] = (),
                      repetitions: int | None = None, **options: Any) -> RunOutcome:
    """`run_pipeline` on a scenario file or a shipped scenario's name (`load_run_scenario`)."""
    loaded, path = load_run_scenario(scenario, overrides, repetitions)
    return run_pipeline(loaded, path, **options)


@contextlib.contextmanager
def _naming_the_file(path: Path, name: str) -> Iterator[None]:
    """Engines say `scenario NAME: where: what` (they do not know the file): name the file instead."""
    try:
        yield
    except HarnessInputError as exc:
        prefix = f"scenario {name}: "
        if not str(exc).startswith(prefix):
            raise
        raise HarnessInputError(f"{path}: {str(exc)[len(prefix):]}") from None


def run_pipeline(scenario: Scenario, scenario_path: Path, *, out_root: Path = DEFAULT_OUT_ROOT, aa: bool = False,
                 dry_run: bool = False, progress: RunProgress | None = None, port: int | None = None,
                 select: Selection | None = None, run_dir: Path | None = None, adopt_from: Path | None = None,
                 sweep: SweepPoint | None = None, step_summary: bool = False) -> RunOutcome:
    """Run the scenario (`run.execute.run_scenario`: `select`, `run_dir`, `port` as there), then, once
    the run has a run.json: adopt `adopt_from`'s trials (a run of the same plan made once: a bisection's
    or a sweep's baseline), record the `sweep` point, check the rules and write the report (and append
    the summary to $GITHUB_STEP_SUMMARY when `step_summary`). An interrupted run is neither checked nor
    reported. An interrupt while the checks or the report run is raised (KeyboardInterrupt)."""
    scenario_path = Path(scenario_path)
    with signals_raise_interrupt():
        if dry_run:
            with _naming_the_file(scenario_path, scenario.name):
                planned = run_scenario(scenario, scenario_path, out_root=out_root, aa=aa, dry_run=True, select=select)
            plan = DryRunPlan(mode=planned.mode, trials=[t.dir_name for t in planned.plan],
                              launches=[launch.dir_name for launch in planned.launches],
                              commands={arm: command.shell() for arm, command in planned.commands.items()})
            return RunOutcome(scenario=scenario, status="planned", exit_code=EXIT_PASS, run=planned, plan=plan)
        _require_extras(scenario)
        with _naming_the_file(scenario_path, scenario.name):
            run = run_scenario(scenario, scenario_path, out_root=out_root, aa=aa, progress=progress, port=port,
                               select=select, run_dir=run_dir, also_import=REPORT_IMPORTS)
        outcome = RunOutcome(scenario=scenario, status=run.status, exit_code=EXIT_INCONCLUSIVE, run=run,
                             run_dir=run.run_dir, error=run.error, interrupted_by=run.interrupted_by)
        if run.interrupted_by is not None:  # the checks did not run, also after the last trial
            outcome.exit_code = int(run.exit_code or 130)
            return outcome
        if run.run_dir is None or not (run.run_dir / "run.json").is_file():
            return outcome
        _join(run.run_dir, adopt_from, sweep)
        _evaluate(outcome, run.run_dir, step_summary)
        return outcome


def _require_extras(scenario: Scenario) -> None:
    """Before any server starts: the report comes after the last trial, too late to say it cannot be
    written. A micro engine's servers run in this interpreter unless a variant names another (which
    then needs [micro])."""
    from sglang_spec_harness.extras import require_extras

    in_this_python = scenario.engine == "micro" and not any(v.python for v in scenario.variants.values())
    require_extras(*(["micro"] if in_this_python else []), "report")


def _join(run_dir: Path, adopt_from: Path | None, sweep: SweepPoint | None) -> None:
    """What the caller's run directory holds besides its own trials, before the checks read it."""
    if adopt_from is not None:
        from sglang_spec_harness.run.combine import adopt_trials

        adopt_trials(run_dir, adopt_from)
    if sweep is not None:
        record = read_record(run_dir / "run.json", RunRecord)
        record.sweep = sweep
        write_record(run_dir / "run.json", record)


def _evaluate(outcome: RunOutcome, run_dir: Path, step_summary: bool) -> None:
    """The checks and the report of what was measured: a complete run's verdict decides the exit
    code; an incomplete run stays INCONCLUSIVE (3) whatever its rules say, and a failure to check it
    is only noted (the run's own error is what matters). A complete run whose checks or report cannot
    be written (a full disk): exit 2, the measurements are whole."""
    from sglang_spec_harness.verdict.judge import check_run_dir

    complete = outcome.status == "complete"
    try:
        outcome.results = check_run_dir(run_dir)
        outcome.report = write_report(run_dir, step_summary=step_summary)
    except KeyboardInterrupt:
        raise
    except OSError as exc:
        outcome.evaluation_error = one_line(exc)
        if complete:
            outcome.exit_code = EXIT_BAD_INPUT
        return
    except Exception as exc:
        if complete:
            raise
        outcome.evaluation_error = one_line(exc)
        return
    run_exit = outcome.run.exit_code if outcome.run is not None else None
    outcome.exit_code = int(outcome.results.exit_code) if complete else int(run_exit or EXIT_INCONCLUSIVE)


def write_report(run_dir: Path, *, step_summary: bool = False) -> Path:
    """The run's report (index.html, junit.xml, summary.md) from its stored results; with
    `step_summary`, the summary appended to $GITHUB_STEP_SUMMARY when that is set. Returns index.html."""
    from sglang_spec_harness.report import append_step_summary, build_report

    paths = build_report(run_dir)
    if step_summary:
        append_step_summary(run_dir)
    return paths.html


def check_and_report(run_dir: Path, *, step_summary: bool = False) -> tuple[ResultsRecord, Path]:
    """The rules checked on a stored run (results.json), then its report (`write_report`). Returns
    the results and index.html."""
    from sglang_spec_harness.verdict.judge import check_run_dir

    results = check_run_dir(run_dir)
    return results, write_report(run_dir, step_summary=step_summary)
