"""Reading a run directory back from disk (see docs/internals.md, "The run directory").

The checks and `harness compare` work from these files alone, so that thresholds can change without
rerunning anything. The files are data another machine wrote: read as hostile. Each record is checked
against its model (sglang_spec_harness.rundir.models), so that a damaged file is one clear line naming the file
and field, never a traceback later.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import read_head
from sglang_spec_harness.rundir.models import (
    SCHEMA_VERSION,
    RequestRow,
    RunRecord,
    TrialAnalysis,
    TrialRecord,
    TrialSummary,
)
from sglang_spec_harness.scenario import SCENARIO_END, Scenario, is_whole, load_scenario
from sglang_spec_harness.traces.schema import FileAnalysis

MAX_JSON_BYTES = 256 << 20  # a run's JSON records are KB to a few MB

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


def read_json(path: Path) -> Any:
    data = read_head(path, MAX_JSON_BYTES + 1, "a JSON file")
    if len(data) > MAX_JSON_BYTES:
        raise HarnessInputError(f"{path}: larger than {MAX_JSON_BYTES} bytes: not a record the harness writes")
    try:
        return _parse(data)
    except json.JSONDecodeError as exc:
        raise HarnessInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise HarnessInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise HarnessInputError(f"{path}: not valid JSON ({exc})") from None


def validated(path: Path, model: type[Model], data: Any, where: str = "") -> Model:
    """`data` checked against `model`: the first problem as `FILE: field: message`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in (*([where] if where else []), *err["loc"])) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise HarnessInputError(f"{path}: {loc}: {err['msg']}{more}") from None


def check_schema_version(path: Path, data: Any) -> None:
    version = data.get("schema_version", SCHEMA_VERSION) if isinstance(data, dict) else SCHEMA_VERSION
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise HarnessInputError(
            f"{path}: schema_version {json.dumps(version)[:40]}, this harness reads {SCHEMA_VERSION}: "
            "written by another version of the harness"
        )


def read_record(path: Path, model: type[Model]) -> Model:
    """A JSON record checked against its model (and its schema version, where it has one)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise HarnessInputError(f"{path}: expected a JSON object")
    if "schema_version" in model.model_fields:
        check_schema_version(path, data)
    return validated(path, model, data)


def read_requests(path: Path) -> list[RequestRow]:
    """requests.jsonl, one row per request (warmup rows included, flagged); none if it is missing."""
    rows: list[RequestRow] = []
    if not path.exists():
        return rows
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HarnessInputError(f"{path}: cannot read ({exc})") from None
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
class Trial:
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
    path: Path
    run: RunRecord
    scenario: Scenario
    trials: list[Trial]
    analysis: dict[str, TrialAnalysis]  # trial dir name -> its trace analysis
    environment: dict[str, Any]

    @property
    def complete(self) -> bool:
        return self.run.status == "complete"

    @property
    def aa(self) -> bool:
        return self.run.aa

    @property
    def mode(self) -> str:
        """`restart`, `interleaved` or `sequential` (runs before the warm modes: `restart`)."""
        return self.run.mode or "restart"

    @property
    def warm(self) -> bool:
        return self.mode != "restart"

    def launch_number(self, launch_dir: str | None) -> int | None:
        """A launch's number within its arm (sequential mode: its launch pair), from run.json."""
        for launch in self.run.launches:
            if launch.dir == launch_dir:
                return launch.number
        return None

    def trials_of(self, variant: str, kind: str, *, ok_only: bool = True) -> list[Trial]:
        return [t for t in self.trials if t.variant == variant and t.kind == kind and (t.ok or not ok_only)]

    def analysis_files(self, trial: Trial) -> list[FileAnalysis]:
        """The per-file (per-rank) facts of a profiled trial's trace analysis; none without one."""
        analysis = self.analysis.get(trial.name)
        return list(analysis.files) if analysis is not None else []


def load_run_dir(path: str | Path, *, scenario_path: str | Path | None = None) -> RunDir:
    """Read a run directory; `scenario_path` replaces the stored scenario (new thresholds, same data)."""
    path = Path(path)
    if not path.is_dir():
        raise HarnessInputError(f"{path}: not a run directory (no such directory)")
    run_path = path / "run.json"
    raw_run = read_json(run_path)
    if not isinstance(raw_run, dict) or "plan" not in raw_run:
        raise HarnessInputError(f"{run_path}: not a run record (expected an object with `plan`)")
    check_schema_version(run_path, raw_run)
    run = validated(run_path, RunRecord, raw_run)
    if scenario_path is None:
        scenario_path = path / "scenario.yaml"
        if scenario_path.is_file() and not is_whole(scenario_path):
            raise HarnessInputError(
                f"{scenario_path}: cut short (its last line is not {SCENARIO_END!r}); "
                "give the scenario with --scenario FILE to check the run anyway"
            )
    scenario = load_scenario(scenario_path)
    trials: list[Trial] = []
    trials_dir = path / "trials"
    for trial_json in sorted(trials_dir.glob("*/trial.json")) if trials_dir.is_dir() else []:
        if not inside(path, trial_json):
            raise HarnessInputError(f"{trial_json}: leads outside the run directory (a link?)")
        trials.append(Trial(dir=trial_json.parent, record=validated(trial_json, TrialRecord, read_json(trial_json))))
    trials.sort(key=lambda t: t.record.index)
    analysis = _read_analysis(path / "analysis.json")
    env_path = path / "environment.json"
    environment = read_json(env_path) if env_path.exists() else {}
    if not isinstance(environment, dict):
        raise HarnessInputError(f"{env_path}: expected a JSON object")
    return RunDir(path=path, run=run, scenario=scenario, trials=trials, analysis=analysis, environment=environment)


def _read_analysis(path: Path) -> dict[str, TrialAnalysis]:
    """analysis.json's per-trial sections, each file section checked against the analysis schema."""
    if not path.exists():
        return {}
    document = read_json(path)
    if not isinstance(document, dict):
        raise HarnessInputError(f"{path}: expected a JSON object with `trials`")
    check_schema_version(path, document)
    trials = document.get("trials", {})
    if not isinstance(trials, dict):
        raise HarnessInputError(f"{path}: trials: expected an object (trial directory -> analysis)")
    out: dict[str, TrialAnalysis] = {}
    for name, entry in trials.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("files", []), list):
            raise HarnessInputError(f"{path}: trials.{name}: expected an object with a list `files`")
        out[name] = validated(path, TrialAnalysis, entry, where=f"trials.{name}")
    return out
