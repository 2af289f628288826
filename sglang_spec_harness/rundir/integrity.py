"""Whether a run directory is whole: every piece its records promise is on disk. A run cut short on
disk (a trial directory deleted, requests.jsonl truncated at a line) must not pass on what is left;
the verdict reports what is missing as its `run_intact` rule."""

from __future__ import annotations

from sglang_spec_harness.pages.numbers import count
from sglang_spec_harness.rundir.read import RunDir


def missing_pieces(run: RunDir) -> list[str]:
    """What is missing from a run directory, one line each: planned trials without a trial.json, ok
    trials whose requests.jsonl is missing or lacks measured requests their summary counts."""
    problems = []
    recorded = {t.dir.resolve() for t in run.trials}
    for entry in run.run.plan:
        if entry.dir and (run.path / entry.dir).resolve() not in recorded:
            problems.append(f"planned trial {entry.dir} has no trial.json")
    for trial in run.trials:
        if not trial.ok:
            continue
        expected = trial.summary.requests
        if not (trial.dir / "requests.jsonl").exists():
            problems.append(f"{trial.name}: requests.jsonl is missing")
        elif expected is not None and len(trial.requests) != expected:
            problems.append(f"{trial.name}: requests.jsonl holds {len(trial.requests)} measured request(s), "
                            f"trial.json counts {count(expected)}")
    return problems
