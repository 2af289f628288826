"""Reading a run directory back from disk: the one reader (docs/internals.md, "The run directory").

The verdict (`harness check`), `harness compare`, the report and the history all work from these files alone (so that
thresholds can change without rerunning anything), and all through `load_run_dir`: strict for the
verdict (a damaged file is bad input), lenient for the report and the history (a damaged file is
noted, the rest is read). The files are data another machine wrote: read as hostile. Each record is
migrated from its schema version (rundir/migrations.py) and checked against its model
(sglang_spec_harness.rundir.models), under one size cap, so that a damaged file is one clear line
naming the file and field, never a traceback later.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import read_head
from sglang_spec_harness.rundir.migrations import RecordKind, migrate, version_of
from sglang_spec_harness.rundir.models import (
    MAX_NUMBER,
    SCHEMA_VERSION,
    AnalysisRecord,
    EnvironmentRecord,
    LaunchRecord,
    RequestRow,
    ResultsRecord,
    RunRecord,
    TrialAnalysis,
    TrialRecord,
    TrialSummary,
)
from sglang_spec_harness.scenario import (
    SCENARIO_END,
    Scenario,
    is_whole,
    load_scenario,
    read_yaml,
    scenario_from_dict,
    with_paths_resolved,
)
from sglang_spec_harness.traces.schema import FileAnalysis

# The one size cap on a run's files (JSON records, requests.jsonl): they are KB to a few MB.
MAX_FILE_BYTES = 256 << 20
VERSIONED: tuple[RecordKind, ...] = ("run.json", "analysis.json", "environment.json", "results.json")

Model = TypeVar("Model", bound=BaseModel)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of range for a number")
    return value


def _parse(text: str | bytes) -> Any:
    """JSON without NaN/Infinity, written or implied (`1e999`): Python's json takes them, and a NaN
    TPOT would compare false with every bound; nor nesting deep enough to exhaust the stack."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def valid_number(value: Any) -> float | None:
    """A number from a run's file as a float a figure, a sum or a database can take (finite, within
    MAX_NUMBER either way), else None: the readers' one idea of a valid number, as the models'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_NUMBER else None


def _read_capped(path: Path, what: str) -> bytes:
    data = read_head(path, MAX_FILE_BYTES + 1, what)
    if len(data) > MAX_FILE_BYTES:
        raise HarnessInputError(f"{path}: larger than {MAX_FILE_BYTES} bytes: not a record the harness writes")
    return data


def read_json(path: Path) -> Any:
    data = _read_capped(path, "a JSON file")
    try:
        return _parse(data)
    except json.JSONDecodeError as exc:
        raise HarnessInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise HarnessInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise HarnessInputError(f"{path}: not valid JSON ({exc})") from None


def validated(path: Path, model: type[Model], data: Any) -> Model:
    """`data` checked against `model`: the first problem as `FILE: field: message`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise HarnessInputError(f"{path}: {loc}: {err['msg']}{more}") from None


def read_record(path: Path, model: type[Model]) -> Model:
    """A JSON record checked against its model; a versioned one migrated from its schema version."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise HarnessInputError(f"{path}: expected a JSON object")
    if "schema_version" in model.model_fields:
        kind = next((k for k in VERSIONED if k == path.name), None)
        version = version_of(path, data)
        data = migrate(kind, data, version) if kind is not None else data
    return validated(path, model, data)


def read_requests(path: Path) -> list[RequestRow]:
    """requests.jsonl, one row per request (warmup rows included, flagged); none if it is missing."""
    rows: list[RequestRow] = []
    if not path.exists():
        return rows
    try:
        text = _read_capped(path, "requests.jsonl").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = _parse(line)
        except json.JSONDecodeError as exc:
            raise HarnessInputError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        except ValueError as exc:
            raise HarnessInputError(f"{path}:{lineno}: not valid JSON ({exc})") from None
        rows.append(validated(Path(f"{path}:{lineno}"), RequestRow, row))
    return rows


def as_object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object (a dict), else {}: where a run's files are read leniently (the
    report, the history), a damaged or foreign file can hold any type where an object belongs."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` if it is a JSON array (a list), else []: as `as_object`."""
    return value if isinstance(value, list) else []


