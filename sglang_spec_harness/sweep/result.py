"""What a sweep is asked and what it found so far: the types that the sweep (`run.py`) fills in,
sweep.json and the printout show, and the progress hooks it calls. Apart from the sweep itself, so that
`harness sweep` prints them without importing it, and a later merge of shards can read them."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sglang_spec_harness.errors import EXIT_INCONCLUSIVE, EXIT_PASS
from sglang_spec_harness.run.progress import RunProgress

SWEEP_SCHEMA_VERSION = 1
DEFAULT_OUT_ROOT = Path("reports/sweeps")

@dataclass(frozen=True)
class SweepRequest:
    scenario_path: Path
    releases: str | None = None  # `A..B`: SGLang releases from the registry
    source: Path | None = None  # or revisions of a git checkout of SGLang
    revisions: tuple[str, ...] = ()
    variant: str = "candidate"
    rules: tuple[str, ...] = ()  # default: the exact rules that judge the variant
    environments: str = "auto"
    out_root: Path = DEFAULT_OUT_ROOT
    db: str | None = None  # the history database (default as `harness history`); None and ingest=False: none
    ingest: bool = True
    overrides: tuple[str, ...] = ()  # `--set PATH=VALUE` on the scenario
    confirm: bool = False  # `--confirm`: the timing steps run again side by side (sweep/confirm.py)

    @property
    def axis(self) -> str:
        return "sglang_release" if self.releases else "git_revision"


@dataclass
class PointResult:
    position: int
    point: str  # the release, or the full commit hash
    label: str  # the release, or the short commit
    status: str = "pending"  # pending | ran | cannot run | incomplete | interrupted
    reason: str = ""
    verdict: str | None = None
    run_dir: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float | None] = field(default_factory=dict)  # environment, server_start, run
    numbers: dict[str, Any] = field(default_factory=dict)  # what the run measured (sweep.json and the printout)


@dataclass
class SweepResult:
    request: SweepRequest
    scenario: str
    rules: list[str]
    out_dir: Path
    points: list[PointResult]
    environments: str = ""
    baseline_run_dir: Path | None = None
    status: str = "running"  # running | done | cannot judge | interrupted
    message: str = ""
    started: float = field(default_factory=time.time)
    wall_s: float | None = None
    history: dict[str, Any] | None = None  # the sweep's change points, from the history database
    interrupted_by: int | None = None
    notes: list[str] = field(default_factory=list)  # what the sweep changed in the scenario (fixed_design)
    confirmations: list[dict[str, Any]] = field(default_factory=list)  # --confirm: per step and metric

    @property
    def ran(self) -> list[PointResult]:
        return [p for p in self.points if p.status == "ran"]

    @property
    def exit_code(self) -> int:
        """0 when at least two points ran (a series to read); 3 otherwise; 128 + signal when interrupted."""
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return EXIT_PASS if len(self.ran) >= 2 else EXIT_INCONCLUSIVE

    def to_json_dict(self) -> dict[str, Any]:
        request = self.request
        return {
            "schema_version": SWEEP_SCHEMA_VERSION, "scenario": self.scenario, "scenario_path": str(request.scenario_path),
            "axis": request.axis, "range": request.releases, "source": str(request.source) if request.source else None,
            "revisions": list(request.revisions), "variant": request.variant, "rules": self.rules,
            "overrides": list(request.overrides), "notes": self.notes,
            "environments": self.environments, "status": self.status, "message": self.message,
            "points": [asdict(p) for p in self.points],
            "ran": [p.label for p in self.ran], "could_not_run": [{"point": p.label, "why": p.reason}
                                                                 for p in self.points if p.status in ("cannot run", "incomplete")],
            "baseline_run_dir": str(self.baseline_run_dir) if self.baseline_run_dir else None,
            "out_dir": str(self.out_dir), "wall_s": self.wall_s, "history": self.history,
            "confirm": request.confirm, "confirmations": self.confirmations, "exit_code": self.exit_code,
        }


class SweepProgress(Protocol):
    """What a sweep says while it goes. A protocol, so that `harness sweep` prints it
    (`commands/sweep.SweepLines`) without importing this stage; `QuietSweep` says nothing."""

    run: RunProgress  # the trials of each run

    def started(self, result: SweepResult) -> None:
        return None

    def baseline_started(self, run_dir: Path) -> None:
        return None

    def point_started(self, point: PointResult, total: int) -> None:
        return None

    def note(self, text: str) -> None:
        return None

    def point_finished(self, point: PointResult, total: int) -> None:
        return None


class QuietSweep(SweepProgress):
    run = RunProgress()

