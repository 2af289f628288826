"""What a bisection is asked and what it found so far: the types that the search (`search.py`) fills
in and the page (`page.py`) and bisect.json show. Apart from both, so that neither imports the other
for them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bisect.git import Commit
from harness.bisect.plan import StepPlan
from harness.errors import EXIT_INCONCLUSIVE, EXIT_PASS
from harness.verdict.verdicts import Verdict

DEFAULT_OUT_ROOT = Path("reports/bisect")


@dataclass(frozen=True)
class BisectRequest:
    scenario_path: Path
    source: Path
    good: str
    bad: str
    variant: str = "candidate"
    rules: tuple[str, ...] = ()
    retries: int = 2  # statistical rules: extra attempts of an INCONCLUSIVE step before it is skipped
    out_root: Path = DEFAULT_OUT_ROOT


@dataclass
class Step:
    number: int
    commit: Commit
    role: str  # "bad revision" (checked first) or "bisection"
    verdict: Verdict
    mark: str  # good / bad / skip
    reason: str
    attempts: list[Path] = field(default_factory=list)  # run directories, the last one decides

    @property
    def run_dir(self) -> Path:
        return self.attempts[-1]

    def to_json_dict(self) -> dict[str, Any]:
        return {"number": self.number, "commit": self.commit.hash, "subject": self.commit.subject,
                "author_date": self.commit.author_date, "role": self.role, "verdict": self.verdict,
                "mark": self.mark, "reason": self.reason, "run_dir": str(self.run_dir),
                "attempts": [str(p) for p in self.attempts]}


@dataclass
class BisectResult:
    request: BisectRequest
    scenario: str
    good: Commit
    bad: Commit
    commits_in_range: int
    rules: list[str]
    plan: StepPlan
    out_dir: Path
    status: str = "running"  # found | not narrowed | bad passes | cannot judge | interrupted | running
    message: str = ""
    first_bad: Commit | None = None
    candidates: list[Commit] = field(default_factory=list)  # not narrowed: the first bad is one of these
    steps: list[Step] = field(default_factory=list)
    baseline_run_dir: Path | None = None
    interrupted_by: int | None = None

    @property
    def max_steps(self) -> int:
        """The steps a search without skips needs at most: ceil(log2 N), plus the bad revision's."""
        return math.ceil(math.log2(self.commits_in_range)) + 1 if self.commits_in_range > 1 else 1

    @property
    def exit_code(self) -> int:
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return EXIT_PASS if self.status == "found" else EXIT_INCONCLUSIVE

    def to_json_dict(self) -> dict[str, Any]:
        commit = lambda c: None if c is None else {"hash": c.hash, "subject": c.subject, "author_date": c.author_date}  # noqa: E731
        return {
            "schema_version": 1, "scenario": self.scenario, "source": str(self.request.source),
            "variant": self.request.variant, "rules": self.rules, "mode": "statistical" if self.plan.statistical else "exact",
            "good": commit(self.good), "bad": commit(self.bad), "commits_in_range": self.commits_in_range,
            "max_steps": self.max_steps, "status": self.status, "message": self.message,
            "first_bad": self.first_bad.hash if self.first_bad else None, "first_bad_commit": commit(self.first_bad),
            "candidates": [commit(c) for c in self.candidates], "steps": [s.to_json_dict() for s in self.steps],
            "baseline_run_dir": str(self.baseline_run_dir) if self.baseline_run_dir else None,
            "out_dir": str(self.out_dir), "report": str(self.out_dir / "index.html"), "exit_code": self.exit_code,
        }
