"""`harness bisect`: find the commit of a source repository that broke a scenario's rules.

`git_bisect.py` (git's own bisection), `result.py` (the request, the steps and the outcome),
`search.py` (the search that fills them in), `page.py` (the bisection's page). What a step runs, at
which commit or release, and the run itself are `sglang_spec_harness.points`, which `harness sweep`
shares.
"""

from sglang_spec_harness.bisect.result import BisectRequest, BisectResult, Step
from sglang_spec_harness.bisect.search import BisectProgress, run_bisection

__all__ = ["BisectProgress", "BisectRequest", "BisectResult", "Step", "run_bisection"]
