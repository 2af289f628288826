"""What a sweep is asked and what it found so far: the types that the sweep (`run.py`) fills in,
sweep.json and the printout show, and the progress hooks it calls. Apart from the sweep itself, so that
`harness sweep` prints them without importing it, and the merge of shards (`merge.py`) fills them in too."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sglang_spec_harness.errors import EXIT_INCONCLUSIVE, EXIT_PASS
from sglang_spec_harness.files import write_json_atomic
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.sweep.shards import Shard

# 2: name, part, shard, scenario_sha256, seed, harness, baseline (a sweep spread over runners)
SWEEP_SCHEMA_VERSION = 2
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
    baseline_only: bool = False  # `harness sweep baseline`: the trials that run once, for the shards to adopt
    shard: Shard | None = None  # `--shard I/N`: this share of the points only
    baseline_from: Path | None = None  # with `shard`: the folder `harness sweep baseline` wrote

    @property
    def axis(self) -> str:
        return "sglang_release" if self.releases else "git_revision"

    @property
    def part(self) -> str:
        """What the folder holds of the sweep: whole | baseline | shard (merged: `merge.py`)."""
        return "baseline" if self.baseline_only else "shard" if self.shard is not None else "whole"


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
    # What makes folders parts of one sweep (`shards.IDENTITY_FIELDS`): its name (the runs' `sweep`,
    # the folder's name unless it is a part of a sharded sweep), the scenario as run, the harness.
    name: str = ""
    part: str = "whole"  # whole | baseline | shard | merged
    scenario_sha256: str = ""
    seed: int | None = None
    harness: dict[str, Any] = field(default_factory=dict)  # version, git_commit
    baseline: dict[str, Any] = field(default_factory=dict)  # id, from (the baseline step's folder), wall_s
    sweep_points: list[dict[str, Any]] = field(default_factory=list)  # a shard's: every point of the sweep
    shards: list[dict[str, Any]] = field(default_factory=list)  # a merged sweep's: each shard merged
    missing_shards: list[int] = field(default_factory=list)  # a partial merge's

    @property
    def ran(self) -> list[PointResult]:
        return [p for p in self.points if p.status == "ran"]

    @property
    def exit_code(self) -> int:
        """0 when at least two points ran (a series to read; a shard: one of its own, the merge reads
        the series; the baseline step: its run completed); 3 otherwise; 128 + signal when interrupted."""
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        if self.part == "baseline":
            return EXIT_PASS if self.status == "done" else EXIT_INCONCLUSIVE
        return EXIT_PASS if len(self.ran) >= (1 if self.part == "shard" else 2) else EXIT_INCONCLUSIVE

    def save(self) -> None:
        write_json_atomic(self.out_dir / "sweep.json", self.to_json_dict())

    def _parts(self) -> dict[str, Any]:
        shard = self.request.shard
        return {
            "name": self.name or self.out_dir.name, "part": self.part,
            "shard": {"index": shard.index, "count": shard.count, "sweep_points": self.sweep_points} if shard else None,
            "scenario_sha256": self.scenario_sha256, "seed": self.seed, "harness": self.harness,
            "baseline": self.baseline, "shards": self.shards, "missing_shards": self.missing_shards,
        }

    def to_json_dict(self) -> dict[str, Any]:
        request = self.request
        return {
            "schema_version": SWEEP_SCHEMA_VERSION, **self._parts(),
            "scenario": self.scenario, "scenario_path": str(request.scenario_path),
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

