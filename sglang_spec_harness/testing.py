"""Profile a live SGLang server from a test, and assert on what its graph replays ran.

SGLang runs the model in a scheduler child process: a `torch.profiler.profile` opened in the test's
own process never sees the draft's CUDA graphs. `profile_server` profiles the server itself, by URL,
through its `/start_profile` API (as `harness run` does), sends the requests that make the profiled
steps happen, waits for the trace files the server writes, and analyses them with the harness's
trace analysis (`harness analyze`): the same regions, patterns and counting units.

    profile = profile_server("http://127.0.0.1:30000", num_steps=16)
    profile.count("softmax", region="DRAFT_DECODE")        # (0, 0, ...): matches per replay
    profile.count("softmax", region="DRAFT_DECODE", per="total")
    profile.frame()                                         # every region x pattern x replay
    assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")

pytest users get it as the `sglang_profile` fixture (sglang_spec_harness.pytest_plugin, loaded through the
`pytest11` entry point). Counts fail closed: where the traces cannot support a count,
`CountUnavailable` is raised, never a 0. docs/analysis.md has the whole story.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import tempfile
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import pandas as pd

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.pages.numbers import MISSING
from sglang_spec_harness.run.profiling import TRACE_GLOB, ProfilingError, collect_traces, start_profile, stop_profile, trace_files
from sglang_spec_harness.run.workload import Prompt, send_requests
from sglang_spec_harness.scenario import ProfileSpec, WorkloadSpec
from sglang_spec_harness.traces.analysis import AnalyzedTraces, analyze_traces_with_tables
from sglang_spec_harness.traces.patterns import DEFAULT_COUNT_PATTERNS
from sglang_spec_harness.traces.regions import DEFAULT_SGLANG_REGIONS, RegionTable, region_table
from sglang_spec_harness.vocabulary import NO_REGION
from sglang_spec_harness.traces.replays import CountUnavailable, ReplayCounts, counting_query, replay_counts
from sglang_spec_harness.traces.schema import TraceAnalysis

__all__ = [
    "DEFAULT_COUNT_PATTERNS",
    "DEFAULT_PROMPTS",
    "DEFAULT_SGLANG_REGIONS",
    "CountUnavailable",
    "ProfilingError",
    "ReplayCounts",
    "ServerProfile",
    "assert_kernel",
    "assert_no_kernel",
    "profile_server",
    "run_scenario",
]

# Short prompts in the style of SGLang's EAGLE tests; any model's tokenizer takes them.
DEFAULT_PROMPTS: tuple[str, ...] = (
    "Today is a sunny day and I like",
    "The capital of France is",
    "Write a short poem about the sea:",
    "1, 2, 3, 4, 5,",
)
# The activities a trace is written for (torch profiler); the others (MEM, RPD, CUDA_PROFILER) write
# none that the analysis reads.
TRACE_ACTIVITIES = ("CPU", "GPU")
KNOWN_ACTIVITIES = ("CPU", "GPU", "MEM", "RPD", "CUDA_PROFILER")
Per = Literal["replay", "total"]
T = TypeVar("T")


@dataclass(frozen=True)
class ServerProfile:
    """The analysed traces of one profile: `count()`, `counts()` and `frame()` read them.

    traces: the trace files (one per TP rank). analyzed: the analysis with its trace tables
    (`analyzed.analysis` is the whole `TraceAnalysis`: its JSON, op tables; `analyzed.launches_frame()`
    and the other frames; docs/analysis.md). base_url: the server profiled (None: read from files).
    """

    traces: tuple[Path, ...]
    analyzed: AnalyzedTraces
    base_url: str | None = None

    @classmethod
    def from_traces(cls, paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str], *,
                    patterns: Mapping[str, str] | None = None, regions: Mapping[str, str] | None = None,
                    base_url: str | None = None) -> ServerProfile:
        """Analyse stored traces (Kineto `.json`/`.json.gz`, Nsight `.sqlite`; one per TP rank) as
        `profile_server` analyses the ones it collects. patterns: NAME -> regex, counted besides the
        default `softmax`; regions: NAME -> regex, put in front of the default region table."""
        files = (paths,) if isinstance(paths, (str, os.PathLike)) else tuple(paths)
        if not files:
            raise HarnessInputError("ServerProfile.from_traces: no trace file given")
        traces = tuple(Path(os.fsdecode(p)) for p in files)
        analyzed = analyze_traces_with_tables(traces, {**DEFAULT_COUNT_PATTERNS, **(patterns or {})},
                                              region_table(regions))
        return cls(traces, analyzed, base_url)

    @property
    def analysis(self) -> TraceAnalysis:
        """The analysis document (as `harness analyze --json` prints it)."""
        return self.analyzed.analysis

    @property
    def unit(self) -> Literal["graph_launch", "span"]:
        """What one replay is: a CUDA/HIP graph launch on a GPU trace, a region span on a CPU-only one."""
        return "graph_launch" if self.analysis.combined.validity.subject == "gpu_ops" else "span"

    @property
    def regions(self) -> list[str]:
        """The regions with at least one replay (in `unit`), in the analysis's order."""
        return [name for name, row in self.analysis.combined.regions.items() if row.unit == self.unit and row.units]

    @property
    def warnings(self) -> list[str]:
        """The analysis's validity warnings (docs/analysis.md): read them before believing a zero."""
        return list(self.analysis.combined.validity.warnings)

    def counts(self, pattern: str | re.Pattern[str], region: str) -> ReplayCounts:
        """The matches of `pattern` in each replay of `region` (and eager ones in its spans).

        pattern: a counted pattern's name (`softmax`, or one given to `profile_server`), else a
        regular expression. region: a region of the table (`DRAFT_DECODE`, `DRAFT_EXTEND`,
        `TARGET_VERIFY`, `PREFILL`, `(none)`, or one given to `profile_server`), else a regular
        expression over annotation names. Raises CountUnavailable where the traces cannot tell.
        """
        source = self.base_url or (str(self.traces[0]) if len(self.traces) == 1 else f"{len(self.traces)} traces")
        if isinstance(pattern, str) and pattern in self.analysis.patterns and (
                region == NO_REGION or region in self.table.region_names):
            return replay_counts(self.analyzed, region, pattern, source=source)
        # A pattern or region the analysis did not count: the same traces again, with it added.
        counted, table = counting_query(pattern, region, self.table, self.analysis.patterns)
        return replay_counts(analyze_traces_with_tables(self.traces, [counted], table), region, counted.name,
                             source=source)

    @overload
    def count(self, pattern: str | re.Pattern[str], *, region: str, per: Literal["replay"] = "replay") -> tuple[int, ...]: ...

    @overload
    def count(self, pattern: str | re.Pattern[str], *, region: str, per: Literal["total"]) -> int: ...

    def count(self, pattern: str | re.Pattern[str], *, region: str, per: Per = "replay") -> tuple[int, ...] | int:
        """`per="replay"`: the matches in each replay of `region` (file by file, in time order; never
        empty); `per="total"`: their sum. Eager matches are in `counts()`; see `assert_no_kernel`."""
        if per not in ("replay", "total"):
            raise HarnessInputError(f"count: per={per!r}: expected 'replay' or 'total'")
        counts = self.counts(pattern, region)
        return counts.per_replay if per == "replay" else counts.total

    @property
    def table(self) -> RegionTable:
        return RegionTable.from_pairs((rule.name, rule.regex) for rule in self.analysis.region_table)

    def frame(self) -> pd.DataFrame:
        """Tidy: one row per pattern, region and replay (in `unit`): pattern, region, unit, file, rank,
        replay (its index in the region, over files), ts (its CPU start, trace microseconds), count."""
        columns = ["pattern", "region", "unit", "file", "rank", "replay", "ts", "count"]
        frames = []
        for region in self.regions:
            for pattern in self.analysis.patterns:
                row = self.analysis.count(region, pattern, self.unit)
                if row is None or not row.known:
                    continue  # not evidence: counts() says why
                frame = self.analyzed.instances_frame(region, pattern, self.unit).reset_index(drop=True)
                frames.append(frame.assign(pattern=pattern, region=region, unit=self.unit, replay=frame.index))
        if not frames:
            return pd.DataFrame(columns=columns)
        return pd.concat(frames, ignore_index=True)[columns]


