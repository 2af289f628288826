"""A scenario run at another commit or release: what `harness bisect` and `harness sweep` share.

`git.py` (the repository, a detached worktree per commit), `plan.py` (the rules a point is judged by,
which trials run once and which at every point), `scenario_at.py` (the scenario with one variant at a
commit or a release, and where a release's environment comes from), `runner.py` (one point's run,
checks and report: `PointRunner`), `reuse.py` (a sweep's stored run standing for a point).
"""
