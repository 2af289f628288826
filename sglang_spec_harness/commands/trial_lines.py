"""Progress of the runs inside a sweep or a bisection, as plain indented lines."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_spec_harness.commands.run import trial_line
from sglang_spec_harness.run.execute import RunProgress


class TrialLines(RunProgress):
    """A run's progress as plain lines through `say`, indented under a sweep's or a bisection's own
    lines: each server when it is up, each trial when it ends."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.total, self.done, self.started_at = 0, 0, 0.0

    def run_started(self, run_dir: Path, plan: list) -> None:
        self.total, self.done = len(plan), 0

    def launch_ready(self, launch: Any, record: Any) -> None:
        if record.startup_s is not None:
            self.say(f"    server {launch.dir_name} ready in {record.startup_s:.0f} s")

    def trial_started(self, trial: Any, total_requests: int) -> None:
        self.started_at = time.monotonic()

    def trial_finished(self, trial: Any, outcome: Any) -> None:
        self.done += 1
        self.say("    " + trial_line(self.done, self.total, outcome, time.monotonic() - self.started_at))