def profile_server(
    base_url: str,
    *,
    num_steps: int = 16,
    prompts: Sequence[str | Sequence[int]] = DEFAULT_PROMPTS,
    max_new_tokens: int = 32,
    activities: Sequence[str] = TRACE_ACTIVITIES,
    with_stack: bool = True,
    record_shapes: bool = False,
    output_dir: str | os.PathLike[str] | None = None,
    profile_id: str | None = None,
    patterns: Mapping[str, str] | None = None,
    regions: Mapping[str, str] | None = None,
    request_timeout_s: float = 300.0,
    trace_timeout_s: float = 300.0,
) -> ServerProfile:
    """Profile `num_steps` forward steps of the live SGLang server at `base_url` and analyse them.

    It POSTs `/start_profile` (`num_steps`, `activities`, `with_stack`, `record_shapes`, `output_dir`,
    `profile_id`), sends `prompts` at once to `/generate` (greedy, `max_new_tokens` each, EOS
    ignored; a prompt is a text or a list of token ids), waits for the server's trace files (it
    stops by itself after `num_steps`; else POST /stop_profile), and analyses them.

    with_stack (default on): the Python frames tell SGLang 0.5.23's draft extend after a prefill
    (which keeps its softmax in every variant) from the decode cycle's; on a CPU trace, where spans
    are the unit, counts in DRAFT_EXTEND need them. output_dir: where the server writes (it must
    see the same file system; default: a new temporary directory); it must hold no trace yet.
    patterns, regions: as `ServerProfile.from_traces`.

    Raises HarnessInputError for bad arguments, ProfilingError when the server refuses the profile,
    a request fails or no complete trace appears within `trace_timeout_s`.
    """
    _check_arguments(num_steps, prompts, max_new_tokens, activities)
    directory = Path(tempfile.mkdtemp(prefix="harness-server-profile-") if output_dir is None else output_dir)
    directory = directory.resolve()  # absolute: the server's working directory is not ours
    if trace_files(directory, TRACE_GLOB, traces_only=True):
        raise HarnessInputError(f"profile_server: output_dir {directory} already holds traces: give an empty directory")
    url = base_url.rstrip("/")
    spec = ProfileSpec(num_steps=num_steps, activities=list(activities), with_stack=with_stack,
                       record_shapes=record_shapes, trace_timeout_s=trace_timeout_s)
    start_profile(url, spec, output_dir=directory, profile_id=profile_id or f"harness-{uuid.uuid4().hex[:8]}",
                  timeout_s=min(120.0, request_timeout_s))
    workload = WorkloadSpec(num_requests=len(prompts), output_len=max_new_tokens, concurrency=len(prompts),
                            warmup_requests=0)
    batch = [Prompt(i, False, text=p) if isinstance(p, str) else Prompt(i, False, input_ids=list(p))
             for i, p in enumerate(prompts)]
    records = _run(send_requests(url, batch, workload, request_timeout_s=request_timeout_s))
    failed = next((r for r in records if r.error), None)
    if failed is not None:
        stop_profile(url, timeout_s=min(trace_timeout_s, request_timeout_s))  # leave no profiler running
        raise ProfilingError(f"{url}: prompt {failed.index} failed while profiling: {failed.error}")
    traces = collect_traces(url, directory, trace_timeout_s=trace_timeout_s,
                            stop_timeout_s=min(trace_timeout_s, request_timeout_s))
    return ServerProfile.from_traces(traces, patterns=patterns, regions=regions, base_url=url)


