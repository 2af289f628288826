"""`harness bisect`: find the commit of a source repository that broke a scenario's rules.

`git.py` (the repository, a worktree per commit, git's own bisection), `plan.py` (what a step runs,
under which scenario), `search.py` (the steps and the outcome), `page.py` (the bisection's page).
"""

from harness.bisect.search import BisectProgress, BisectRequest, BisectResult, Step, run_bisection

__all__ = ["BisectProgress", "BisectRequest", "BisectResult", "Step", "run_bisection"]
