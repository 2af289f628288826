"""The bisection: over git commits (judge the bad revision, then the commits git picks, until one
commit is left) or over SGLang releases (judge both ends of the range, then halve it, until two
neighbouring releases differ).

Layout of a bisection's folder (`reports/bisect/<timestamp>-<scenario>/`):
```
bisect.json            the request, every step so far and the outcome (rewritten after each step)
index.html             the bisection page: the outcome and a link to each step's run report
baseline/              a run directory: the trials that run once (absent for statistical rules, and
                       when every step was judged from a sweep's stored run: `--reuse`)
steps/<NN>-<commit12 or release>[-try<k>]/   one run directory per step (and retry), baseline trials linked in
```
Every step's run directory is an ordinary run (`harness check` and `harness report` accept it); its
scenario.yaml holds only the bisection's rules, and the variant as it ran at that step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

from sglang_spec_harness.bisect.git import BisectState, Commit, GitBisect, Repo, Worktrees
from sglang_spec_harness.bisect.page import write_page
from sglang_spec_harness.bisect.plan import at_commit, choose_rules, paths_inside, step_plan
from sglang_spec_harness.bisect.points import PointRunner, at_release, provider_for
from sglang_spec_harness.bisect.result import BisectRequest, BisectResult, Point, Release, Step
from sglang_spec_harness.bisect.reuse import stored_points, why_not_reusable
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import new_stamped_dir, write_json_atomic
from sglang_spec_harness.releases.environments import ReleaseUnavailable
from sglang_spec_harness.releases.versions import registry_releases, releases_in_range
from sglang_spec_harness.engines import server_python
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.run.interrupts import interrupt_signum, signals_raise_interrupt
from sglang_spec_harness.run.plan import with_run_seed
from sglang_spec_harness.scenario import require_fixed_design, Scenario, load_scenario
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS, Verdict

MARKS = {PASS: "good", FAIL: "bad", INCONCLUSIVE: "skip"}


class BaselineFailed(Exception):
    """The trials that run once failed: no point can be judged (the result says so)."""


class BisectProgress(Protocol):
    """What a bisection says while it goes. A protocol, so that `harness bisect` prints it
    (`commands/bisect.BisectLines`) without importing this stage; `QuietBisect` says nothing."""

    run: RunProgress  # the trials of each run

    def started(self, result: BisectResult) -> None:
        return None

    def baseline_started(self, run_dir: Path) -> None:
        return None

    def step_started(self, number: int, commit: Point, role: str, left: int | None, attempt: int) -> None:
        return None

    def step_finished(self, step: Step) -> None:
        return None

    def note(self, text: str) -> None:
        return None


class QuietBisect(BisectProgress):
    run = RunProgress()


def _scenario_and_rules(request: BisectRequest) -> tuple[Scenario, list, str]:
    scenario = load_scenario(request.scenario_path, request.overrides)
    where = str(request.scenario_path)
    require_fixed_design(scenario, where, "bisect")
    if request.variant not in scenario.variants:
        raise HarnessInputError(f"--variant {request.variant}: no such variant in {where} "
                                f"(variants: {', '.join(scenario.variants)})")
    return scenario, choose_rules(scenario, request.variant, list(request.rules), where), where


def prepare(request: BisectRequest) -> tuple[Scenario, Repo | None, BisectResult]:
    """Every check of the input, before anything starts (HarnessInputError: one line, exit 2)."""
    scenario, rules, where = _scenario_and_rules(request)
    repo: Repo | None = None
    if request.axis == "releases":
        releases = releases_in_range(request.releases or "", registry_releases())
        if len(releases) < 2:
            raise HarnessInputError(f"--sglang-releases {request.releases}: names {len(releases)} release(s); "
                                    "a bisection needs a range of at least two")
        good: Point = Release(releases[0])
        bad: Point = Release(releases[-1])
        count = len(releases)
    else:
        if request.source is None or request.good is None or request.bad is None:
            raise HarnessInputError("give --source REPO --good REV --bad REV, or --sglang-releases A..B")
        repo = Repo(request.source)
        good_hash, bad_hash = repo.resolve(request.good, "--good"), repo.resolve(request.bad, "--bad")
        if good_hash == bad_hash:
            raise HarnessInputError(f"--good {request.good} and --bad {request.bad} are the same commit: nothing to bisect")
        if not repo.is_ancestor(good_hash, bad_hash):
            raise HarnessInputError(f"--good {request.good} is not an ancestor of --bad {request.bad} in {repo.root}")
        if not paths_inside(scenario, request.variant, repo.root):
            raise HarnessInputError(f"{where}: variants.{request.variant}.pythonpath: no entry lies inside {repo.root}, "
                                    "so every commit would run the same code (e.g. pythonpath: [/src/sglang/python])")
        good, bad, count, releases = repo.commit(good_hash), repo.commit(bad_hash), repo.count_between(good_hash, bad_hash), []
    # One seed for every run of the bisection: the subsets come from one plan and fit together.
    scenario = with_run_seed(scenario.model_copy(update={"rules": rules}))
    plan = step_plan(scenario, request.variant, rules, where)
    result = BisectResult(request=request, scenario=scenario.name, good=good, bad=bad, commits_in_range=count,
                          rules=[r.name for r in rules], plan=plan, out_dir=Path(), releases=releases)
    for folder in request.reuse:  # later folders win: the newest measurement of a point
        result.stored.update(stored_points(Path(folder)))
    return scenario, repo, result


def run_bisection(request: BisectRequest, progress: BisectProgress | None = None) -> BisectResult:
    """Bisect; never raises for a failed step or an interruption (the result says so). Bad input
    raises HarnessInputError before anything starts."""
    progress = progress or QuietBisect()
    scenario, repo, result = prepare(request)
    result.out_dir = new_stamped_dir(request.out_root, scenario.name, "a bisection folder").resolve()
    progress.started(result)
    with signals_raise_interrupt():
        bisection: _Search = (_ReleaseBisection(scenario, result, progress) if repo is None
                              else _GitBisection(scenario, repo, result, progress))
        try:
            bisection.save()
            bisection.search()
        except BaselineFailed as exc:
            if result.steps and result.steps[-1].mark == "skip":
                result.steps[-1].reason = f"not judged: {exc}"
        except KeyboardInterrupt as exc:
            result.interrupted_by = interrupt_signum(exc)
            result.status = "interrupted"
            result.message = f"interrupted ({'Ctrl-C' if result.interrupted_by == 2 else exc})"
            if result.steps and not result.steps[-1].reason:
                result.steps[-1].reason = result.message
        finally:
            bisection.close()
            bisection.save()
    return result


class _Search:
    """What both searches share: the trials that run once, and judging one point."""

    def __init__(self, scenario: Scenario, result: BisectResult, progress: BisectProgress):
        self.scenario, self.result, self.progress = scenario, result, progress
        self.variant = result.request.variant
        self.points = PointRunner(result.request.scenario_path, result.plan, progress.run)
        self.worktree: Path | None = None  # git: where the point being judged is checked out

    def search(self) -> None:
        raise NotImplementedError

    def close(self) -> None: ...

    def save(self) -> None:
        """bisect.json and the page, after every step: an interrupted bisection keeps its steps."""
        write_json_atomic(self.result.out_dir / "bisect.json", self.result.to_json_dict())
        write_page(self.result)

    def run_baseline(self) -> None:
        """The trials that run once, before the first point that is run (not before points judged
        from `--reuse`: a bisection they all stand for starts no server). BaselineFailed when it fails."""
        if not self.result.plan.once or self.result.baseline_run_dir is not None:
            return
        run_dir = self.result.out_dir / "baseline"
        self.progress.baseline_started(run_dir)
        run = self.points.run_once(self.scenario, run_dir)
        self.result.baseline_run_dir = run_dir
        self.save()
        if run.status != "complete":
            self.result.status = "cannot judge"
            self.result.message = f"the run of the arms that do not change ({run_dir}) failed: {run.error}"
            raise BaselineFailed(self.result.message)

    def judge(self, point: Point, role: str, left: int | None,
              scenario_at: Callable[[Step], AbstractContextManager[Scenario]]) -> Step:
        """Run and check one point (retrying an INCONCLUSIVE statistical verdict); record the step.
        `scenario_at(step)` is a context manager giving the scenario at that point (or raising
        ReleaseUnavailable: the point is skipped with that reason)."""
        result = self.result
        step = Step(number=len(result.steps) + 1, commit=point, role=role, verdict=INCONCLUSIVE, mark="skip", reason="")
        result.steps.append(step)
        attempts = 1 + (result.request.retries if result.plan.statistical else 0)
        try:
            with scenario_at(step) as scenario:
                if self._judge_stored(step, scenario, left):
                    attempts = 0
                elif attempts:
                    self.run_baseline()
                for attempt in range(1, attempts + 1):
                    self.progress.step_started(step.number, point, role, left, attempt)
                    suffix = f"-try{attempt}" if attempt > 1 else ""
                    run_dir = result.out_dir / "steps" / f"{step.number:02d}-{point.short}{suffix}"
                    step.attempts.append(run_dir)
                    outcome = self.points.run_point(scenario, run_dir)
                    step.verdict, step.mark, step.reason = outcome.verdict, MARKS[outcome.verdict], outcome.reason
                    if not outcome.complete or step.mark != "skip":  # a run that cannot complete is not retried
                        break
        except ReleaseUnavailable as exc:
            step.verdict, step.mark, step.reason = INCONCLUSIVE, "skip", f"cannot run: {exc}"
        if len(step.attempts) > 1:
            step.reason += f" (attempt {len(step.attempts)} of {attempts})"
        self.save()
        self.progress.step_finished(step)
        return step

    def _judge_stored(self, step: Step, scenario: Scenario, left: int | None) -> bool:
        """Judge the step from a stored point of `--reuse` when one can stand for this run."""
        stored = self.result.stored.get(step.commit.hash)
        if stored is None:
            return False
        plan = self.result.plan
        theirs, why = why_not_reusable(stored, scenario, self.variant, set(plan.once | plan.each_step), self.worktree)
        if theirs is None:
            self.progress.note(f"{stored.run_dir}: not reused: {why}")
            return False
        self.progress.step_started(step.number, step.commit, step.role, left, 1)
        run_dir = self.result.out_dir / "steps" / f"{step.number:02d}-{step.commit.short}"
        step.attempts.append(run_dir)
        step.reused_from = stored.run_dir
        outcome = self.points.judge_stored(stored, theirs, scenario, run_dir)
        step.verdict, step.mark = outcome.verdict, MARKS[outcome.verdict]
        step.reason = f"{outcome.reason} (measured in {stored.run_dir})"
        return True


class _GitBisection(_Search):
    def __init__(self, scenario: Scenario, repo: Repo, result: BisectResult, progress: BisectProgress):
        super().__init__(scenario, result, progress)
        self.repo = repo
        self.worktrees = Worktrees(repo)

    def close(self) -> None:
        self.worktrees.close()

    def _at_commit(self, step: Step) -> AbstractContextManager[Scenario]:
        @contextmanager
        def scenario() -> Iterator[Scenario]:
            commit = step.commit
            worktree = self.worktrees.add(commit.hash, f"{step.number:02d}-{commit.short}")
            self.worktree = worktree
            try:
                yield at_commit(self.scenario, self.variant, self.repo.root, worktree,
                                f"commit {commit.short}: {commit.subject}")
            finally:
                self.worktree = None
                self.worktrees.remove(worktree)
        return scenario()

    def search(self) -> None:
        result = self.result
        first = self.judge(result.bad, "bad revision", None, self._at_commit)
        if first.mark != "bad":
            result.status = "bad passes" if first.mark == "good" else "cannot judge"
            result.message = (f"the bad revision {result.bad.short} passes the rules: the regression is not in this range"
                              if first.mark == "good" else f"the bad revision {result.bad.short} cannot be judged: {first.reason}")
            return
        git = GitBisect(self.worktrees, result.good.hash, result.bad.hash)
        state = git.state()
        while state.next is not None:
            step = self.judge(self.repo.commit(state.next), "bisection", state.left, self._at_commit)
            state = git.mark(step.commit.hash, step.mark)
        self._conclude(state)

    def _conclude(self, state: BisectState) -> None:
        result = self.result
        if state.first_bad is not None:
            first: Commit = self.repo.commit(state.first_bad)
            result.first_bad = first
            result.status = "found"
            result.message = f"first bad commit {first.short} {first.subject}"
        else:
            result.candidates = [self.repo.commit(c) for c in state.candidates]
            result.status = "not narrowed"
            result.message = (f"the first bad commit is one of {len(result.candidates)} (skipped commits could not be "
                              f"judged): {', '.join(c.short for c in result.candidates)}")


@dataclass(frozen=True)
class ChangeSearch:
    """Where the verdict changes in an ordered range: `first` (found) is the first index with the
    newest end's verdict, `first - 1`... `last_old` the last with the oldest end's."""

    status: str  # found | no change | not narrowed | cannot judge
    oldest: int | None = None  # the ends that could be judged
    newest: int | None = None
    terms: tuple[Verdict, Verdict] | None = None  # their verdicts
    last_old: int | None = None
    first: int | None = None
    candidates: tuple[int, ...] = ()  # not narrowed: the first changed point is one of these


def find_change(count: int, judge: Callable[[int, str, int | None], Verdict]) -> ChangeSearch:
    """Bisect `count` ordered points whose verdicts (PASS or FAIL; anything else is a skip) change
    once: judge both ends (an end that cannot be judged moves inwards), then halve. `judge(index,
    role, untried)` runs one point. Pure apart from `judge`, so the search is tested on its own."""
    newest = oldest = None
    for index in range(count - 1, -1, -1):
        verdict = judge(index, "newest", None)
        if verdict in (PASS, FAIL):
            newest = (index, verdict)
            break
    if newest is None:
        return ChangeSearch("cannot judge")
    for index in range(0, newest[0]):
        verdict = judge(index, "oldest", None)
        if verdict in (PASS, FAIL):
            oldest = (index, verdict)
            break
    if oldest is None:
        return ChangeSearch("cannot judge", newest=newest[0])
    (low, old), (high, new) = oldest, newest
    found = partial(ChangeSearch, oldest=low, newest=high, terms=(old, new))
    if old == new:
        return found("no change")
    skipped: set[int] = set()
    while high - low > 1:
        untried = [i for i in range(low + 1, high) if i not in skipped]
        if not untried:
            return found("not narrowed", last_old=low, candidates=tuple(range(low + 1, high + 1)))
        middle = min(untried, key=lambda i: (abs(2 * i - low - high), i))
        verdict = judge(middle, "bisection", len(untried))
        if verdict == old:
            low = middle
        elif verdict == new:
            high = middle
        else:
            skipped.add(middle)
    return found("found", last_old=low, first=high)


class _ReleaseBisection(_Search):
    """Over the releases of a range, in version order. Which way the change goes is not assumed: both
    ends are judged first (an end that cannot run moves one release inwards), and the search looks
    for the first release whose verdict is the newest end's: the first bad release when the range
    went from PASS to FAIL, the first that passes when it went from FAIL to PASS (a fix, or a fast
    path that arrived). A release that cannot run, or is INCONCLUSIVE, is skipped as `git bisect
    skip` does: the search takes the untried release nearest the middle instead."""

    def __init__(self, scenario: Scenario, result: BisectResult, progress: BisectProgress):
        super().__init__(scenario, result, progress)
        python = server_python(scenario, self.variant)
        self.provider = provider_for(result.request.environments, python, scenario.variants[self.variant].patches)

    def _at_release(self, step: Step) -> AbstractContextManager[Scenario]:
        @contextmanager
        def scenario() -> Iterator[Scenario]:
            environment = self.provider.prepare(step.commit.hash, self.progress.note)
            yield at_release(self.scenario, self.variant, environment)
        return scenario()

    def _judge(self, index: int, role: str, untried: int | None) -> Verdict:
        return self.judge(Release(self.result.releases[index]), role, untried, self._at_release).verdict

    def search(self) -> None:
        result, releases = self.result, self.result.releases
        found = find_change(len(releases), self._judge)
        result.status = found.status
        if found.oldest is None or found.newest is None or found.terms is None:
            result.message = ("no release of the range could be judged" if found.newest is None else
                              f"only {releases[found.newest]} and nothing older could be judged")
            return
        old, new = found.terms
        result.good, result.bad, result.terms = Release(releases[found.oldest]), Release(releases[found.newest]), found.terms
        if found.status == "no change":
            result.message = (f"{releases[found.oldest]} and {releases[found.newest]} are both {old}: the rules see "
                              "no change between them")
        elif found.status == "not narrowed":
            result.candidates = [Release(releases[i]) for i in found.candidates]
            result.message = (f"the {result.found_word} is one of {len(result.candidates)} (the releases between "
                              f"could not be judged): {', '.join(c.short for c in result.candidates)}")
        else:
            assert found.first is not None and found.last_old is not None
            result.first_bad = Release(releases[found.first])
            result.message = (f"{result.found_word}: {releases[found.first]} ({releases[found.last_old]} is {old}, "
                              f"{releases[found.first]} is {new})")
