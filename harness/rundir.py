"""Reading a run directory back from disk (see docs/internals.md, "The run directory").

The checks, the report and `harness compare` work from these files alone, so that thresholds can
change and reports can be rebuilt without rerunning anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessInputError
from harness.scenario import SCENARIO_END, Scenario, is_whole, load_scenario

# The run directory's files are data another machine wrote: read as hostile. Each file's fields
# that the checks use are validated here (unknown fields are kept: newer writers may add some),
# so that a damaged file is one clear line naming the file and field, never a traceback later.
SCHEMA_VERSION = 1
REQUEST_COLUMNS = [
    "index", "warmup", "prompt_tokens", "completion_tokens", "spec_verify_ct", "ttft_ms", "tpot_ms",
    "e2e_ms", "output_ids", "finish_reason", "error",
]
MAX_JSON_BYTES = 256 << 20  # a run's JSON records are KB to a few MB

Int = Annotated[int, Field(strict=True)]
# Counts, times (ms, s) and rates the harness measures: never negative, never astronomically large
# (a TPOT of 1e308 ms would overflow the statistics; 1e12 is 30 years in ms).
Number = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=1e12)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=1e12)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class RunRecord(_Record):
    schema_version: Int = SCHEMA_VERSION
    scenario: str | None = None
    aa: bool = False
    status: str = "unknown"
    error: str | None = None
    mode: Literal["restart", "interleaved", "sequential"] | None = None
    plan: list[dict[str, Any]]
    launches: list[dict[str, Any]] = Field(default_factory=list)


class TrialSummary(_Record):
    requests: Number | None = None
    errors: Number | None = None
    completion_tokens: Number | None = None
    spec_verify_ct: Number | None = None
    accept_length: Positive | None = None
    median_tpot_ms: Positive | None = None
    mean_tpot_ms: Positive | None = None
    median_ttft_ms: Number | None = None
    median_itl_ms: Number | None = None
    output_throughput_tok_s: Number | None = None
    duration_s: Number | None = None


class TrialRecord(_Record):
    index: Int = 0
    variant: str
    config: str | None = None
    kind: str
    launch: str | None = None
    repetition: Int | None = None
    status: str | None = None
    error: str | None = None
    summary: TrialSummary | None = None
    traces: list[str] = Field(default_factory=list)
    server_info: dict[str, Any] = Field(default_factory=dict)


class RequestRow(_Record):
    index: Int
    warmup: bool = False
    output_ids: list[Int] | None = None
    error: str | None = None
    prompt_tokens: Number | None = None
    completion_tokens: Number | None = None
    spec_verify_ct: Number | None = None
    ttft_ms: Number | None = None
    tpot_ms: Number | None = None
    e2e_ms: Number | None = None


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
    try:
        with path.open("rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise HarnessInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise HarnessInputError(f"{path}: is a directory, expected a JSON file") from None
    except OSError as exc:
        raise HarnessInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
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


def validated(path: Path, model: type[BaseModel], data: Any, where: str = "") -> Any:
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


def read_requests(path: Path) -> pd.DataFrame:
    """requests.jsonl as a table, one row per request (warmup rows included, flagged)."""
    rows = []
    if path.exists():
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
            rows.append(validated(Path(f"{path}:{lineno}"), RequestRow, row).model_dump())
    frame = pd.DataFrame(rows)
    for column in REQUEST_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.Series(dtype="object")
    return frame


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
    info: dict[str, Any]
    _requests: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def variant(self) -> str:
        return self.info["variant"]

    @property
    def kind(self) -> str:
        return self.info["kind"]

    @property
    def ok(self) -> bool:
        return self.info.get("status") == "ok"

    @property
    def summary(self) -> dict[str, Any]:
        return self.info.get("summary") or {}

    @property
    def requests(self) -> pd.DataFrame:
        """Measured requests only (warmup excluded)."""
        if self._requests is None:
            frame = read_requests(self.dir / "requests.jsonl")
            if len(frame):
                frame = frame[~frame["warmup"].fillna(False).astype(bool)]
            self._requests = frame.reset_index(drop=True)
        return self._requests


@dataclass
class RunDir:
    path: Path
    run: dict[str, Any]
    scenario: Scenario
    trials: list[Trial]
    analysis: dict[str, Any]  # trial dir name -> TraceAnalysis JSON
    environment: dict[str, Any]

    @property
    def complete(self) -> bool:
        return self.run.get("status") == "complete"

    @property
    def aa(self) -> bool:
        return bool(self.run.get("aa"))

    @property
    def mode(self) -> str:
        """`restart`, `interleaved` or `sequential` (runs before the warm modes: `restart`)."""
        return str(self.run.get("mode") or "restart")

    @property
    def warm(self) -> bool:
        return self.mode != "restart"

    def launch_number(self, launch_dir: str | None) -> int | None:
        """A launch's number within its arm (sequential mode: its launch pair), from run.json."""
        for launch in self.run.get("launches") or []:
            if isinstance(launch, dict) and launch.get("dir") == launch_dir:
                number = launch.get("number")
                return number if isinstance(number, int) else None
        return None

    def trials_of(self, variant: str, kind: str, *, ok_only: bool = True) -> list[Trial]:
        return [t for t in self.trials if t.variant == variant and t.kind == kind and (t.ok or not ok_only)]


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
    run = validated(run_path, RunRecord, raw_run).model_dump()
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
        info = validated(trial_json, TrialRecord, read_json(trial_json)).model_dump()
        trials.append(Trial(dir=trial_json.parent, info=info))
    trials.sort(key=lambda t: t.info["index"])
    analysis = _read_analysis(path / "analysis.json")
    env_path = path / "environment.json"
    environment = read_json(env_path) if env_path.exists() else {}
    if not isinstance(environment, dict):
        raise HarnessInputError(f"{env_path}: expected a JSON object")
    return RunDir(path=path, run=run, scenario=scenario, trials=trials, analysis=analysis, environment=environment)


def _read_analysis(path: Path) -> dict[str, Any]:
    """analysis.json's per-trial sections, each file section checked against the analysis schema."""
    from harness.traces.schema import FileAnalysis

    if not path.exists():
        return {}
    document = read_json(path)
    if not isinstance(document, dict):
        raise HarnessInputError(f"{path}: expected a JSON object with `trials`")
    check_schema_version(path, document)
    trials = document.get("trials", {})
    if not isinstance(trials, dict):
        raise HarnessInputError(f"{path}: trials: expected an object (trial directory -> analysis)")
    out: dict[str, Any] = {}
    for name, entry in trials.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("files", []), list):
            raise HarnessInputError(f"{path}: trials.{name}: expected an object with a list `files`")
        files = [validated(path, FileAnalysis, f, where=f"trials.{name}.files.{i}").model_dump()
                 for i, f in enumerate(entry.get("files", []))]
        out[name] = {**entry, "files": files}
    return out
