"""What a bisection is asked and what it found so far: the types that the search (`search.py`) fills
in and the page (`page.py`) and bisect.json show. Apart from both, so that neither imports the other
for them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_spec_harness.points.git import Commit
from sglang_spec_harness.points.plan import PointPlan
from sglang_spec_harness.points.reuse import StoredPoint
from sglang_spec_harness.errors import EXIT_INCONCLUSIVE, EXIT_PASS
from sglang_spec_harness.vocabulary import PASS, Verdict

DEFAULT_OUT_ROOT = Path("reports/bisect")


@dataclass(frozen=True)
class Release:
    """A release as a point of the search: the same face as a `Commit` for the page and the printout."""

    version: str

    @property
    def hash(self) -> str:
        return self.version

    @property
    def short(self) -> str:
        return self.version

    @property
    def subject(self) -> str:
        return f"SGLang {self.version}"

    @property
    def author_date(self) -> str:
        return ""


Point = Commit | Release


@dataclass(frozen=True)
class BisectRequest:
    scenario_path: Path
    source: Path | None = None  # git: the repository, with good and bad revisions
    good: str | None = None
    bad: str | None = None
    variant: str = "candidate"
    rules: tuple[str, ...] = ()
    retries: int = 2  # statistical rules: extra attempts of an INCONCLUSIVE step before it is skipped
    out_root: Path = DEFAULT_OUT_ROOT
    releases: str | None = None  # releases: `A..B` instead of a repository
    environments: str = "auto"  # releases: which provider builds each release's environment
    reuse: tuple[Path, ...] = ()  # sweep folders whose points may stand for runs (sglang_spec_harness.points.reuse)
    overrides: tuple[str, ...] = ()  # `--set PATH=VALUE` on the scenario

    @property
    def axis(self) -> str:
        return "releases" if self.releases else "git"


@dataclass
class Step:
    number: int
    commit: Point
    role: str  # git: "bad revision" (checked first) or "bisection"; releases: "oldest", "newest", "bisection"
    verdict: Verdict
    mark: str  # good / bad / skip
    reason: str
    attempts: list[Path] = field(default_factory=list)  # run directories, the last one decides
    reused_from: Path | None = None  # judged from this stored run of `--reuse` (no server started)

    @property
    def run_dir(self) -> Path | None:
        """The run directory that decides (None before the first attempt starts)."""
        return self.attempts[-1] if self.attempts else None

    def to_json_dict(self) -> dict[str, Any]:
        point = ({"release": self.commit.version} if isinstance(self.commit, Release) else
                 {"commit": self.commit.hash, "subject": self.commit.subject, "author_date": self.commit.author_date})
        return {"number": self.number, **point, "role": self.role, "verdict": self.verdict,
                "mark": self.mark, "reason": self.reason, "run_dir": str(self.run_dir) if self.run_dir else None,
                "attempts": [str(p) for p in self.attempts],
                "reused_from": str(self.reused_from) if self.reused_from else None}


@dataclass
class BisectResult:
    request: BisectRequest
    scenario: str
    good: Point  # releases: the oldest of the range
    bad: Point  # releases: the newest
    commits_in_range: int  # releases: the releases in the range
    rules: list[str]
    plan: PointPlan
    out_dir: Path
    # found | not narrowed | bad passes | no change (releases) | cannot judge | interrupted | running
    status: str = "running"
    message: str = ""
    first_bad: Point | None = None  # releases: the first release whose verdict is the newest one's
    candidates: list[Point] = field(default_factory=list)  # not narrowed: the first bad is one of these
    releases: list[str] = field(default_factory=list)  # releases: the range, oldest first
    # releases: the verdicts at the two ends, oldest first (e.g. FAIL then PASS: the first release
    # that passes is searched for, the fix); None until judged
    terms: tuple[Verdict, Verdict] | None = None
    steps: list[Step] = field(default_factory=list)
    baseline_run_dir: Path | None = None
    interrupted_by: int | None = None
    stored: dict[str, StoredPoint] = field(default_factory=dict)  # `--reuse`: point -> a run that may stand for it
    notes: list[str] = field(default_factory=list)  # what the bisection changed in the scenario (fixed_design)

    @property
    def max_steps(self) -> int:
        """The steps a search without skips needs at most: ceil(log2 N), plus the bad revision's (git)
        or both ends' (releases: the direction of the change is not known before they are judged)."""
        if self.request.axis == "releases":
            return math.ceil(math.log2(max(self.commits_in_range - 1, 1))) + 2 if self.commits_in_range > 1 else 1
        return math.ceil(math.log2(self.commits_in_range)) + 1 if self.commits_in_range > 1 else 1

    @property
    def found_word(self) -> str:
        """How the found point is named: `first bad commit`, or for releases what changed to what."""
        if self.request.axis != "releases":
            return "first bad commit"
        if self.terms is not None and self.terms[1] == PASS:
            return "first release that passes"
        return "first bad release"

    @property
    def exit_code(self) -> int:
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return EXIT_PASS if self.status == "found" else EXIT_INCONCLUSIVE

    def to_json_dict(self) -> dict[str, Any]:
        commit = lambda c: None if c is None else {"hash": c.hash, "subject": c.subject, "author_date": c.author_date}  # noqa: E731
        common = {
            "schema_version": 1, "scenario": self.scenario, "axis": self.request.axis,
            "variant": self.request.variant, "rules": self.rules, "mode": "statistical" if self.plan.statistical else "exact",
            "max_steps": self.max_steps, "status": self.status, "message": self.message,
            "steps": [s.to_json_dict() for s in self.steps],
            "baseline_run_dir": str(self.baseline_run_dir) if self.baseline_run_dir else None,
            "out_dir": str(self.out_dir), "report": str(self.out_dir / "index.html"), "exit_code": self.exit_code,
            "reuse": [str(p) for p in self.request.reuse], "overrides": list(self.request.overrides),
            "notes": self.notes,
        }
        if self.request.axis == "releases":
            return {**common, "releases": self.releases, "environments": self.request.environments,
                    "oldest": self.good.hash, "newest": self.bad.hash,
                    "verdicts_at_ends": list(self.terms) if self.terms else None, "found": self.found_word,
                    "first_changed_release": self.first_bad.hash if self.first_bad else None,
                    "candidates": [c.hash for c in self.candidates]}
        return {**common, "source": str(self.request.source), "good": commit(self.good), "bad": commit(self.bad),
                "commits_in_range": self.commits_in_range,
                "first_bad": self.first_bad.hash if self.first_bad else None, "first_bad_commit": commit(self.first_bad),
                "candidates": [commit(c) for c in self.candidates]}