def assert_no_kernel(profile: ServerProfile, pattern: str | re.Pattern[str], *, region: str) -> ReplayCounts:
    """Assert that no replay of `region` ran `pattern` (a kernel; a CPU op on a CPU-only trace) and
    that none ran eagerly in its spans either. Returns the counts. CountUnavailable (an error, not a
    failure) where the traces cannot tell: a region with no replay proves no absence."""
    counts = profile.counts(pattern, region)
    if counts.total or counts.eager:
        raise AssertionError(f"{_what(profile, counts)}: expected none, found {_found(counts)}")
    return counts


def assert_kernel(profile: ServerProfile, pattern: str | re.Pattern[str], *, region: str, at_least: int = 1) -> ReplayCounts:
    """Assert that every replay of `region` ran `pattern` at least `at_least` times: the control that
    shows the analysis can see what `assert_no_kernel` finds absent elsewhere. Returns the counts."""
    counts = profile.counts(pattern, region)
    if counts.min() < at_least:
        raise AssertionError(f"{_what(profile, counts)}: expected >= {at_least} in every replay, found {_found(counts)}")
    return counts


def _what(profile: ServerProfile, counts: ReplayCounts) -> str:
    source = profile.base_url or ", ".join(p.name for p in profile.traces)
    unit = "graph replays" if counts.unit == "graph_launch" else "spans"
    return f"{source}: {counts.pattern!r} in {counts.region} ({counts.replays} {unit})"


