"""`harness sweep`: a scenario over a range of SGLang releases or revisions of a checkout, one run
per point through `sglang_spec_harness.points`, ingested into the history database, the change
points explained.

`result.py` (the request, the points and the outcome, sweep.json's shape, the progress hooks),
`run.py` (the sweep: the baseline once, then each point on its own), `measured.py` (what a point's
run measured), `facts.py` (the sweep's series and change points from the history database).
"""
