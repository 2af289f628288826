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

That is what lets a sweep spread over runners (`shards.py`): `harness sweep baseline` runs the
baseline's trials once and names the sweep; each `--shard I/N --baseline-from FOLDER` adopts that
one run and runs its share of the points, without the history; `harness sweep merge` (`merge.py`)
joins the shards and computes the series and change points as an unsharded sweep does.

The sweep's folder (`reports/sweeps/<timestamp>-<scenario>/`):
```
sweep.json          the request, every point so far (status, why, verdict, numbers, times) and, at
                    the end, the change points with their explanations (rewritten after each point)
baseline/           a run directory: the trials that run once
points/<NN>-<label>/   a run directory per point (run.json `sweep` says which point it is)
```
A sharded sweep's parts sit beside it: `<name>-baseline/` (sweep.json, baseline/) and
`<name>-shard-<I>-of-<N>/` (sweep.json, baseline/ linked from the baseline step's, its points/).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sglang_spec_harness.engines import server_python
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import new_stamped_dir
from sglang_spec_harness.points.git import Repo, Worktrees
from sglang_spec_harness.points.plan import PointPlan, choose_rules, fixed_design, point_plan
from sglang_spec_harness.points.runner import PointRunner
from sglang_spec_harness.points.scenario_at import at_commit, at_release, paths_inside, provider_for
from sglang_spec_harness.releases.environments import EnvironmentProvider, ReleaseEnvironment, ReleaseUnavailable
from sglang_spec_harness.releases.versions import registry_releases, releases_in_range
from sglang_spec_harness.run.combine import link_tree
from sglang_spec_harness.run.environment import harness_facts
from sglang_spec_harness.run.interrupts import interrupt_signum, signals_raise_interrupt
from sglang_spec_harness.run.plan import Selection, with_run_seed
from sglang_spec_harness.rundir import SweepPoint
from sglang_spec_harness.scenario import Scenario, load_scenario
from sglang_spec_harness.sweep.facts import sweep_facts, write_history
from sglang_spec_harness.sweep.measured import point_numbers, server_start_s
from sglang_spec_harness.sweep.result import PointResult, QuietSweep, SweepProgress, SweepRequest, SweepResult
from sglang_spec_harness.sweep.shards import (
    Shard, baseline_id, identity_difference, point_keys, read_sweep_json, scenario_sha256)

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")  # a revision's name in a folder name (origin/main -> origin-main)


def _points(request: SweepRequest, repo: Repo | None) -> list[PointResult]:
    if request.axis == "sglang_release":
        releases = releases_in_range(request.releases or "", registry_releases())
        return [PointResult(position=i, point=r, label=r) for i, r in enumerate(releases)]
    assert repo is not None
    commits = [repo.commit(repo.resolve(rev, "--revisions")) for rev in request.revisions]
    return [PointResult(position=i, point=c.hash, label=f"{rev} ({c.short})" if rev[:12] != c.short else c.short)
            for i, (rev, c) in enumerate(zip(request.revisions, commits, strict=True))]


@dataclass
class Prepared:
    """What `prepare` checked and built: the scenario (only the chosen rules, one seed), the
    repository (revisions), the empty result, the rules' plan (what runs once), the trials that run
    at each point, where each release runs, and a shard's baseline step (its sweep.json)."""

    scenario: Scenario
    repo: Repo | None
    result: SweepResult
    plan: PointPlan
    each: Selection
    provider: EnvironmentProvider | None
    baseline_doc: dict[str, Any] | None


def _check_parts(request: SweepRequest) -> dict[str, Any] | None:
    """The flags of a sweep spread over runners; a shard's baseline step (its sweep.json)."""
    if request.shard is not None and request.baseline_from is None:
        raise HarnessInputError(f"--shard {request.shard}: needs --baseline-from FOLDER, the folder `harness sweep "
                                "baseline` wrote: every shard adopts that one baseline run (docs/history.md)")
    if request.baseline_from is not None and request.shard is None:
        raise HarnessInputError("--baseline-from: only with --shard I/N")
    if request.shard is not None and request.db:
        raise HarnessInputError("--db: a shard's points go into the history database when the shards are merged "
                                "(harness sweep merge --db)")
    if request.baseline_from is None:
        return None
    return read_sweep_json(request.baseline_from, "--baseline-from")


def prepare(request: SweepRequest) -> Prepared:
    """Every check of the input before anything starts (HarnessInputError: one line, exit 2)."""
    baseline_doc = _check_parts(request)
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
    if baseline_doc is not None and scenario.trials.seed is None and isinstance(baseline_doc.get("seed"), int):
        # the sweep's one seed, as an unsharded sweep's points share one
        scenario = scenario.model_copy(update={"trials": scenario.trials.model_copy(update={"seed": baseline_doc["seed"]})})
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
    harness = harness_facts()
    result = SweepResult(request=request, scenario=scenario.name, rules=[r.name for r in rules], out_dir=Path(),
                         points=_points(request, repo), notes=[note] if note else [], part=request.part,
                         scenario_sha256=scenario_sha256(scenario), seed=scenario.trials.seed,
                         harness={"version": harness["version"], "git_commit": harness["git_commit"]})
    provider: EnvironmentProvider | None = None
    if request.axis == "sglang_release":
        provider = provider_for(request.environments, server_python(scenario, request.variant),
                                scenario.variants[request.variant].patches)
        result.environments = provider.name
    else:
        result.environments = "git worktrees"
    if request.shard is not None and baseline_doc is not None:
        _take_share(result, request.shard, baseline_doc, request.baseline_from or Path())
    return Prepared(scenario, repo, result, plan, each, provider, baseline_doc)


def _take_share(result: SweepResult, shard: Shard, doc: dict[str, Any], folder: Path) -> None:
    """A shard's points, once its baseline step is checked to be of this very sweep (the same
    scenario as run, rules, points, harness; a baseline run that completed)."""
    where = f"--baseline-from {folder}"
    if doc.get("part") != "baseline" or not isinstance(doc.get("name"), str):
        raise HarnessInputError(f"{where}: not the folder of `harness sweep baseline` (sweep.json part: "
                                f"{doc.get('part')!r})")
    if doc.get("status") != "done":
        raise HarnessInputError(f"{where}: its baseline run did not complete ({doc.get('message') or doc.get('status')})")
    result.name = doc["name"]
    mine = result.to_json_dict()
    if (difference := identity_difference(mine, doc)) is not None:
        raise HarnessInputError(f"{where}: a baseline of another sweep: {difference}")
    if point_keys(mine["points"]) != point_keys(doc["points"]):
        raise HarnessInputError(f"{where}: a baseline of another sweep: its points are "
                                f"{', '.join(str(p.get('label')) for p in doc['points'] if isinstance(p, dict))}, "
                                f"this sweep's {', '.join(p.label for p in result.points)}")
    recorded: dict[str, Any] = doc["baseline"] if isinstance(doc.get("baseline"), dict) else {}
    if recorded.get("id") != baseline_id(folder / "baseline"):
        raise HarnessInputError(f"{where}: baseline/ is not the run its sweep.json records (baseline.id "
                                f"{recorded.get('id')})")
    result.sweep_points = [{"position": p.position, "point": p.point, "label": p.label} for p in result.points]
    share = [p for p in result.points if shard.owns(p.position)]
    if not share:
        raise HarnessInputError(f"--shard {shard}: the sweep has {len(result.points)} point(s), so {shard.describe()} "
                                "would run none")
    result.points = share
    result.baseline = {"id": recorded.get("id"), "from": folder.resolve().name, "wall_s": recorded.get("wall_s")}


def _new_folder(request: SweepRequest, result: SweepResult, scenario: Scenario) -> Path:
    """The folder this part writes: a whole sweep's `<timestamp>-<scenario>` (its name); the baseline
    step's `<name>-baseline`, for a name no folder there has; a shard's `<name>-shard-<I>-of-<N>`."""
    root = request.out_root
    if request.shard is not None:
        folder = root / f"{result.name}-shard-{request.shard.index}-of-{request.shard.count}"
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            raise HarnessInputError(f"--out: {folder} exists: a shard writes a folder of its own (remove it to run "
                                    "the shard again)") from None
        return folder.resolve()
    if not request.baseline_only:
        folder = new_stamped_dir(root, scenario.name, "a sweep folder").resolve()
        result.name = folder.name
        return folder
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):  # a name free for the merged sweep too: <out>/<name>
        name = f"{stamp}-{scenario.name}" + (f"-{n}" if n > 1 else "")
        if (root / name).exists():
            continue
        try:
            (root / f"{name}-baseline").mkdir()
        except FileExistsError:
            continue
        result.name = name
        return (root / f"{name}-baseline").resolve()
    raise HarnessInputError(f"--out {root}: {stamp}-{scenario.name}-baseline to -999 all exist")


