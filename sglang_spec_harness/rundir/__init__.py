"""The run directory: the contract between the run stage that writes it and the stages that read it
(the verdict, report, compare, history). docs/internals.md, "The run directory", describes each file.

- `models`: one pydantic model per record (run.json, launch.json, trial.json and its summary,
  requests.jsonl rows, analysis.json, environment.json, results.json) and SCHEMA_VERSION
- `write`: writing records, atomically
- `read`: reading and validating a run directory as hostile data: `load_run_dir` (strict for
  `harness check`, lenient for the report and the history), `read_record`, `read_json`, `validated`, `inside`,
  and the readers' one size cap (`MAX_FILE_BYTES`) and idea of a valid number (`valid_number`)
- `migrations`: records of older schema versions brought to the current one on load
- `integrity`: whether a run directory is whole (`missing_pieces`)
- `schemas`: the JSON Schemas generated from these models (docs/schemas/)
"""

from sglang_spec_harness.rundir.integrity import missing_pieces
from sglang_spec_harness.rundir.models import (
    MAX_NUMBER,
    SCHEMA_VERSION,
    AnalysisRecord,
    EnvironmentRecord,
    LaunchEntry,
    LaunchRecord,
    PlanEntry,
    Precondition,
    RequestRow,
    ResultsRecord,
    RuleResult,
    RunRecord,
    SweepPoint,
    TrialAnalysis,
    TrialRecord,
    TrialSummary,
    Vocabulary,
)
from sglang_spec_harness.rundir.read import (
    MAX_FILE_BYTES,
    RunDir,
    StoredTrial,
    as_list,
    as_object,
    inside,
    is_run_dir,
    load_run_dir,
    read_json,
    read_record,
    read_requests,
    valid_number,
    validated,
)
from sglang_spec_harness.rundir.write import RecordFile, now, record_json, request_line, write_record, write_requests

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_NUMBER",
    "SCHEMA_VERSION",
    "AnalysisRecord",
    "EnvironmentRecord",
    "LaunchEntry",
    "LaunchRecord",
    "PlanEntry",
    "Precondition",
    "RecordFile",
    "RequestRow",
    "ResultsRecord",
    "RuleResult",
    "RunDir",
    "RunRecord",
    "StoredTrial",
    "SweepPoint",
    "TrialAnalysis",
    "TrialRecord",
    "TrialSummary",
    "Vocabulary",
    "as_list",
    "as_object",
    "inside",
    "is_run_dir",
    "load_run_dir",
    "missing_pieces",
    "now",
    "read_json",
    "read_record",
    "read_requests",
    "record_json",
    "request_line",
    "valid_number",
    "validated",
    "write_record",
    "write_requests",
]
