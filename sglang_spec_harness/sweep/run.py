"""`harness sweep`: one scenario's candidate at each SGLang release of a range (or each revision of an
SGLang checkout), a run directory and a history point per release, the change points explained.

For every point: the environment (built and cached by a provider, `sglang_spec_harness.releases.environments`),
the variant's trials (its timed blocks and profiled pass), the trials of the other arms that the
rules need adopted from a run made once (the baseline's profiled pass: the control that shows the
analysis can see what the rules count), the exact rules checked, the report, and the run ingested
into the history database, where the sweep's runs form series ordered by release. A point that
cannot run (an environment that cannot be built, a server that does not start) gets one line and
the sweep goes on: its series has a gap there, never a zero. A point's run depends on nothing but the
scenario, its own environment and the baseline's trials (`_Sweep.run_point`): the points before it
change nothing in it, so any subset of the points can run apart.

The sweep's folder (`reports/sweeps/<timestamp>-<scenario>/`):
```
sweep.json          the request, every point so far (status, why, verdict, numbers, times) and, at
                    the end, the change points with their explanations (rewritten after each point)
baseline/           a run directory: the trials that run once
points/<NN>-<label>/   a run directory per point (run.json `sweep` says which point it is)
```
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sglang_spec_harness.engines import server_python
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import new_stamped_dir, write_json_atomic
from sglang_spec_harness.points.git import Repo, Worktrees
from sglang_spec_harness.points.plan import PointPlan, choose_rules, fixed_design, point_plan
from sglang_spec_harness.points.runner import PointRunner
from sglang_spec_harness.points.scenario_at import at_commit, at_release, paths_inside, provider_for
from sglang_spec_harness.releases.environments import EnvironmentProvider, ReleaseEnvironment, ReleaseUnavailable
from sglang_spec_harness.releases.versions import registry_releases, releases_in_range
from sglang_spec_harness.run.interrupts import interrupt_signum, signals_raise_interrupt
from sglang_spec_harness.run.plan import Selection, with_run_seed
from sglang_spec_harness.rundir import SweepPoint
from sglang_spec_harness.scenario import Scenario, load_scenario
from sglang_spec_harness.sweep.facts import sweep_facts
from sglang_spec_harness.sweep.measured import point_numbers, server_start_s
from sglang_spec_harness.sweep.result import PointResult, QuietSweep, SweepProgress, SweepRequest, SweepResult

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")  # a revision's name in a folder name (origin/main -> origin-main)


def _points(request: SweepRequest, repo: Repo | None) -> list[PointResult]:
    if request.axis == "sglang_release":
        releases = releases_in_range(request.releases or "", registry_releases())
        return [PointResult(position=i, point=r, label=r) for i, r in enumerate(releases)]
    assert repo is not None
    commits = [repo.commit(repo.resolve(rev, "--revisions")) for rev in request.revisions]
    return [PointResult(position=i, point=c.hash, label=f"{rev} ({c.short})" if rev[:12] != c.short else c.short)
            for i, (rev, c) in enumerate(zip(request.revisions, commits, strict=True))]


def prepare(request: SweepRequest) -> tuple[Scenario, Repo | None, SweepResult, PointPlan, Selection]:
    """Every check of the input before anything starts (HarnessInputError: one line, exit 2). Returns
    the scenario (only the chosen rules, one seed), the repository (revisions), the empty result, the
    rules' plan (what runs once) and the trials that run at each point."""
    scenario = load_scenario(request.scenario_path, request.overrides)
    where = str(request.scenario_path)
    if request.variant not in scenario.variants:
        raise HarnessInputError(f"--variant {request.variant}: no such variant in {where} "
                                f"(variants: {', '.join(scenario.variants)})")
    if bool(request.releases) == bool(request.source or request.revisions):
        raise HarnessInputError("give --sglang-releases A..B, or --source REPO --revisions REV...")
    if request.confirm and not request.ingest:
        raise HarnessInputError("--confirm reads the sweep's series from the history database and keeps what it "
                                "finds there: drop --no-history")
    repo: Repo | None = None
    if request.axis == "git_revision":
        if request.source is None or len(request.revisions) < 1:
            raise HarnessInputError("--source REPO needs --revisions REV [REV ...] (in the order to sweep)")
        repo = Repo(request.source)
        if not paths_inside(scenario, request.variant, repo.root):
            raise HarnessInputError(f"{where}: variants.{request.variant}.pythonpath: no entry lies inside {repo.root}, "
                                    "so every revision would run the same code (e.g. pythonpath: [/src/sglang/python])")
    rules = choose_rules(scenario, request.variant, list(request.rules), where)
    # every point runs the variant's timed blocks (its TPOT series), whatever the rules read
    scenario, note = fixed_design(with_run_seed(scenario.model_copy(update={"rules": rules})), rules, "sweep", timed=True)
    plan = point_plan(scenario, request.variant, rules, where)
    if plan.statistical:
        raise HarnessInputError("a sweep judges each point by exact rules (kernel_count, output_identity): its points "
                                "run at different times, so an A/B timing rule cannot compare them; TPOT and accept "
                                "length are recorded as series instead")
    # Each point: the rules' trials of the variant, and its timed blocks (TPOT, accept length).
    each: Selection = frozenset({*plan.each_point, (request.variant, "timed"), (request.variant, "profiled")})
    points = _points(request, repo)
    result = SweepResult(request=request, scenario=scenario.name, rules=[r.name for r in rules], out_dir=Path(),
                         points=points, notes=[note] if note else [])
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
            if sweep.run_baseline():
                sweep.run(result.points)
                if request.confirm:
                    sweep.confirm()
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

    def run_baseline(self) -> bool:
        """The trials that run once (none when the rules need only the variant's); False when they
        failed, and no point can be judged (the result says so)."""
        result = self.result
        if not self.runner.plan.once:
            return True
        run_dir = result.out_dir / "baseline"
        self.progress.baseline_started(run_dir)
        run = self.runner.run_once(self.scenario, run_dir)
        result.baseline_run_dir = run_dir
        if run.status != "complete":
            result.status = "cannot judge"
            result.message = f"the run of the arms that do not change ({run_dir}) failed: {run.error}"
            return False
        return True

    def run(self, points: list[PointResult]) -> None:
        """Run the points in order, sweep.json saved after each; then the sweep is done."""
        result = self.result
        for point in points:
            self.progress.point_started(point, len(result.points))
            self.run_point(point)
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
        # the repository too: the explanation of a change point reads each commit's source from it
        point.environment = {"provider": "git worktree", "commit": point.point, "worktree": str(worktree),
                             "repository": str(self.repo.root)}
        return at_commit(self.scenario, self.variant, self.repo.root, worktree, f"commit {point.label}")

    def run_point(self, point: PointResult) -> None:
        """One point: its environment, its run (the baseline's trials adopted), what it measured, and
        its run ingested. Reads and writes only `point` and its own run directory."""
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
        point.seconds["server_start"] = server_start_s(run_dir, self.variant)
        if outcome.complete:
            point.status, point.reason = "ran", outcome.reason
            point.numbers = point_numbers(run_dir, self.variant)
        else:
            point.status, point.reason = "cannot run", outcome.reason.removeprefix("run incomplete: ")
        self._ingest(run_dir)

    def confirm(self) -> None:
        """--confirm: the steps of the variant's timing series run again side by side, each outcome kept
        in the history database as soon as it exists (sweep/confirm.py)."""
        if self.engine is None or len(self.result.ran) < 2:
            return
        from sglang_spec_harness.history.marks import store_confirmations
        from sglang_spec_harness.sweep.confirm import confirm_steps, statistics, steps_to_confirm

        steps = steps_to_confirm(sweep_facts(self.engine, self.result), self.variant)
        self.progress.note(f"--confirm: {len(steps)} step(s) to run again side by side")

        def store(rows: list[dict[str, Any]]) -> None:
            store_confirmations(self.engine, rows)
            self.result.confirmations += rows
            self.save()

        # the statistics of the scenario as written: the sweep's own copy keeps only its exact rules
        written = load_scenario(self.runner.scenario_path, self.result.request.overrides)
        confirm_steps(steps, scenario=self.scenario, scenario_path=self.runner.scenario_path, variant=self.variant,
                      out_dir=self.result.out_dir, judged_by=statistics(written), scenario_at=self._point_scenario,
                      store=store,
                      progress=self.progress.run, say=self.progress.note)

    @contextlib.contextmanager
    def _point_scenario(self, label: str, tag: str) -> Iterator[Scenario]:
        """The scenario with the variant at the point of this label, set up again (a release's cached
        environment, or a worktree of the commit, removed afterwards)."""
        point = next(p for p in self.result.points if p.label == label)
        if self.provider is not None:
            yield at_release(self.scenario, self.variant, self.provider.prepare(point.point, self.progress.note))
            return
        assert self.worktrees is not None and self.repo is not None
        worktree = self.worktrees.add(point.point, f"side-by-side-{tag}-{point.point[:12]}")
        try:
            yield at_commit(self.scenario, self.variant, self.repo.root, worktree, f"commit {point.label}")
        finally:
            self.worktrees.remove(worktree)

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

