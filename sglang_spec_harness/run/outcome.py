"""What one trial ends with (`TrialOutcome`): what the trial runner (`trial.py`) returns and what
the run (`execute.py`) and its progress hooks (`progress.py`) read, in a module of its own so that
the hooks need not import the trial that calls them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sglang_spec_harness.run.plan import Trial
from sglang_spec_harness.rundir import TrialSummary


@dataclass
class TrialOutcome:
    trial: Trial
    status: Literal["ok", "failed"]
    error: str | None = None
    summary: TrialSummary | None = None
    traces: list[str] = field(default_factory=list)
    server_pid: int | None = None
    log_tail: list[str] = field(default_factory=list)
