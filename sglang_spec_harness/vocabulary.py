"""The words every stage shares: verdicts, region names, rule kinds.

A leaf module (it imports only the exit codes from `errors`), so that the run directory, the
verdict, the report, the history and the bisection all spell these the same way, from one place.
"""

from __future__ import annotations

from enum import StrEnum

from sglang_spec_harness.errors import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS

# ---- verdicts -----------------------------------------------------------------------------------


# A verdict as results.json, JUnit, the pages and the terminal spell it (a StrEnum: each verdict is
# its string, so it compares, formats and serialises as that string). No docstring: it would become
# the description of every verdict field in the committed JSON Schemas.
class Verdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    # A rule with nothing to hold the numbers against (every bound unset) cannot fail, so it must not
    # pass either: it is reported as informational and left out of the overall verdict.
    INFO = "INFO"
    # A timing rule of a run that planned no timed rounds (`trials.only: exact`, `harness run --only
    # exact`): reported, never a PASS, and left out of the overall verdict like INFO; a CI gate
    # decides what it means there (sglang_spec_harness.verdict.gate).
    NOT_RUN = "NOT_RUN"

    @property
    def exit_code(self) -> int:
        """The exit code of an overall verdict (INFO is never one)."""
        return EXIT_CODES[self]


PASS, FAIL, INCONCLUSIVE, INFO, NOT_RUN = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.INFO, Verdict.NOT_RUN
EXIT_CODES = {PASS: EXIT_PASS, FAIL: EXIT_FAIL, INCONCLUSIVE: EXIT_INCONCLUSIVE}


def overall_verdict(verdicts: list[Verdict]) -> Verdict:
    """FAIL if any rule fails, else INCONCLUSIVE if any is inconclusive (or none can decide), else
    PASS. Informational rules (INFO) and rules not run (NOT_RUN) do not count."""
    verdicts = [v for v in verdicts if v not in (INFO, NOT_RUN)]
    if FAIL in verdicts:
        return FAIL
    if not verdicts or INCONCLUSIVE in verdicts:
        return INCONCLUSIVE
    return PASS


# ---- regions ------------------------------------------------------------------------------------
# The harness's names for the three graphs of an EAGLE cycle and the prefill's draft extend. Plain
# strings, not an enum: a scenario or `--region` may name regions of its own.

DRAFT_DECODE = "DRAFT_DECODE"
DRAFT_EXTEND = "DRAFT_EXTEND"
TARGET_VERIFY = "TARGET_VERIFY"
PREFILL = "PREFILL"
# The region of a launch or op that no table entry labels.
NO_REGION = "(none)"
# The regions of one decoding cycle, in the order a cycle runs them.
CYCLE_REGIONS = (DRAFT_DECODE, TARGET_VERIFY, DRAFT_EXTEND)
# The region whose instances count cycles: one target verify per cycle.
CYCLE_REGION = TARGET_VERIFY
# The order tables and figures show regions in.
REGION_ORDER = (*CYCLE_REGIONS, PREFILL, NO_REGION)


# ---- rule kinds ---------------------------------------------------------------------------------


class RuleKind(StrEnum):
    """The `kind` of a rule in results.json (and of a rule in a scenario, but for AA_NOISE, which
    `harness run --aa` adds itself)."""

    KERNEL_COUNT = "kernel_count"
    ACCEPT_LENGTH = "accept_length"
    OUTPUT_IDENTITY = "output_identity"
    TPOT_GAIN = "tpot_gain"
    EXPLAINED_GAIN = "explained_gain"
    OUTPUT_VALIDITY = "output_validity"
    AA_NOISE = "aa_noise"


# The kinds a scenario's `rules:` may name.
SCENARIO_RULE_KINDS = tuple(kind for kind in RuleKind if kind != RuleKind.AA_NOISE)

# The kinds judged on timed rounds: their evidence is statistical and costs the run's whole timing
# design. Every other kind (kernel counts, accept length, outputs, the run's own validity, and any
# kind added later) is judged on exact evidence, which no amount of timing changes: a CI gate treats
# such a rule that ends INCONCLUSIVE as missing evidence, never as a warning.
TIMING_KINDS = frozenset({RuleKind.TPOT_GAIN, RuleKind.EXPLAINED_GAIN, RuleKind.AA_NOISE})


def is_timing_kind(kind: object) -> bool:
    """A rule kind judged on timed rounds (TIMING_KINDS); anything else, unknown kinds included, is exact."""
    return isinstance(kind, str) and kind in TIMING_KINDS
