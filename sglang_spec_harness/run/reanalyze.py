"""`harness analyze --run-dir RUN`: analyse a run directory's profiled trials again and rewrite its
analysis.json, as the run stage writes it. For a run analysed by an older harness (analysis.json
without the trace views the report draws), or after the analysis itself changed."""

from __future__ import annotations

from pathlib import Path

from sglang_spec_harness.rundir import SCHEMA_VERSION, AnalysisRecord, load_run_dir, write_record


def reanalyze_run(run_dir: str | Path) -> AnalysisRecord:
    """Every ok profiled trial with traces, analysed with the run's scenario (its patterns and
    regions); a trial whose analysis fails is in `errors`, as in a run. Returns what was written."""
    from sglang_spec_harness.run.trial import analyze_trial_traces

    run = load_run_dir(run_dir)
    record = AnalysisRecord(schema_version=SCHEMA_VERSION, trials={})
    errors: dict[str, str] = {}
    for trial in run.trials:
        if trial.kind != "profiled" or not trial.ok or not trial.record.traces:
            continue
        try:
            record.trials[trial.name] = analyze_trial_traces(run.scenario, trial.dir, trial.record.traces)
        except Exception as exc:  # recorded, as the run stage records it: the rules then lack evidence
            errors[trial.name] = f"{type(exc).__name__}: {exc}"
    if errors:
        record.errors = errors
    write_record(run.path / "analysis.json", record)
    return record
