"""Reading a run directory back from disk (see docs/internals.md, "The run directory").

The checks, the report and `harness compare` work from these files alone, so that thresholds can
change and reports can be rebuilt without rerunning anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import HarnessInputError
from harness.scenario import Scenario, load_scenario

REQUEST_COLUMNS = [
    "index", "warmup", "prompt_tokens", "completion_tokens", "spec_verify_ct", "ttft_ms", "tpot_ms",
    "e2e_ms", "output_ids", "finish_reason", "error",
]


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HarnessInputError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise HarnessInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def read_requests(path: Path) -> pd.DataFrame:
    """requests.jsonl as a table, one row per request (warmup rows included, flagged)."""
    rows = []
    if path.exists():
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise HarnessInputError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
    frame = pd.DataFrame(rows)
    for column in REQUEST_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.Series(dtype="object")
    return frame


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
    run = read_json(path / "run.json")
    if not isinstance(run, dict) or "plan" not in run:
        raise HarnessInputError(f"{path / 'run.json'}: not a run record (expected an object with `plan`)")
    scenario = load_scenario(scenario_path if scenario_path is not None else path / "scenario.yaml")
    trials: list[Trial] = []
    trials_dir = path / "trials"
    for trial_json in sorted(trials_dir.glob("*/trial.json")) if trials_dir.is_dir() else []:
        info = read_json(trial_json)
        for key in ("variant", "kind"):
            if key not in info:
                raise HarnessInputError(f"{trial_json}: missing field `{key}`")
        trials.append(Trial(dir=trial_json.parent, info=info))
    trials.sort(key=lambda t: t.info.get("index", 0))
    analysis_path = path / "analysis.json"
    analysis = read_json(analysis_path).get("trials", {}) if analysis_path.exists() else {}
    env_path = path / "environment.json"
    environment = read_json(env_path) if env_path.exists() else {}
    return RunDir(path=path, run=run, scenario=scenario, trials=trials, analysis=analysis, environment=environment)
