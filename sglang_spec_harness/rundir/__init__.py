"""The run directory: the contract between the run stage that writes it and the stages that read it
(checks, report, compare, history). docs/internals.md, "The run directory", describes each file.

- `models`: one pydantic model per record (run.json, launch.json, trial.json and its summary,
  requests.jsonl rows, analysis.json, environment.json, results.json) and SCHEMA_VERSION
- `write`: writing records, atomically
- `read`: reading and validating a run directory as hostile data (`load_run_dir`, `read_json`,
  `validated`, `inside`, `as_object`, `as_list`)
"""

from sglang_spec_harness.rundir.models import (
    SCHEMA_VERSION,
    AnalysisRecord,
    CheckResults,
    EnvironmentRecord,
    LaunchEntry,
    LaunchRecord,
    PlanEntry,
    Precondition,
    RequestRow,
    RuleResult,
    RunRecord,
    SweepPoint,
    TrialAnalysis,
    TrialRecord,
    TrialSummary,
)
from sglang_spec_harness.rundir.read import (
    RunDir,
    Trial,
    as_list,
    as_object,
    check_schema_version,
    inside,
    load_run_dir,
    read_json,
    read_record,
    read_requests,
    validated,
)
from sglang_spec_harness.rundir.write import RecordFile, now, record_json, request_line, write_record, write_requests

__all__ = [
    "SCHEMA_VERSION",
    "AnalysisRecord",
    "CheckResults",
    "EnvironmentRecord",
    "LaunchEntry",
    "LaunchRecord",
    "PlanEntry",
    "Precondition",
    "RecordFile",
    "RequestRow",
    "RuleResult",
    "RunDir",
    "RunRecord",
    "SweepPoint",
    "Trial",
    "TrialAnalysis",
    "TrialRecord",
    "TrialSummary",
    "as_list",
    "as_object",
    "check_schema_version",
    "inside",
    "load_run_dir",
    "now",
    "read_json",
    "read_record",
    "read_requests",
    "record_json",
    "request_line",
    "validated",
    "write_record",
    "write_requests",
]
