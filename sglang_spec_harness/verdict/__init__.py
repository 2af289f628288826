"""The verdict stage: the evidence pulled out of a run directory (`evidence`), the rule families that
judge it (`rules/`: one module per kind, and `rules.registry`), the flow that judges a run and writes
results.json (`judge`), the statistics the rules rest on (`stats`), and the comparison of two stored
runs (`compare`)."""
