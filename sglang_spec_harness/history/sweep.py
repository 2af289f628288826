"""`harness sweep`: one scenario's candidate at each SGLang release of a range (or each revision of an
SGLang checkout), a run directory and a history point per release, the change points explained.

For every point: the environment (built and cached by a provider, `sglang_spec_harness.releases.environments`),
the variant's trials (its timed blocks and profiled pass), the trials of the other arms that the
rules need adopted from a run made once (the baseline's profiled pass: the control that shows the
analysis can see what the rules count), the exact rules checked, the report, and the run ingested
into the history database, where the sweep's runs form series ordered by release. A point that
cannot run (an environment that cannot be built, a server that does not start) gets one line and
the sweep goes on: its series has a gap there, never a zero.

The sweep's folder (`reports/sweeps/<timestamp>-<scenario>/`):
```
sweep.json          the request, every point so far (status, why, verdict, numbers, times) and, at
                    the end, the change points with their explanations (rewritten after each point)
baseline/           a run directory: the trials that run once
points/<NN>-<label>/   a run directory per point (run.json `sweep` says which point it is)
```
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sglang_spec_harness.bisect.git import Repo, Worktrees
from sglang_spec_harness.bisect.plan import StepPlan, at_commit, choose_rules, paths_inside, step_plan
from sglang_spec_harness.bisect.points import PointRunner, at_release, provider_for
from sglang_spec_harness.engines import server_python
from sglang_spec_harness.errors import EXIT_INCONCLUSIVE, EXIT_PASS, HarnessInputError
from sglang_spec_harness.files import new_stamped_dir, write_json_atomic
from sglang_spec_harness.history.extract import read_run
from sglang_spec_harness.releases.environments import EnvironmentProvider, ReleaseEnvironment, ReleaseUnavailable
from sglang_spec_harness.releases.versions import registry_releases, releases_in_range
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.run.interrupts import interrupt_signum, signals_raise_interrupt
from sglang_spec_harness.run.plan import Selection, with_run_seed
from sglang_spec_harness.rundir import SweepPoint, as_list, as_object, read_json
from sglang_spec_harness.scenario import require_fixed_design, Scenario, load_scenario

SWEEP_SCHEMA_VERSION = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")  # a revision's name in a folder name (origin/main -> origin-main)
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
            "overrides": list(request.overrides),
            "environments": self.environments, "status": self.status, "message": self.message,
            "points": [asdict(p) for p in self.points],
            "ran": [p.label for p in self.ran], "could_not_run": [{"point": p.label, "why": p.reason}
                                                                 for p in self.points if p.status in ("cannot run", "incomplete")],
            "baseline_run_dir": str(self.baseline_run_dir) if self.baseline_run_dir else None,
            "out_dir": str(self.out_dir), "wall_s": self.wall_s, "history": self.history, "exit_code": self.exit_code,
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


def _points(request: SweepRequest, repo: Repo | None) -> list[PointResult]:
    if request.axis == "sglang_release":
        releases = releases_in_range(request.releases or "", registry_releases())
        return [PointResult(position=i, point=r, label=r) for i, r in enumerate(releases)]
    assert repo is not None
    commits = [repo.commit(repo.resolve(rev, "--revisions")) for rev in request.revisions]
    return [PointResult(position=i, point=c.hash, label=f"{rev} ({c.short})" if rev[:12] != c.short else c.short)
            for i, (rev, c) in enumerate(zip(request.revisions, commits, strict=True))]


def prepare(request: SweepRequest) -> tuple[Scenario, Repo | None, SweepResult, StepPlan, Selection]:
    """Every check of the input before anything starts (HarnessInputError: one line, exit 2). Returns
    the scenario (only the chosen rules, one seed), the repository (revisions), the empty result, the
    rules' plan (what runs once) and the trials that run at each point."""
    scenario = load_scenario(request.scenario_path, request.overrides)
    where = str(request.scenario_path)
    require_fixed_design(scenario, where, "sweep")
    if request.variant not in scenario.variants:
        raise HarnessInputError(f"--variant {request.variant}: no such variant in {where} "
                                f"(variants: {', '.join(scenario.variants)})")
    if bool(request.releases) == bool(request.source or request.revisions):
        raise HarnessInputError("give --sglang-releases A..B, or --source REPO --revisions REV...")
    repo: Repo | None = None
    if request.axis == "git_revision":
        if request.source is None or len(request.revisions) < 1:
            raise HarnessInputError("--source REPO needs --revisions REV [REV ...] (in the order to sweep)")
        repo = Repo(request.source)
        if not paths_inside(scenario, request.variant, repo.root):
            raise HarnessInputError(f"{where}: variants.{request.variant}.pythonpath: no entry lies inside {repo.root}, "
                                    "so every revision would run the same code (e.g. pythonpath: [/src/sglang/python])")
    rules = choose_rules(scenario, request.variant, list(request.rules), where)
    scenario = with_run_seed(scenario.model_copy(update={"rules": rules}))
    plan = step_plan(scenario, request.variant, rules, where)
    if plan.statistical:
        raise HarnessInputError("a sweep judges each point by exact rules (kernel_count, output_identity): its points "
                                "run at different times, so an A/B timing rule cannot compare them; TPOT and accept "
                                "length are recorded as series instead")
    # Each point: the rules' trials of the variant, and its timed blocks (TPOT, accept length).
    each: Selection = frozenset({*plan.each_step, (request.variant, "timed"), (request.variant, "profiled")})
    points = _points(request, repo)
    result = SweepResult(request=request, scenario=scenario.name, rules=[r.name for r in rules], out_dir=Path(),
                         points=points)
    return scenario, repo, result, plan, each


