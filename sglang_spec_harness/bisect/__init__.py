"""`harness bisect`: find the commit of a source repository that broke a scenario's rules.

`git.py` (the repository, a worktree per commit, git's own bisection), `plan.py` (what a step runs,
under which scenario), `result.py` (the request, the steps and the outcome), `search.py` (the search
that fills them in), `page.py` (the bisection's page).
"""

from sglang_spec_harness.bisect.result import BisectRequest, BisectResult, Step
from sglang_spec_harness.bisect.search import BisectProgress, run_bisection

__all__ = ["BisectProgress", "BisectRequest", "BisectResult", "Step", "run_bisection"]
