"""The verdicts, as results.json, JUnit, the pages and the terminal spell them (a StrEnum: each
verdict is its string, so it compares, formats and serialises as that string)."""

from __future__ import annotations

from enum import StrEnum

from sglang_spec_harness.errors import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS


class Verdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    # A rule with nothing to hold the numbers against (every bound unset) cannot fail, so it must not
    # pass either: it is reported as informational and left out of the overall verdict.
    INFO = "INFO"

    @property
    def exit_code(self) -> int:
        """The exit code of an overall verdict (INFO is never one)."""
        return EXIT_CODES[self]


PASS, FAIL, INCONCLUSIVE, INFO = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.INFO
EXIT_CODES = {PASS: EXIT_PASS, FAIL: EXIT_FAIL, INCONCLUSIVE: EXIT_INCONCLUSIVE}


def overall_verdict(verdicts: list[Verdict]) -> Verdict:
    """FAIL if any rule fails, else INCONCLUSIVE if any is inconclusive (or none can decide), else
    PASS. Informational rules (INFO) do not count."""
    verdicts = [v for v in verdicts if v != INFO]
    if FAIL in verdicts:
        return FAIL
    if not verdicts or INCONCLUSIVE in verdicts:
        return INCONCLUSIVE
    return PASS
