"""The CI gate on a run's results: which verdicts fail a job, which warn, in a pull request's check
and in the nightly (`harness gate RUN_DIR --mode pr|nightly`).

The verdict says what the evidence shows; the gate says what a CI job does with it, and it fails
closed:
- a rule that FAILs fails the job, in every mode;
- an exact rule (any kind not judged on timing: kernel counts, accept length, outputs, the run's own
  validity, and kinds added later) that ends INCONCLUSIVE or NOT_RUN fails the job: missing evidence
  is never a pass (a renamed draft span leaves the kernel rules INCONCLUSIVE);
- a timing rule (tpot_gain, explained_gain, aa_noise) that ends INCONCLUSIVE warns on a pull
  request (a small effect may need more rounds than a check can spend) and fails the nightly;
  one NOT_RUN (an exact-only run, the pull request's default) is a notice on a pull request and
  fails the nightly, which must run the whole design;
- results in which no rule passed fail the job: nothing was judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sglang_spec_harness.errors import EXIT_FAIL, EXIT_PASS, HarnessInputError
from sglang_spec_harness.rundir import ResultsRecord, RuleResult
from sglang_spec_harness.rundir.read import read_record
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, INFO, NOT_RUN, PASS, is_timing_kind

GateMode = Literal["pr", "nightly"]
GATE_MODES: tuple[GateMode, ...] = ("pr", "nightly")
Level = Literal["error", "warning", "notice"]


@dataclass(frozen=True)
class GateLine:
    """What the gate says about one rule (or, with `rule` None, about the results as a whole)."""

    level: Level
    rule: str | None
    kind: str | None
    verdict: str | None
    why: str  # the gate's reason, in its own words
    reason: str  # the rule's own reason, from results.json

    def text(self) -> str:
        what = f"{self.rule} ({self.kind}) {self.verdict}" if self.rule is not None else "results"
        return f"{what}: {self.why}" + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class GateDecision:
    mode: GateMode
    scenario: str
    verdict: str
    lines: list[GateLine]
    passed_rules: int

    @property
    def failed(self) -> bool:
        return any(line.level == "error" for line in self.lines)

    @property
    def exit_code(self) -> int:
        return EXIT_FAIL if self.failed else EXIT_PASS


def _rule_line(rule: RuleResult, mode: GateMode) -> GateLine | None:
    verdict, kind = str(rule.verdict), str(rule.kind)

    def line(level: Level, why: str) -> GateLine:
        return GateLine(level, rule.name, kind, verdict, why, rule.reason)

    if verdict in (PASS, INFO):
        return None
    if verdict == FAIL:
        return line("error", "the rule failed")
    if not is_timing_kind(kind):
        return line("error", "an exact rule without a verdict is missing evidence, never a pass")
    if verdict == INCONCLUSIVE:
        if mode == "pr":
            return line("warning", "timing undecided; a pull request's check warns, the nightly fails on it")
        return line("error", "timing undecided: the nightly runs the whole design and needs a verdict")
    if verdict == NOT_RUN:
        if mode == "pr":
            return line("notice", "timing not measured in this exact-only run; the nightly measures it")
        return line("error", "the nightly must run the timing rules (no --only exact)")
    return line("error", f"verdict {verdict!r} is not one the gate knows: no pass")


def decide(results: ResultsRecord, mode: GateMode) -> GateDecision:
    """The gate's decision on `results` in `mode` (see the module's docstring)."""
    if mode not in GATE_MODES:
        raise HarnessInputError(f"gate mode {mode!r}: expected one of {', '.join(GATE_MODES)}")
    lines = [line for rule in results.rules if (line := _rule_line(rule, mode)) is not None]
    passed = sum(1 for rule in results.rules if rule.verdict == PASS)
    if not passed:
        lines.append(GateLine("error", None, None, str(results.verdict), "no rule passed: nothing was judged", ""))
    order = {"error": 0, "warning": 1, "notice": 2}
    lines.sort(key=lambda line: order[line.level])
    return GateDecision(mode=mode, scenario=results.scenario, verdict=str(results.verdict), lines=lines,
                        passed_rules=passed)


def gate_run_dir(run_dir: str | Path, mode: GateMode) -> GateDecision:
    """The gate on a run directory's results.json, as `harness run` or `harness check` wrote it.
    No results.json (the run gave no verdict) is bad input: exit 2, which fails a CI step too."""
    path = Path(run_dir) / "results.json"
    if not Path(run_dir).is_dir():
        raise HarnessInputError(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise HarnessInputError(f"{path}: missing: the run gave no verdict (its server log and run.json say why; "
                                f"`harness check {run_dir}` evaluates a complete run)")
    return decide(read_record(path, ResultsRecord), mode)
