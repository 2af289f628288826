"""Git's own bisection for `harness bisect` over commits.

The bisection state lives in a worktree without a checkout (`refs/bisect/*`, BISECT_LOG are per
worktree), so a `git bisect` the user has going is not disturbed. Which commit to test next is git's
choice (`git bisect start --no-checkout`: its midpoint over the commit graph, merges included, and
its `skip` rules); whether the search is over is read from the refs, not from git's messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_spec_harness.points.git import GitError, Worktrees, run_git


@dataclass(frozen=True)
class BisectState:
    """After a mark: `next` to test, or `first_bad`, or (only skipped commits left) `candidates`."""

    next: str | None = None
    first_bad: str | None = None
    candidates: tuple[str, ...] = ()
    left: int = 0  # commits that may still be the first bad one, skipped ones aside


class GitBisect:
    """`git bisect` in a worktree without a checkout: git picks the commits, the harness tests them."""

    def __init__(self, worktrees: Worktrees, good: str, bad: str):
        self.dir = worktrees.add(bad, "bisect-state", checkout=False)
        run_git(self.dir, "bisect", "start", "--no-checkout", bad, good)

    def mark(self, commit: str, term: str) -> BisectState:
        assert term in ("good", "bad", "skip")
        done = run_git(self.dir, "bisect", term, commit, check=False)
        state = self.state()
        if done.returncode != 0 and state.next is not None:  # rc 2 when only skipped commits are left
            raise GitError(f"git bisect {term} {commit}: exit {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
        return state

    def state(self) -> BisectState:
        refs = run_git(self.dir, "for-each-ref", "--format=%(objectname) %(refname)", "refs/bisect/").stdout.split("\n")
        bad, goods, skipped = None, [], set()
        for line in filter(None, refs):
            sha, ref = line.split(" ", 1)
            if ref == "refs/bisect/bad":
                bad = sha
            elif ref.startswith("refs/bisect/good-"):
                goods.append(sha)
            elif ref.startswith("refs/bisect/skip-"):
                skipped.add(sha)
        if bad is None:
            raise GitError("git bisect: no refs/bisect/bad")
        left = run_git(self.dir, "rev-list", bad, "--not", *goods).stdout.split()
        if left == [bad]:
            return BisectState(first_bad=bad)
        if set(left) - skipped <= {bad}:
            return BisectState(candidates=tuple(left))
        return BisectState(next=run_git(self.dir, "rev-parse", "BISECT_HEAD").stdout.strip(), left=len(set(left) - skipped))
