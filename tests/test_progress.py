"""Progress on the terminal (commands/progress.TerminalProgress): the same lines with and without
rich's bars, indented inside a bisection's or a sweep's steps, text from servers never read as markup."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_spec_harness.commands.progress import TerminalProgress
from sglang_spec_harness.run.plan import plan_trials
from sglang_spec_harness.run.outcome import TrialOutcome
from sglang_spec_harness.rundir import TrialSummary
from sglang_spec_harness.scenario import scenario_from_dict

PLAN = plan_trials(scenario_from_dict({"name": "p", "engine": "micro", "variants": {"baseline": {}, "candidate": {}},
                                       "trials": {"repetitions": 1, "profiled": 1, "order": "abba"}}))


def _run(progress: TerminalProgress) -> None:
    profiled, _, timed = PLAN[0], PLAN[1], PLAN[2]
    progress.run_started(Path("/runs/20260101-000000-p"), PLAN)
    progress.launch_ready(SimpleNamespace(dir_name="00-baseline-launch0"),
                          SimpleNamespace(startup_s=4.25, warmup_s=None, server_pid=41, port=30000))
    progress.trial_started(profiled, 4)
    progress.request_done(profiled, 2, 4)
    progress.trial_finished(profiled, TrialOutcome(profiled, "ok", traces=["a.trace.json.gz"], summary=TrialSummary(
        median_tpot_ms=12.345, accept_length=2.5, output_throughput_tok_s=812.44)))
    progress.note("look 1: [bold]continue[/bold]")
    progress.trial_started(timed, 4)
    progress.trial_finished(timed, TrialOutcome(timed, "failed", error="server said\n[red]no[/red]"))
    progress.stop()


EXPECTED = [
    "run: /runs/20260101-000000-p (4 trials)",
    "launch 00-baseline-launch0: up in 4.2 s, warmed up in – (pid 41, port 30000)",
    "[1/4] 00-baseline-profiled     TPOT 12.35 ms  accept 2.50  812.4 tok/s  traces 1  (S)",
    "look 1: [bold]continue[/bold]",
    r"[2/4] 02-baseline-timed        FAILED: server said\n[red]no[/red]  (S)",
]


@pytest.mark.parametrize("bars", [False, True])
@pytest.mark.parametrize("indent", ["", "    "])
def test_the_lines_are_the_same_with_and_without_bars(bars, indent):
    stream = io.StringIO()
    _run(TerminalProgress(stream, bars=bars, indent=indent))
    # the bars themselves are not drawn on a stream that is not a terminal; stopping them ends a line
    lines = [re.sub(r"\(\d+\.\d s\)$", "(S)", line) for line in stream.getvalue().splitlines() if line]
    assert lines == [indent + line for line in EXPECTED]
