"""Git for a point at a commit: the repository, and one worktree per commit.

Nothing here touches the user's checkout: every commit is checked out in a detached worktree of its
own under a temporary folder, removed again when the point is done (`harness bisect`, `harness sweep
--source`; git's own bisection is `sglang_spec_harness.bisect.git_bisect`).
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


def run_git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise HarnessInputError("git: not found on PATH (a point at a commit needs it)") from None
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
        done = run_git(path, "rev-parse", "--show-toplevel", check=False)
        if done.returncode != 0:
            raise HarnessInputError(f"--source {path}: not a git repository")
        self.root = Path(done.stdout.strip()).resolve()

    def resolve(self, rev: str, flag: str) -> str:
        done = run_git(self.root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
        if done.returncode != 0 or not done.stdout.strip():
            raise HarnessInputError(f"{flag} {rev}: no such commit in {self.root}")
        return done.stdout.strip()

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return run_git(self.root, "merge-base", "--is-ancestor", ancestor, descendant, check=False).returncode == 0

    def count_between(self, good: str, bad: str) -> int:
        """Commits in good..bad: the candidates for the first bad one."""
        return int(run_git(self.root, "rev-list", "--count", f"{good}..{bad}").stdout.strip())

    def commit(self, rev: str) -> Commit:
        out = run_git(self.root, "show", "-s", "--format=%H%x00%s%x00%aI", rev).stdout.strip()
        sha, subject, date = out.split("\x00")
        return Commit(sha, subject, date)

    def worktrees(self) -> list[Path]:
        out = run_git(self.root, "worktree", "list", "--porcelain").stdout
        return [Path(line[len("worktree "):]) for line in out.splitlines() if line.startswith("worktree ")]


class Worktrees:
    """Detached worktrees under one temporary folder; `close()` removes them all (also after Ctrl-C)."""

    def __init__(self, repo: Repo):
        self.repo = repo
        self.root = Path(tempfile.mkdtemp(prefix="harness-worktrees-")).resolve()
        self.paths: list[Path] = []

    def add(self, commit: str, name: str, *, checkout: bool = True) -> Path:
        path = self.root / name
        self.paths.append(path)
        args = ["worktree", "add", "--detach", *([] if checkout else ["--no-checkout"]), str(path), commit]
        run_git(self.repo.root, *args)
        return path

    def remove(self, path: Path) -> None:
        run_git(self.repo.root, "worktree", "remove", "--force", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
        if path in self.paths:
            self.paths.remove(path)

    def close(self) -> None:
        for path in list(self.paths):
            self.remove(path)
        shutil.rmtree(self.root, ignore_errors=True)
        run_git(self.repo.root, "worktree", "prune", check=False)