def run_sweep(request: SweepRequest, progress: SweepProgress | None = None) -> SweepResult:
    """Sweep; never raises for a point that cannot run or an interruption (the result says so). Bad
    input raises HarnessInputError before anything starts."""
    progress = progress or QuietSweep()
    scenario, repo, result, plan, each = prepare(request)
    provider: EnvironmentProvider | None = None
    if request.axis == "sglang_release":
        provider = provider_for(request.environments, server_python(scenario, request.variant),
                                scenario.variants[request.variant].patches)
        result.environments = provider.name
    else:
        result.environments = "git worktrees"
    engine = _open_history(request)
    result.out_dir = new_stamped_dir(request.out_root, scenario.name, "a sweep folder").resolve()
    progress.started(result)
    sweep = _Sweep(scenario, repo, result, progress, PointRunner(request.scenario_path, plan, progress.run), provider,
                   engine, each)
    started = time.monotonic()
    with signals_raise_interrupt():
        try:
            sweep.save()
            sweep.run(plan.once)
        except KeyboardInterrupt as exc:
            result.interrupted_by = interrupt_signum(exc)
            result.status = "interrupted"
            result.message = f"interrupted ({'Ctrl-C' if result.interrupted_by == 2 else exc})"
            for point in result.points:
                if point.status == "pending" and point.run_dir:
                    point.status, point.reason = "interrupted", result.message
        finally:
            sweep.close()
            result.wall_s = round(time.monotonic() - started, 1)
            sweep.finish()
    return result


def _open_history(request: SweepRequest) -> Any:
    if not request.ingest:
        return None
    from sglang_spec_harness.history.db import open_database

    return open_database(request.db)