def inside(base: Path, path: Path) -> bool:
    """Whether `path`, links resolved, lies inside `base`: file names in a run directory come from
    files another process wrote, and must not lead the harness elsewhere."""
    try:
        path.resolve().relative_to(base.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


@dataclass
class StoredTrial:
    """A trial as the run directory holds it: its trial.json and the files beside it (the planned
    entry it came from is sglang_spec_harness.run.plan.Trial)."""

    dir: Path
    record: TrialRecord
    _requests: list[RequestRow] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def variant(self) -> str:
        return self.record.variant

    @property
    def kind(self) -> str:
        return self.record.kind

    @property
    def ok(self) -> bool:
        return self.record.status == "ok"

    @property
    def summary(self) -> TrialSummary:
        """The summary, empty (every number None) when the trial has none."""
        return self.record.summary or TrialSummary()

    @property
    def requests(self) -> list[RequestRow]:
        """Measured requests only (warmup excluded)."""
        if self._requests is None:
            self._requests = [row for row in read_requests(self.dir / "requests.jsonl") if not row.warmup]
        return self._requests


@dataclass
class RunDir:
    """A run directory as typed records, migrated to the current schema version. Read leniently
    (`load_run_dir(strict=False)`), `damaged` says which files could not be read and why; what they
    would have given is left empty (run.json: an empty plan with status `unknown`)."""

    path: Path
    run: RunRecord
    trials: list[StoredTrial]  # every readable trial.json on disk, in index order
    analysis: dict[str, TrialAnalysis]  # trial dir name -> its trace analysis
    environment: EnvironmentRecord | None  # None: no environment.json
    # results.json (`harness check`'s output, so always read leniently: a damaged one is a note even
    # in strict mode, and the next check rewrites it)
    results: ResultsRecord | None = None
    launches: dict[str, LaunchRecord] = field(default_factory=dict)  # run.json launch dir -> launch.json
    analysis_errors: dict[str, str] = field(default_factory=dict)  # trial -> why its analysis failed
    scenario_data: dict[str, Any] = field(default_factory=dict)  # the stored scenario as YAML data, migrated
    # file (relative) -> what is wrong with it, one line naming it: `results.json:3: not valid JSON (...)`
    damaged: dict[str, str] = field(default_factory=dict)
    _scenario: Scenario | None = field(default=None, repr=False)
    _scenario_error: HarnessInputError | None = field(default=None, repr=False)

    @property
    def scenario(self) -> Scenario:
        """The stored scenario, validated; its problem as HarnessInputError where it is not valid (a
        lenient load keeps going without it: `scenario_data` still holds what it says)."""
        if self._scenario is None:
            raise self._scenario_error or HarnessInputError(f"{self.path / 'scenario.yaml'}: no scenario")
        return self._scenario

    @property
    def notes(self) -> list[str]:
        """One line per damaged file."""
        return list(self.damaged.values())

    def problem(self, name: str) -> str | None:
        """What is wrong with a damaged file, without its name (`not valid JSON (...)`); None if it is not."""
        line = self.damaged.get(name)
        return line.removeprefix(name).lstrip(":0123456789 ") if line is not None else None

    @property
    def complete(self) -> bool:
        return self.run.status == "complete"

    @property
    def aa(self) -> bool:
        return self.run.aa

    @property
    def mode(self) -> str:
        """`restart`, `interleaved` or `sequential`."""
        return self.run.mode

    @property
    def warm(self) -> bool:
        return self.mode != "restart"

    def launch_number(self, launch_dir: str | None) -> int | None:
        """A launch's number within its arm (sequential mode: its launch pair), from run.json."""
        for launch in self.run.launches:
            if launch.dir == launch_dir:
                return launch.number
        return None

    def trial(self, name: str) -> StoredTrial | None:
        return next((t for t in self.trials if t.name == name), None)

    def trials_of(self, variant: str, kind: str, *, ok_only: bool = True) -> list[StoredTrial]:
        return [t for t in self.trials if t.variant == variant and t.kind == kind and (t.ok or not ok_only)]

    def analysis_files(self, trial: StoredTrial) -> list[FileAnalysis]:
        """The per-file (per-rank) facts of a profiled trial's trace analysis; none without one."""
        analysis = self.analysis.get(trial.name)
        return list(analysis.files) if analysis is not None else []


RUN_MARKERS = ("run.json", "results.json", "trials")


def is_run_dir(path: Path) -> bool:
    """Whether `path` looks like a run directory (what the lenient readers accept)."""
    return path.is_dir() and any((path / marker).exists() for marker in RUN_MARKERS)


@dataclass
class _Loader:
    """Reads one run directory's files; strict: the first damage raises, lenient: it is noted."""

    path: Path
    strict: bool
    damaged: dict[str, str] = field(default_factory=dict)

    def damage(self, name: str, exc: HarnessInputError, *, always_lenient: bool = False) -> None:
        """Noted as the error's one line with the file named relative to the run directory."""
        if self.strict and not always_lenient:
            raise exc
        self.damaged[name] = name + str(exc).removeprefix(str(self.path / name))

    def record(self, name: str, model: type[Model], *, always_lenient: bool = False) -> Model | None:
        """The record at `name` (relative), migrated and validated; None when it is absent or damaged."""
        path = self.path / name
        if not path.exists() and not path.is_symlink():
            return None
        try:
            if not inside(self.path, path):
                raise HarnessInputError(f"{path}: leads outside the run directory (a link?)")
            return read_record(path, model)
        except HarnessInputError as exc:
            self.damage(name, exc, always_lenient=always_lenient)
            return None


def load_run_dir(path: str | Path, *, strict: bool = True, scenario_path: str | Path | None = None) -> RunDir:
    """Read a run directory. strict (`harness check`, `compare`): any damaged file is a
    HarnessInputError naming it; lenient (the report, the history): each damaged file is noted in
    `RunDir.damaged` and the rest is read. `scenario_path` replaces the stored scenario (new
    thresholds, same data). A path that is not a run directory is bad input either way."""
    path = Path(path)
    if not path.is_dir():
        raise HarnessInputError(f"{path}: not a run directory (no such directory)")
    if not strict and not is_run_dir(path):
        raise HarnessInputError(
            f"{path}: not a run directory (expected run.json, results.json or trials/ written by `harness run`)"
        )
    loader = _Loader(path, strict)
    run, version = _read_run(loader)
    scenario, error, data = _read_scenario(loader, version, scenario_path)
    trials = _read_trials(loader, run)
    analysis = loader.record("analysis.json", AnalysisRecord) or AnalysisRecord()
    launches: dict[str, LaunchRecord] = {}
    for entry in run.launches:
        if entry.dir is not None and (launch := loader.record(f"{entry.dir}/launch.json", LaunchRecord)):
            launches[entry.dir] = launch
    return RunDir(
        path=path, run=run, trials=trials, analysis=analysis.trials, analysis_errors=analysis.errors or {},
        environment=loader.record("environment.json", EnvironmentRecord),
        results=loader.record("results.json", ResultsRecord, always_lenient=True),
        launches=launches, scenario_data=data, damaged=loader.damaged, _scenario=scenario, _scenario_error=error,
    )


def _read_run(loader: _Loader) -> tuple[RunRecord, int]:
    """run.json, and the schema version it was written at (the stored scenario's too)."""
    run_path = loader.path / "run.json"
    try:
        raw = read_json(run_path)
        if not isinstance(raw, dict) or "plan" not in raw:
            raise HarnessInputError(f"{run_path}: not a run record (expected an object with `plan`)")
        version = version_of(run_path, raw)
        return validated(run_path, RunRecord, migrate("run.json", raw, version)), version
    except HarnessInputError as exc:
        if loader.strict:
            raise
        if run_path.exists():
            loader.damage("run.json", exc)
        else:
            loader.damaged["run.json"] = "run.json: missing"
        return RunRecord(plan=[]), SCHEMA_VERSION


def _read_scenario(
    loader: _Loader, version: int, scenario_path: str | Path | None
) -> tuple[Scenario | None, HarnessInputError | None, dict[str, Any]]:
    """The stored scenario (validated, and as YAML data, migrated from the run's schema `version`: it
    has none of its own), or the one given instead."""
    stored = loader.path / "scenario.yaml"
    data: dict[str, Any] = {}
    try:
        if scenario_path is not None:
            scenario = load_scenario(scenario_path)
            return scenario, None, scenario.model_dump(mode="json")
        if not stored.is_file():
            raise HarnessInputError(f"{stored}: no such file")
        raw, node = read_yaml(stored)
        if not isinstance(raw, dict):
            raise HarnessInputError(f"{stored}:1: expected a mapping with `name`, `engine`, `variants`, ...")
        data = migrate("scenario.yaml", raw, version)
    except HarnessInputError as exc:
        if loader.strict:
            raise
        if stored.is_file():
            loader.damage("scenario.yaml", exc)
        else:
            loader.damaged["scenario.yaml"] = "scenario.yaml: missing"
        return None, exc, data
    try:
        if not is_whole(stored):
            raise HarnessInputError(
                f"{stored}: cut short (its last line is not {SCENARIO_END!r}); "
                "give the scenario with --scenario FILE to check the run anyway"
            )
        scenario = with_paths_resolved(scenario_from_dict(data, source=stored, node=node), stored.parent)
    except HarnessInputError as exc:
        if loader.strict:
            raise
        return None, exc, data  # a scenario the report and history can still show: not damage
    return scenario, None, data


def _read_trials(loader: _Loader, run: RunRecord) -> list[StoredTrial]:
    """Every trial.json on disk: where the plan puts each trial (inside the run directory), and any
    other directory under trials/."""
    names = [f"{entry.dir}/trial.json" for entry in run.plan if entry.dir]
    trials_dir = loader.path / "trials"
    names += [p.relative_to(loader.path).as_posix() for p in sorted(trials_dir.glob("*/trial.json"))] \
        if trials_dir.is_dir() else []
    trials: list[StoredTrial] = []
    seen: set[str] = set()
    for name in names:
        rel = Path(os.path.normpath(name))
        if rel.is_absolute() or rel.parts[0] == ".." or rel.parent == Path(".") or str(rel) in seen:
            continue  # a name leading out of the run directory: a planned trial without a record
        seen.add(str(rel))
        path = loader.path / rel  # a link out of the run directory is damage (`_Loader.record`)
        if (record := loader.record(rel.as_posix(), TrialRecord)) is not None:
            trials.append(StoredTrial(dir=path.parent, record=record))
    trials.sort(key=lambda t: t.record.index)
    return trials
