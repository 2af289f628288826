"""The run stage's progress hooks: what a run says while it goes. The default does nothing;
`sglang_spec_harness.commands.progress.TerminalProgress` shows them on the terminal, and a
bisection or a sweep hands its own to each run it starts.

A module of its own, so that the launches (`launch.py`) and the trials (`trial.py`) call the hooks
without importing the orchestrator (`execute.py`) that drives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the run stage's own records
    from sglang_spec_harness.rundir import LaunchRecord
    from sglang_spec_harness.run.outcome import TrialOutcome
    from sglang_spec_harness.run.plan import Launch, Trial


class RunProgress:
    """Hooks for showing progress; the default does nothing."""

    def run_started(self, run_dir: Path, plan: list[Trial]) -> None: ...

    def launch_ready(self, launch: Launch, record: LaunchRecord) -> None: ...

    def trial_started(self, trial: Trial, total_requests: int) -> None: ...

    def request_done(self, trial: Trial, done: int, total: int) -> None: ...

    def trial_finished(self, trial: Trial, outcome: TrialOutcome) -> None: ...

    def note(self, text: str) -> None: ...
