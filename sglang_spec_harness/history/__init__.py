"""History across runs: a results database (`db.py`), what one run directory contributes to it
(`extract.py`), ingesting (`ingest.py`), change points (`changepoints.py`: exact and E-divisive), the
series (in time order, or a sweep's release order) and their change points as plain facts
(`analyze.py`), each change point's explanation, the kernel diff between the runs on either side
(`explain.py`), and the trend page (`page.py`, on the run report's page machinery). See
docs/history.md and docs/internals.md, "History".
"""