class _Sweep:
    def __init__(self, scenario: Scenario, repo: Repo | None, result: SweepResult, progress: SweepProgress,
                 points: PointRunner, provider: EnvironmentProvider | None, engine: Any, each: Selection):
        self.scenario, self.repo, self.result, self.progress = scenario, repo, result, progress
        self.runner, self.provider, self.engine, self.each = points, provider, engine, each
        self.variant = result.request.variant
        self.worktrees = Worktrees(repo) if repo is not None else None

    def close(self) -> None:
        if self.worktrees is not None:
            self.worktrees.close()

    def save(self) -> None:
        write_json_atomic(self.result.out_dir / "sweep.json", self.result.to_json_dict())

    def run(self, once: Selection) -> None:
        result = self.result
        if once:
            run_dir = result.out_dir / "baseline"
            self.progress.baseline_started(run_dir)
            run = self.runner.run_once(self.scenario, run_dir)
            result.baseline_run_dir = run_dir
            if run.status != "complete":
                result.status = "cannot judge"
                result.message = f"the run of the arms that do not change ({run_dir}) failed: {run.error}"
                return
        for point in result.points:
            self.progress.point_started(point, len(result.points))
            self._run_point(point)
            self.save()
            self.progress.point_finished(point, len(result.points))
        result.status = "done"
        result.message = (f"{len(result.ran)} of {len(result.points)} point(s) ran" +
                          (f"; could not run: {', '.join(p.label for p in result.points if p.status != 'ran')}"
                           if len(result.ran) < len(result.points) else ""))

    def _environment(self, point: PointResult) -> Scenario:
        """The scenario at the point; ReleaseUnavailable when the point cannot run here."""
        if self.provider is not None:
            started = time.monotonic()
            environment: ReleaseEnvironment = self.provider.prepare(point.point, self.progress.note)
            point.seconds["environment"] = round(time.monotonic() - started, 1)
            point.environment = environment.facts
            return at_release(self.scenario, self.variant, environment)
        assert self.worktrees is not None and self.repo is not None
        worktree = self.worktrees.add(point.point, f"{point.position:02d}-{point.point[:12]}")
        point.environment = {"provider": "git worktree", "commit": point.point, "worktree": str(worktree)}
        return at_commit(self.scenario, self.variant, self.repo.root, worktree, f"commit {point.label}")

    def _run_point(self, point: PointResult) -> None:
        run_dir = self.result.out_dir / "points" / f"{point.position:02d}-{_SAFE.sub('-', point.label.split()[0])}"
        try:
            scenario = self._environment(point)
        except ReleaseUnavailable as exc:
            point.status, point.reason = "cannot run", str(exc)
            return
        point.run_dir = str(run_dir)
        started = time.monotonic()
        try:
            outcome = self.runner.run_point(
                scenario, run_dir, select=self.each,
                sweep=SweepPoint(sweep=self.result.out_dir.name, axis=self.result.request.axis,
                                 point=point.point, label=point.label, position=point.position,
                                 environment=point.environment))
        finally:
            point.seconds["run"] = round(time.monotonic() - started, 1)
            if self.worktrees is not None:
                for path in list(self.worktrees.paths):
                    self.worktrees.remove(path)
        point.verdict = str(outcome.verdict)
        point.seconds["server_start"] = _server_start_s(run_dir, self.variant)
        if outcome.complete:
            point.status, point.reason = "ran", outcome.reason
            point.numbers = point_numbers(run_dir, self.variant)
        else:
            point.status, point.reason = "cannot run", outcome.reason.removeprefix("run incomplete: ")
        self._ingest(run_dir)

    def _ingest(self, run_dir: Path) -> None:
        if self.engine is None:
            return
        from sglang_spec_harness.history.ingest import ingest

        ingest(self.engine, [run_dir])

    def finish(self) -> None:
        """The change points of the sweep's series (from the history database) and its trend page
        (index.html, history.json), then sweep.json."""
        if self.engine is not None and self.result.ran:
            from sglang_spec_harness.history.page import write_trend_page

            facts = sweep_facts(self.engine, self.result)
            self.result.history = {"series": facts["series"], "change_points": facts["change_points"],
                                   "explanations": facts["explanations"]}
            write_trend_page(facts, self.result.out_dir)
        self.save()


def _server_start_s(run_dir: Path, variant: str) -> float | None:
    """How long the variant's server took to become ready (its first launch)."""
    for launch in sorted((run_dir / "launches").glob(f"*-{variant}-launch*/launch.json")):
        data = as_object(_read(launch))
        value = data.get("startup_s")
        if isinstance(value, (int, float)):
            return round(float(value), 1)
    return None


def _read(path: Path) -> Any:
    try:
        return read_json(path)
    except Exception:  # a damaged record: the numbers are left out, the run directory says why
        return None


