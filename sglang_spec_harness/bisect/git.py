"""Git for `harness bisect`: the repository, one worktree per commit, and git's own bisection.

Nothing here touches the user's checkout: every commit is checked out in a detached worktree of its
own under a temporary folder, and the bisection state lives in another worktree without a checkout
(`refs/bisect/*`, BISECT_LOG are per worktree), so a `git bisect` the user has going is not
disturbed. Which commit to test next is git's choice (`git bisect start --no-checkout`: its midpoint
over the commit graph, merges included, and its `skip` rules); whether the search is over is read
from the refs, not from git's messages.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglang_spec_harness.errors import HarnessInputError


class GitError(RuntimeError):
    """A git command that should have worked did not (not the user's input)."""


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise HarnessInputError("git: not found on PATH (harness bisect needs it)") from None
    if check and done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GitError(f"git {' '.join(args)}: exit {done.returncode}: {last}")
    return done


@dataclass(frozen=True)
class Commit:
    hash: str
    subject: str
    author_date: str  # ISO 8601

    @property
    def short(self) -> str:
        return self.hash[:12]


class Repo:
    """A git repository given by the user (`--source`); any folder inside it will do."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not path.is_dir():
            raise HarnessInputError(f"--source {path}: no such directory")
        done = _git(path, "rev-parse", "--show-toplevel", check=False)
        if done.returncode != 0:
            raise HarnessInputError(f"--source {path}: not a git repository")
        self.root = Path(done.stdout.strip()).resolve()

    def resolve(self, rev: str, flag: str) -> str:
        done = _git(self.root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
        if done.returncode != 0 or not done.stdout.strip():
            raise HarnessInputError(f"{flag} {rev}: no such commit in {self.root}")
        return done.stdout.strip()

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return _git(self.root, "merge-base", "--is-ancestor", ancestor, descendant, check=False).returncode == 0

    def count_between(self, good: str, bad: str) -> int:
        """Commits in good..bad: the candidates for the first bad one."""
        return int(_git(self.root, "rev-list", "--count", f"{good}..{bad}").stdout.strip())

    def commit(self, rev: str) -> Commit:
        out = _git(self.root, "show", "-s", "--format=%H%x00%s%x00%aI", rev).stdout.strip()
        sha, subject, date = out.split("\x00")
        return Commit(sha, subject, date)

    def worktrees(self) -> list[Path]:
        out = _git(self.root, "worktree", "list", "--porcelain").stdout
        return [Path(line[len("worktree "):]) for line in out.splitlines() if line.startswith("worktree ")]


class Worktrees:
    """Detached worktrees under one temporary folder; `close()` removes them all (also after Ctrl-C)."""

    def __init__(self, repo: Repo):
        self.repo = repo
        self.root = Path(tempfile.mkdtemp(prefix="harness-bisect-")).resolve()
        self.paths: list[Path] = []

    def add(self, commit: str, name: str, *, checkout: bool = True) -> Path:
        path = self.root / name
        self.paths.append(path)
        args = ["worktree", "add", "--detach", *([] if checkout else ["--no-checkout"]), str(path), commit]
        _git(self.repo.root, *args)
        return path

    def remove(self, path: Path) -> None:
        _git(self.repo.root, "worktree", "remove", "--force", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
        if path in self.paths:
            self.paths.remove(path)

    def close(self) -> None:
        for path in list(self.paths):
            self.remove(path)
        shutil.rmtree(self.root, ignore_errors=True)
        _git(self.repo.root, "worktree", "prune", check=False)


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
        _git(self.dir, "bisect", "start", "--no-checkout", bad, good)

    def mark(self, commit: str, term: str) -> BisectState:
        assert term in ("good", "bad", "skip")
        done = _git(self.dir, "bisect", term, commit, check=False)
        state = self.state()
        if done.returncode != 0 and state.next is not None:  # rc 2 when only skipped commits are left
            raise GitError(f"git bisect {term} {commit}: exit {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
        return state

    def state(self) -> BisectState:
        refs = _git(self.dir, "for-each-ref", "--format=%(objectname) %(refname)", "refs/bisect/").stdout.split("\n")
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
        left = _git(self.dir, "rev-list", bad, "--not", *goods).stdout.split()
        if left == [bad]:
            return BisectState(first_bad=bad)
        if set(left) - skipped <= {bad}:
            return BisectState(candidates=tuple(left))
        return BisectState(next=_git(self.dir, "rev-parse", "BISECT_HEAD").stdout.strip(), left=len(set(left) - skipped))
