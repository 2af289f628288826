"""Progress on the terminal: the one implementation of the run stage's hooks
(`sglang_spec_harness.run.progress.RunProgress`) that `harness run`, `harness bisect` and
`harness sweep` show, and the bisection's and the sweep's own lines around their runs.

Plain lines (CI logs, a pipe, `--no-progress`): one per server once it is up and one per trial once
it ends. On a terminal, `harness run` adds rich bars (the trials, the current trial's requests)
under those lines. Text from files and servers is printed as is, never as rich markup.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from sglang_spec_harness.errors import one_line
from sglang_spec_harness.pages.numbers import fixed, seconds
from sglang_spec_harness.run.progress import RunProgress


def wants_bars(no_progress: bool) -> bool:
    """Bars only on a terminal, outside CI, unless `--no-progress`."""
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    return not no_progress and not in_ci and sys.stdout.isatty()


def trial_line(position: int, total: int, outcome: Any, elapsed_s: float) -> str:
    """`[3/6] 02-baseline-timed  TPOT 12.30 ms  accept 2.71  812.4 tok/s  (14.2 s)`, or why it failed."""
    from sglang_spec_harness.rundir import TrialSummary  # pydantic: not when the CLI only parses arguments

    trial, summary = outcome.trial, outcome.summary or TrialSummary()
    if outcome.status == "ok":
        detail = (
            f"TPOT {fixed(summary.median_tpot_ms, 2, 'ms')}  accept {fixed(summary.accept_length, 2)}  "
            f"{fixed(summary.output_throughput_tok_s, 1, 'tok/s')}"
        )
        if trial.kind == "profiled":
            detail += f"  traces {len(outcome.traces)}"
    else:
        detail = f"FAILED: {one_line(outcome.error)}"
    return f"[{position}/{total}] {trial.dir_name:<24} {detail}  ({seconds(elapsed_s, 1)})"


class TerminalProgress(RunProgress):
    """A run's progress as lines on `stream` (stdout by default), each after `indent` (a run inside
    a bisection's or a sweep's steps); with `bars`, rich bars below the lines. Call `stop` when the
    run is over, also after an error, to give the terminal back."""

    def __init__(self, stream: TextIO | None = None, *, bars: bool = False, indent: str = ""):
        self.stream, self.indent = stream, indent
        self.total = 0
        self.done = 0  # trials finished (a subset of a plan keeps the full plan's indices)
        self.trial_started_at = 0.0
        self.bars: Any = None
        self.run_task: Any = None
        self.trial_task: Any = None
        if bars:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bars = Progress(TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(file=stream, highlight=False), transient=True)

    def say(self, text: str) -> None:
        if self.bars is not None:
            # as is (it may quote server output), one line however wide
            self.bars.console.print(self.indent + text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(self.indent + text, file=self.stream or sys.stdout, flush=True)

    def run_started(self, run_dir: Path, plan: list) -> None:
        self.total, self.done = len(plan), 0
        self.say(f"run: {run_dir} ({len(plan)} trials)")
        if self.bars is not None:
            self.bars.start()
            self.run_task = self.bars.add_task("trials", total=len(plan))

    def launch_ready(self, launch: Any, record: Any) -> None:
        self.say(f"launch {launch.dir_name}: up in {seconds(record.startup_s, 1)}, warmed up in "
                 f"{seconds(record.warmup_s, 1)} (pid {record.server_pid}, port {record.port})")

    def trial_started(self, trial: Any, total_requests: int) -> None:
        self.trial_started_at = time.monotonic()
        if self.bars is not None:
            if self.trial_task is not None:
                self.bars.remove_task(self.trial_task)
            self.trial_task = self.bars.add_task(f"{trial.dir_name} requests", total=total_requests)

    def request_done(self, trial: Any, done: int, total: int) -> None:
        if self.trial_task is not None:
            self.bars.update(self.trial_task, completed=done)

    def trial_finished(self, trial: Any, outcome: Any) -> None:
        self.done += 1
        self.say(trial_line(self.done, self.total, outcome, time.monotonic() - self.trial_started_at))
        if self.run_task is not None:
            self.bars.advance(self.run_task)

    def note(self, text: str) -> None:
        self.say(text)

    def stop(self) -> None:
        if self.bars is not None:
            self.bars.stop()


class RunsProgressLines:
    """Progress of work made of runs (a bisection's steps, a sweep's points) as lines on `stream`,
    each run's own lines (a `TerminalProgress`) indented under the line of its step."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.run: RunProgress = TerminalProgress(stream, indent="    ")

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
