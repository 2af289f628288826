"""The bisection: judge the bad revision, then the commits git picks, until one commit is left.

Layout of a bisection's folder (`reports/bisect/<timestamp>-<scenario>/`):
```
bisect.json            the request, every step so far and the outcome (rewritten after each step)
index.html             the bisection page: the outcome and a link to each step's run report
baseline/              a run directory: the trials that run once (absent for statistical rules)
steps/<NN>-<commit12>[-try<k>]/   one run directory per step (and retry), baseline trials linked in
```
Every step's run directory is an ordinary run (`harness check` and `harness report` accept it); its
scenario.yaml holds only the bisection's rules, and the variant's pythonpath as it was at that step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.bisect.git import BisectState, Commit, GitBisect, Repo, Worktrees
from harness.bisect.page import write_page
from harness.bisect.plan import at_commit, choose_rules, paths_inside, step_plan
from harness.bisect.result import BisectRequest, BisectResult, Step
from harness.errors import HarnessInputError
from harness.run.combine import adopt_trials
from harness.files import new_stamped_dir, write_json_atomic
from harness.run.execute import RunProgress, RunResult, run_scenario
from harness.run.plan import with_run_seed
from harness.run.interrupts import Terminated, signals_raise_interrupt
from harness.scenario import Scenario, load_scenario
from harness.verdict.verdicts import FAIL, INCONCLUSIVE, PASS

MARKS = {PASS: "good", FAIL: "bad", INCONCLUSIVE: "skip"}


class BisectProgress:
    """Hooks for showing progress; the default does nothing. `harness bisect` prints them."""

    run: RunProgress = RunProgress()  # the trials of each run

    def started(self, result: BisectResult) -> None: ...

    def baseline_started(self, run_dir: Path) -> None: ...

    def step_started(self, number: int, commit: Commit, role: str, left: int | None, attempt: int) -> None: ...

    def step_finished(self, step: Step) -> None: ...


def prepare(request: BisectRequest) -> tuple[Scenario, Repo, BisectResult]:
    """Every check of the input, before anything starts (HarnessInputError: one line, exit 2)."""
    scenario = load_scenario(request.scenario_path)
    where = str(request.scenario_path)
    if request.variant not in scenario.variants:
        raise HarnessInputError(f"--variant {request.variant}: no such variant in {where} "
                                f"(variants: {', '.join(scenario.variants)})")
    repo = Repo(request.source)
    good, bad = repo.resolve(request.good, "--good"), repo.resolve(request.bad, "--bad")
    if good == bad:
        raise HarnessInputError(f"--good {request.good} and --bad {request.bad} are the same commit: nothing to bisect")
    if not repo.is_ancestor(good, bad):
        raise HarnessInputError(f"--good {request.good} is not an ancestor of --bad {request.bad} in {repo.root}")
    if not paths_inside(scenario, request.variant, repo.root):
        raise HarnessInputError(f"{where}: variants.{request.variant}.pythonpath: no entry lies inside {repo.root}, "
                                "so every commit would run the same code (e.g. pythonpath: [/src/sglang/python])")
    rules = choose_rules(scenario, request.variant, list(request.rules), where)
    # One seed for every run of the bisection: the subsets come from one plan and fit together.
    scenario = with_run_seed(scenario.model_copy(update={"checks": rules}))
    plan = step_plan(scenario, request.variant, rules, where)
    result = BisectResult(request=request, scenario=scenario.name, good=repo.commit(good), bad=repo.commit(bad),
                          commits_in_range=repo.count_between(good, bad), rules=[r.name for r in rules], plan=plan,
                          out_dir=Path())
    return scenario, repo, result


def run_bisection(request: BisectRequest, progress: BisectProgress | None = None) -> BisectResult:
    """Bisect; never raises for a failed step or an interruption (the result says so). Bad input
    raises HarnessInputError before anything starts."""
    progress = progress or BisectProgress()
    scenario, repo, result = prepare(request)
    result.out_dir = new_stamped_dir(request.out_root, scenario.name, "a bisection folder").resolve()
    progress.started(result)
    with signals_raise_interrupt():
        bisection = _Bisection(scenario, repo, result, progress, Worktrees(repo))
        try:
            bisection.save()
            bisection.search()
        except KeyboardInterrupt as exc:
            result.interrupted_by = exc.signum if isinstance(exc, Terminated) else 2
            result.status = "interrupted"
            result.message = f"interrupted ({'Ctrl-C' if result.interrupted_by == 2 else exc})"
            if result.steps and not result.steps[-1].reason:
                result.steps[-1].reason = result.message
        finally:
            bisection.worktrees.close()
            bisection.save()
    return result


class _Bisection:
    def __init__(self, scenario: Scenario, repo: Repo, result: BisectResult, progress: BisectProgress,
                 worktrees: Worktrees):
        self.scenario, self.repo, self.result, self.progress = scenario, repo, result, progress
        self.worktrees = worktrees
        self.variant = result.request.variant

    def save(self) -> None:
        """bisect.json and the page, after every step: an interrupted bisection keeps its steps."""
        write_json_atomic(self.result.out_dir / "bisect.json", self.result.to_json_dict())
        write_page(self.result)

    def search(self) -> None:
        result = self.result
        if result.plan.once:
            if not self._run_baseline():
                return
        first = self._judge(result.bad, "bad revision", None)
        if first.mark != "bad":
            result.status = "bad passes" if first.mark == "good" else "cannot judge"
            result.message = (f"the bad revision {result.bad.short} passes the rules: the regression is not in this range"
                              if first.mark == "good" else f"the bad revision {result.bad.short} cannot be judged: {first.reason}")
            return
        git = GitBisect(self.worktrees, result.good.hash, result.bad.hash)
        state = git.state()
        while state.next is not None:
            step = self._judge(self.repo.commit(state.next), "bisection", state.left)
            state = git.mark(step.commit.hash, step.mark)
        self._conclude(state)

    def _conclude(self, state: BisectState) -> None:
        result = self.result
        if state.first_bad is not None:
            result.first_bad = self.repo.commit(state.first_bad)
            result.status = "found"
            result.message = f"first bad commit {result.first_bad.short} {result.first_bad.subject}"
        else:
            result.candidates = [self.repo.commit(c) for c in state.candidates]
            result.status = "not narrowed"
            result.message = (f"the first bad commit is one of {len(result.candidates)} (skipped commits could not be "
                              f"judged): {', '.join(c.short for c in result.candidates)}")

    def _run_baseline(self) -> bool:
        run_dir = self.result.out_dir / "baseline"
        self.progress.baseline_started(run_dir)
        run = self._run(self.scenario, self.result.plan.once, run_dir)
        self.result.baseline_run_dir = run_dir
        self.save()
        if run.status != "complete":
            self.result.status = "cannot judge"
            self.result.message = f"the run of the arms that do not change ({run_dir}) failed: {run.error}"
            return False
        return True

    def _run(self, scenario: Scenario, select: frozenset, run_dir: Path) -> RunResult:
        run = run_scenario(scenario, self.result.request.scenario_path, select=select, run_dir=run_dir,
                           progress=self.progress.run)
        if run.interrupted_by is not None:  # the run stopped its servers; unwind the bisection too
            raise KeyboardInterrupt if run.interrupted_by == 2 else Terminated(run.interrupted_by)
        return run

    def _judge(self, commit: Commit, role: str, left: int | None) -> Step:
        """Run and check one commit (retrying an INCONCLUSIVE statistical verdict); record the step."""
        from harness.report import build_report
        from harness.verdict.rules import check_run_dir

        result = self.result
        step = Step(number=len(result.steps) + 1, commit=commit, role=role, verdict=INCONCLUSIVE, mark="skip",
                    reason="")
        result.steps.append(step)
        attempts = 1 + (result.request.retries if result.plan.statistical else 0)
        worktree = self.worktrees.add(commit.hash, f"{step.number:02d}-{commit.short}")
        try:
            scenario = at_commit(self.scenario, self.variant, self.repo.root, worktree,
                                 f"commit {commit.short}: {commit.subject}")
            for attempt in range(1, attempts + 1):
                self.progress.step_started(step.number, commit, role, left, attempt)
                suffix = f"-try{attempt}" if attempt > 1 else ""
                run_dir = result.out_dir / "steps" / f"{step.number:02d}-{commit.short}{suffix}"
                step.attempts.append(run_dir)
                run = self._run(scenario, result.plan.each_step, run_dir)
                if result.baseline_run_dir is not None:
                    adopt_trials(run_dir, result.baseline_run_dir)
                checks = check_run_dir(run_dir)
                build_report(run_dir)
                if run.status != "complete":  # e.g. the server cannot start at this commit: no retry
                    step.verdict, step.mark, step.reason = INCONCLUSIVE, "skip", f"run incomplete: {run.error}"
                    break
                step.verdict, step.mark, step.reason = checks.verdict, MARKS[checks.verdict], _reason(checks)
                if step.mark != "skip":
                    break
            if len(step.attempts) > 1:
                step.reason += f" (attempt {len(step.attempts)} of {attempts})"
            self.save()
            self.progress.step_finished(step)
            return step
        finally:
            self.worktrees.remove(worktree)


def _reason(checks: Any) -> str:
    """The first failing rule, else the first inconclusive one, else that all passed."""
    for verdict in (FAIL, INCONCLUSIVE):
        for rule in checks.rules:
            if rule.verdict == verdict:
                return f"{rule.name}: {rule.reason}"
    return f"{len(checks.rules)} rule(s) pass: {', '.join(rule.name for rule in checks.rules)}"