def _found(counts: ReplayCounts) -> str:
    spread = f"{counts.min()}" if counts.min() == counts.max() else f"{counts.min()}..{counts.max()}"
    with_it = sum(1 for n in counts.per_replay if n)
    names = ", ".join(f"{name} x{n}" for name, n in sorted(counts.matched_names.items())) or MISSING
    eager = f", {counts.eager} launched eagerly in its spans" if counts.eager else ""
    return f"{spread} per replay ({with_it} of {counts.replays} replays, {counts.total} in all{eager}; {names})"


def _check_arguments(num_steps: int, prompts: Sequence[object], max_new_tokens: int, activities: Sequence[str]) -> None:
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise HarnessInputError(f"profile_server: num_steps={num_steps!r}: expected an integer >= 1")
    if isinstance(prompts, str) or not prompts:
        raise HarnessInputError("profile_server: prompts: expected a non-empty list of texts or token-id lists")
    for prompt in prompts:
        ids = not isinstance(prompt, str) and isinstance(prompt, Sequence) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        if not (isinstance(prompt, str) and prompt) and not ids:
            raise HarnessInputError(f"profile_server: prompt {prompt!r:.60}: expected a text or a list of token ids")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 2:
        raise HarnessInputError(f"profile_server: max_new_tokens={max_new_tokens!r}: expected an integer >= 2")
    unknown = [a for a in activities if a not in KNOWN_ACTIVITIES] if not isinstance(activities, str) else [activities]
    if unknown:
        raise HarnessInputError(f"profile_server: activities {unknown}: expected a list of {', '.join(KNOWN_ACTIVITIES)}")
    if not set(TRACE_ACTIVITIES) & set(activities):
        raise HarnessInputError("profile_server: activities name neither CPU nor GPU: the server writes no trace to analyse")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, also from a test that is itself inside a running event loop (pytest-asyncio)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# ---- a whole harness scenario from a test: run, check, report (sglang_spec_harness.pipeline) ------

if TYPE_CHECKING:
    from sglang_spec_harness.pipeline import RunOutcome
    from sglang_spec_harness.run.progress import RunProgress


def run_scenario(
    scenario: str | os.PathLike[str],
    *,
    overrides: Sequence[str] = (),
    out_root: str | os.PathLike[str] = "reports/runs",
    port: int | None = None,
    progress: RunProgress | None = None,
) -> RunOutcome:
    """Run a harness scenario as `harness run` does (its servers, trials, profiles, rules and report)
    and return its `RunOutcome`, to assert on:

        outcome = run_scenario("scenarios/sglang_cpu_tiny_eagle_topk1.yaml",
                               overrides=["trials.repetitions=2"])
        assert outcome.verdict == "PASS", outcome.results.rules
        outcome.run_dir, outcome.report, outcome.exit_code       # the run directory, index.html, 0/1/3

    `scenario`: a file, or a shipped scenario's name (e.g. micro_topk1); `overrides`: `--set`'s
    PATH=VALUE strings; `out_root`: where the run directory goes; `port`: as `harness run --port`.
    Bad input raises HarnessInputError before any server starts; a run that fails or is interrupted
    returns (`status`, `error`, `interrupted_by`, `exit_code` say so)."""
    from sglang_spec_harness.pipeline import run_scenario_file

    return run_scenario_file(scenario, overrides=tuple(overrides), out_root=Path(out_root), port=port,
                             progress=progress)