def run_sweep(request: SweepRequest, progress: SweepProgress | None = None) -> SweepResult:
    """Sweep (or its baseline step, or a shard); never raises for a point that cannot run or an
    interruption (the result says so). Bad input raises HarnessInputError before anything starts."""
    progress = progress or QuietSweep()
    prepared = prepare(request)
    result = prepared.result
    engine = _open_history(request)
    result.out_dir = _new_folder(request, result, prepared.scenario)
    progress.started(result)
    sweep = _Sweep(prepared, progress, PointRunner(request.scenario_path, prepared.plan, progress.run), engine)
    started = time.monotonic()
    with signals_raise_interrupt():
        try:
            result.save()
            if sweep.baseline():
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
    """The history database; none for the baseline step and a shard (the merge ingests the points)."""
    if not request.ingest or request.part != "whole":
        return None
    from sglang_spec_harness.history.db import open_database

    return open_database(request.db)


class _Sweep:
    def __init__(self, prepared: Prepared, progress: SweepProgress, points: PointRunner, engine: Any):
        self.scenario, self.repo, self.result, self.progress = prepared.scenario, prepared.repo, prepared.result, progress
        self.runner, self.provider, self.engine, self.each = points, prepared.provider, engine, prepared.each
        self.request = prepared.result.request
        self.variant = self.request.variant
        self.worktrees = Worktrees(prepared.repo) if prepared.repo is not None and not self.request.baseline_only else None

    def close(self) -> None:
        if self.worktrees is not None:
            self.worktrees.close()

    def baseline(self) -> bool:
        """The baseline's trials, before any point: run here (a whole sweep, the baseline step) or
        adopted from the baseline step (a shard). False when no point is to run: they failed (the
        result says so), or this is the baseline step."""
        if self.request.shard is not None:
            self._adopt_baseline()
            return True
        ran = self.run_baseline()
        if self.request.baseline_only:
            if ran:
                self.result.status = "done"
                self.result.message = (f"the baseline's trials ran once for the sweep's {len(self.result.points)} "
                                       f"point(s); each shard adopts them: --baseline-from {self.result.out_dir}")
            return False
        return ran

    def run_baseline(self) -> bool:
        """The trials that run once (none when the rules need only the variant's); False when they
        failed, and no point can be judged (the result says so)."""
        result = self.result
        if not self.runner.plan.once:
            return True
        run_dir = result.out_dir / "baseline"
        self.progress.baseline_started(run_dir)
        started = time.monotonic()
        run = self.runner.run_once(self.scenario, run_dir)
        result.baseline_run_dir = run_dir
        if run.status != "complete":
            result.status = "cannot judge"
            result.message = f"the run of the arms that do not change ({run_dir}) failed: {run.error}"
            return False
        result.baseline = {"id": baseline_id(run_dir), "from": None, "wall_s": round(time.monotonic() - started, 1)}
        return True

    def _adopt_baseline(self) -> None:
        """A shard's baseline: the baseline step's run, linked into the shard's folder (so that the
        folder stands alone: an artifact, the merge), and adopted by every point as a whole sweep's."""
        source = (self.request.baseline_from or Path()) / "baseline"
        if not self.result.baseline.get("id"):  # the rules need no baseline trials
            return
        run_dir = self.result.out_dir / "baseline"
        link_tree(run_dir, source)
        self.runner.adopt_once(run_dir)
        self.result.baseline_run_dir = run_dir

    def run(self, points: list[PointResult]) -> None:
        """Run the points in order, sweep.json saved after each; then the sweep (or shard) is done."""
        result = self.result
        total = len(result.sweep_points or result.points)
        for point in points:
            self.progress.point_started(point, total)
            self.run_point(point)
            result.save()
            self.progress.point_finished(point, total)
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
                sweep=SweepPoint(sweep=self.result.name, axis=self.request.axis,
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
            self.result.save()

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
        """A whole sweep's change points (from the history database) and trend page; then sweep.json.
        A shard's series are the merge's to read: alone, its neighbouring points are not neighbours."""
        if self.engine is not None and self.result.ran:
            write_history(self.engine, self.result)
        self.result.save()
