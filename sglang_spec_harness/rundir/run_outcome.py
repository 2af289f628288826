"""`harness run --json`: the one object a CI step reads on stdout, as a pydantic model.

The model is the documented shape (docs/schemas/run.schema.json is generated from it, `harness
validate --schema run` prints it); whoever builds the object (the command, a library call that runs
the chain) builds it to this. `results` is the run's results.json, as its own model reads it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sglang_spec_harness.errors import EXIT_BAD_INPUT
from sglang_spec_harness.rundir.models import CheckResults
from sglang_spec_harness.vocabulary import Verdict

# planned: a dry run; complete / incomplete: the run's own status (run.json); bad_input: refused
# before anything started (exit 2)
RunOutcomeStatus = Literal["planned", "complete", "incomplete", "bad_input"]


class RunPlan(BaseModel):
    """A dry run's plan: the mode, the trial and launch directories in run order, each arm's command."""

    model_config = ConfigDict(extra="forbid")

    mode: str
    trials: list[str]
    launches: list[str]
    commands: dict[str, str]


class RunOutcome(BaseModel):
    """`harness run --json`. run_dir, results and report are null where the run made none (a dry run,
    bad input, a run that ended before its checks); verdict is results' verdict; exit_code is the
    command's own (0 PASS, 1 FAIL, 2 bad input, 3 INCONCLUSIVE, 128 + signal when interrupted); error
    says why a run is incomplete or its input was refused; plan is a dry run's only."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    scenario: str | None = Field(description="the scenario's name (null where it could not be read)")
    status: RunOutcomeStatus
    run_dir: str | None
    verdict: Verdict | None
    exit_code: int
    error: str | None
    results: CheckResults | None
    report: str | None = Field(description="the run's index.html (null where its checks did not run)")
    plan: RunPlan | None = Field(default=None, description="a dry run's plan (absent otherwise)")


def bad_input_outcome(message: str) -> dict[str, Any]:
    """The object `harness run --json` prints when its input is refused (exit 2): the message, nothing run."""
    outcome = RunOutcome(scenario=None, status="bad_input", run_dir=None, verdict=None, exit_code=EXIT_BAD_INPUT,
                         error=message, results=None, report=None)
    return outcome.model_dump(mode="json", exclude={"plan"})
