"""History across runs: a results database (`db.py`), what one run directory contributes to it
(`extract.py`), ingesting (`ingest.py`), change points (`changepoints.py`), the series and their
change points as plain facts (`analyze.py`), and the trend page (`page.py`, on the run report's page
machinery). See docs/internals.md, "History".
"""