def point_numbers(run_dir: Path, variant: str) -> dict[str, Any]:
    """What a point measured, for sweep.json and the printout: per region the scenario's patterns per
    replay and the time per replay (the variant's profiled trials), the median TPOT and accept length
    of its timed blocks, and the output hash."""
    results = as_object(_read(run_dir / "results.json"))
    samples = as_object(as_object(results.get("variants")).get(variant))
    numbers: dict[str, Any] = {}
    for key, name in (("median_tpot_ms", "tpot_ms"), ("accept_length", "accept_length")):
        values = [v for v in as_list(samples.get(key)) if isinstance(v, (int, float))]
        numbers[name] = round(statistics.median(values), 4) if values else None
    regions: dict[str, dict[str, Any]] = {}
    analysis = as_object(as_object(_read(run_dir / "analysis.json")).get("trials"))
    for trial, document in sorted(analysis.items()):
        if f"-{variant}-profiled" not in trial:
            continue
        for file in as_list(as_object(document).get("files")):
            file = as_object(file)
            for region, counts in as_object(file.get("regions")).items():
                entry = regions.setdefault(region, {"replays": 0, "per_replay": {}})
                entry["replays"] += int(as_object(counts).get("units") or 0)
                for pattern, row in as_object(as_object(counts).get("counts")).items():
                    row = as_object(row)
                    if row.get("known") is False:
                        entry["per_replay"][pattern] = None
                        continue
                    low, high = row.get("per_replay_min"), row.get("per_replay_max")
                    entry["per_replay"][pattern] = low if low == high else [low, high]
            for region, timing in as_object(file.get("region_times")).items():
                timing = as_object(timing)
                instances, total = timing.get("instances"), timing.get("robust_time_us") or timing.get("time_us")
                if isinstance(instances, int) and instances > 0 and isinstance(total, (int, float)):
                    regions.setdefault(region, {"replays": 0, "per_replay": {}})["time_per_replay_us"] = round(total / instances, 1)
    numbers["regions"] = regions
    # the hash the history stores (sglang_spec_harness.history.extract), so that sweep.json and the database agree
    record = read_run(run_dir)
    numbers["output_hash"] = next((v.get("output_hash") for v in record.variants if v.get("variant") == variant), None)
    return numbers


def _not_run(result: SweepResult) -> list[dict[str, Any]]:
    """Rows for the points that never got a run directory (their environment could not be built):
    the sweep's page lists every point, with why."""
    name = result.out_dir.name
    return [{"run": f"{p.label} (no run)", "run_key": None, "scenario": result.scenario, "aa": False, "mode": None,
             "status": "cannot run", "reason": p.reason, "started": None, "verdict": None, "hardware": "–",
             "sglang_version": p.point if result.request.axis == "sglang_release" else None, "sglang_commit": None,
             "harness_commit": None, "path": None, "report": None, "sweep": name, "sweep_axis": result.request.axis,
             "sweep_point": p.point, "sweep_label": p.label, "sweep_position": p.position}
            for p in result.points if p.status == "cannot run" and p.run_dir is None]


def sweep_facts(engine: Any, result: SweepResult) -> dict[str, Any]:
    """The history facts of this sweep alone (its series, change points and their explanations, its
    runs): what its trend page shows and sweep.json carries."""
    from sglang_spec_harness.history.analyze import history_facts

    facts = history_facts(engine, scenarios=[result.scenario])
    name = result.out_dir.name
    series = [s for s in facts["series"] if s.get("sweep") == name]
    ids = {s["series"] for s in series}
    points = [c for c in facts["change_points"] if c["series"] in ids]
    used = {c.get("explanation") for c in points}
    explanations = facts.get("explanations") or {}
    if isinstance(explanations, dict):
        explanations = {k: v for k, v in explanations.items() if k in used}
    else:
        explanations = [e for e in explanations if e.get("id") in used]
    return {**facts, "series": series, "change_points": points, "explanations": explanations,
            "run_list": [r for r in facts["run_list"] if r.get("sweep") == name] + _not_run(result),
            "sweeps": [w for w in facts.get("sweeps") or [] if w.get("sweep") == name or w.get("name") == name],
            "damaged": [d for d in facts["damaged"] if Path(d.get("path") or "").parent.parent.name == name]}
