"""The rule families: one module per rule kind, each with its evaluator and its own helpers
(`kernel_count`, `accept_length`, `output_identity`, `tpot_gain`, `explained_gain`, `aa_noise`, `output_validity`), what
they share (`result`: a rule's result record), and `registry`, which maps a scenario's rule kind to
its evaluator. A new family is a module here and one line in `registry.EVALUATORS`.

Fail closed: a rule never passes on missing evidence. Every precondition a rule relies on is listed
in its result, and a violated one makes the rule INCONCLUSIVE with the reason. The evidence comes
from `sglang_spec_harness.verdict.evidence`, the statistics from `sglang_spec_harness.verdict.stats`.
"""
