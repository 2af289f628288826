"""What one run directory contributes to the history: a `RunRow` (the runs table's row and its
children), built from the run directory as `sglang_spec_harness.rundir.load_run_dir` reads it
(leniently: the same validation, size cap and idea of a valid number as `harness check`).

It never raises for a damaged run: a run whose files are missing, truncated or fail their model
becomes a row with status `damaged` and the reason (which file, what is wrong); a run that did not
finish is `incomplete` with its error. Only complete runs carry samples, rules, kernel counts, op
counts, region times and output hashes, so half a run can never move a series. Older runs are
migrated on load; unknown fields are kept where a record's model allows them. A run of a sweep
(run.json `sweep`) carries its point.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir.rule_numbers import OutputValidityNumbers
from sglang_spec_harness.rundir import (
    EnvironmentRecord,
    RuleResult,
    RunDir,
    StoredTrial,
    as_object,
    load_run_dir,
    valid_number,
)
from sglang_spec_harness.traces.analysis import combine_op_tables
from sglang_spec_harness.traces.functions import combine_region_functions
from sglang_spec_harness.traces.schema import FileAnalysis, OpTable

RUN_FILES = ("run.json", "results.json", "environment.json", "analysis.json", "scenario.yaml")
# results.json variants.<name> lists -> metric names in the database
RESULT_METRICS = {"median_tpot_ms": "tpot_ms", "accept_length": "accept_length"}
THROUGHPUT = "throughput_tok_s"
INVALID_FRACTION = "invalid_token_fraction"


class Damaged(Exception):
    """One line: which file, what is wrong."""


@dataclass
class RunRow:
    """A run as the results database stores it: the `runs` row, and its children's rows."""

    key: str
    fingerprint: str
    name: str
    path: str
    status: str  # complete | incomplete | damaged
    reason: str | None = None
    report: str | None = None
    scenario: str | None = None
    engine: str | None = None
    aa: bool = False
    mode: str | None = None
    started: str | None = None
    finished: str | None = None
    evaluated_at: str | None = None
    verdict: str | None = None
    exit_code: int | None = None
    harness_version: str | None = None
    harness_commit: str | None = None
    sglang_version: str | None = None
    sglang_commit: str | None = None
    hardware: str = "unknown"
    host: str | None = None
    sweep: str | None = None  # run.json `sweep`: the sweep's name, axis, point, label and position
    sweep_axis: str | None = None
    sweep_point: str | None = None
    sweep_label: str | None = None
    sweep_position: int | None = None
    scenario_json: dict[str, Any] | None = None
    environment_json: dict[str, Any] | None = None
    run_json: dict[str, Any] | None = None
    variants: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    rules: list[dict[str, Any]] = field(default_factory=list)
    kernel_counts: list[dict[str, Any]] = field(default_factory=list)
    op_counts: list[dict[str, Any]] = field(default_factory=list)
    region_times: list[dict[str, Any]] = field(default_factory=list)
    region_functions: list[dict[str, Any]] = field(default_factory=list)


def to_utc(stamp: Any) -> str | None:
    """ISO 8601 in UTC (`2026-01-01T10:00:00+00:00`), so that runners in other time zones sort right."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # naive: the local time of the machine that wrote it
    return parsed.astimezone(UTC).isoformat(timespec="seconds")


def _hash_file(digest: Any, path: Path) -> None:
    """A file's bytes into `digest` in chunks: a file past the readers' size cap is damage, not memory."""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)


def _fingerprint(run_dir: Path) -> str:
    """Changes when any file the history reads changes (a re-check, a finished run)."""
    digest = hashlib.sha256()
    for name in RUN_FILES:
        path = run_dir / name
        digest.update(name.encode())
        if path.is_file():
            _hash_file(digest, path)
        else:
            digest.update(b"<absent>")
    trials = run_dir / "trials"
    for trial_json in sorted(trials.glob("*/trial.json")) if trials.is_dir() else []:
        digest.update(trial_json.parent.name.encode())
        _hash_file(digest, trial_json)
        if trial_json.parent.name.endswith("-profiled") and (requests := trial_json.parent / "requests.jsonl").is_file():
            _hash_file(digest, requests)  # the output hash is read from them
    return digest.hexdigest()[:32]


def _run_key(run_dir: Path, rd: RunDir | None) -> str:
    """The run's identity: the same run copied elsewhere (a CI artifact) is the same run."""
    run = rd.run if rd is not None and "run.json" not in rd.damaged else None
    host = rd.environment.hostname if rd is not None and rd.environment is not None else None
    parts = [run_dir.name, str(run.scenario if run else None), str(run.started if run else None), str(host)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def hardware_of(env: EnvironmentRecord | None) -> str:
    """The series dimension `hardware`: the GPUs when there are any, else the CPU."""
    if env is None:
        return "unknown"
    gpus = [str(name) for g in env.gpus if (name := g.get("name"))]
    if gpus:
        names = sorted(set(gpus))
        return " + ".join(f"{gpus.count(n)}x {n}" for n in names)
    if env.cpu:
        return f"{env.cpu} ({env.cpu_count} CPUs)" if env.cpu_count else env.cpu
    return "unknown"


def read_run(run_dir: str | Path) -> RunRow:
    """The row of one run directory (never raises for a damaged run)."""
    run_dir = Path(run_dir).resolve()
    row = RunRow(key="", fingerprint=_fingerprint(run_dir), name=run_dir.name, path=str(run_dir), status="damaged")
    rd: RunDir | None = None
    try:
        try:
            rd = load_run_dir(run_dir, strict=False)
        except HarnessInputError as exc:
            raise Damaged(str(exc)) from None
        _check(rd, "environment.json")
        _environment(row, rd.environment)
        _check(rd, "run.json")
        _run_facts(row, rd)
        _check(rd, "scenario.yaml")
        row.scenario_json = rd.scenario_data
        row.engine = rd.scenario_data.get("engine")
        if rd.run.status != "complete":
            row.status = "incomplete"
            row.reason = (f"run.json: status {rd.run.status!r}"
                          + (f": {rd.run.error}" if rd.run.error else " (still running, or the harness was killed)"))
            return row
        trials = _trials(rd)
        _check(rd, "results.json")
        _results(row, rd, trials)
        _check(rd, "analysis.json")
        _kernel_counts(row, rd, trials)
        _ops_and_times(row, rd, trials)
        _region_functions(row, rd, trials)
        _output_hashes(row, rd)
        row.status = "complete"
        report = run_dir / "index.html"
        row.report = str(report) if report.exists() else None
    except Damaged as exc:
        row.status = "damaged"
        row.reason = str(exc)
        row.samples, row.rules, row.kernel_counts, row.op_counts, row.region_times = [], [], [], [], []
        row.region_functions = []
        for variant in row.variants:
            variant.update(output_hash=None, outputs=None)
    finally:
        row.key = _run_key(run_dir, rd)
    return row


def _check(rd: RunDir, name: str) -> None:
    if name in rd.damaged:
        raise Damaged(rd.damaged[name])


def sglang_commit(sglang: dict[str, Any], harness: dict[str, Any]) -> str | None:
    """SGLang's commit as recorded, except where an older probe took the harness's own HEAD for it: a
    release unpacked inside the harness's checkout (.sglang-cpu/releases/) is not a git tree of its own."""
    commit = sglang.get("git_commit") or sglang.get("commit")
    path, source = sglang.get("path"), harness.get("source")
    if (commit and commit == harness.get("git_commit") and isinstance(path, str) and isinstance(source, str)
            and Path(path).is_relative_to(source)):
        return None
    return commit


def _environment(row: RunRow, env: EnvironmentRecord | None) -> None:
    row.environment_json = env.model_dump(mode="json", exclude_unset=True) if env is not None else None
    row.hardware = hardware_of(env)
    if env is None:
        return
    row.host = env.hostname
    row.harness_version = env.harness.get("version")
    row.harness_commit = env.harness.get("git_commit")
    # The run's SGLang is the candidate's (what is under test), else any variant's.
    for name in ("candidate", *env.variants):
        sglang = as_object(env.variants.get(name, {}).get("sglang"))
        if sglang.get("version") or sglang.get("git_commit"):
            row.sglang_version = sglang.get("version")
            row.sglang_commit = sglang_commit(sglang, env.harness)
            break


def _run_facts(row: RunRow, rd: RunDir) -> None:
    run = rd.run
    row.run_json = run.model_dump(mode="json", exclude_unset=True)
    row.scenario, row.aa, row.mode = run.scenario, run.aa, run.mode
    row.started, row.finished = to_utc(run.started), to_utc(run.finished)
    if run.sweep is not None:
        point = run.sweep
        row.sweep, row.sweep_axis, row.sweep_point = point.sweep, point.axis, point.point
        row.sweep_label, row.sweep_position = point.label, point.position


def _trials(rd: RunDir) -> dict[str, StoredTrial]:
    """Every trial the plan lists, by directory name; a missing or unreadable one damages the run."""
    trials: dict[str, StoredTrial] = {}
    for entry in rd.run.plan:
        if entry.dir is None:
            raise Damaged("run.json: a plan entry without `dir`")
        if not (rd.path / entry.dir).is_dir():
            raise Damaged(f"{entry.dir}: missing (run.json's plan lists it)")
        _check(rd, f"{entry.dir}/trial.json")
        trial = next((t for t in rd.trials if t.dir == rd.path / entry.dir), None)
        if trial is None:
            raise Damaged(f"{entry.dir}/trial.json: missing")
        trials[trial.name] = trial
    return trials


def rule_numbers(rule: RuleResult) -> dict[str, Any]:
    """A rule's numbers as the database stores them (plain JSON, the keys as written): the one place
    the history reads them."""
    return rule.numbers.model_dump(mode="json")


def _samples(row: RunRow, variant: str, facts: dict[str, Any], trials: dict[str, StoredTrial]) -> None:
    listed = facts.get("timed_trials") or []
    if not isinstance(listed, list):
        raise Damaged(f"results.json: variants.{variant}.timed_trials: expected a list")
    timed = [t for t in listed if isinstance(t, str)]
    for key, metric in RESULT_METRICS.items():
        values = facts.get(key)
        if values is None:
            continue
        if not isinstance(values, list):
            raise Damaged(f"results.json: variants.{variant}.{key}: expected a list")
        for i, value in enumerate(values):
            if (number := valid_number(value)) is not None:
                row.samples.append({"variant": variant, "metric": metric, "idx": i,
                                    "trial": timed[i] if i < len(timed) else None, "value": number})
    for i, name in enumerate(timed):
        if name not in trials:
            raise Damaged(f"results.json: variants.{variant}.timed_trials: {name} is not in run.json's plan")
        if (number := valid_number(trials[name].summary.output_throughput_tok_s)) is not None:
            row.samples.append({"variant": variant, "metric": THROUGHPUT, "idx": i, "trial": name, "value": number})


def _variant_row(rd: RunDir, variant: str) -> dict[str, Any]:
    """A variant's configuration (the stored scenario's) and software (its interpreter's probe)."""
    config = as_object(rd.scenario_data.get("variants")).get(variant)
    env = rd.environment or EnvironmentRecord()
    probe = env.variants.get(variant, {})
    sglang, torch = as_object(probe.get("sglang")), probe.get("torch")
    return {
        "variant": variant,
        "config": config if isinstance(config, dict) else None,
        "python": probe.get("python") if isinstance(probe.get("python"), str) else None,
        "torch_version": as_object(torch).get("version") if isinstance(torch, dict) else
        (torch if isinstance(torch, str) else None),
        "sglang_version": sglang.get("version"),
        "sglang_commit": sglang_commit(sglang, env.harness),
    }


def _results(row: RunRow, rd: RunDir, trials: dict[str, StoredTrial]) -> None:
    results = rd.results
    if results is None:
        raise Damaged("results.json: missing")
    row.verdict, row.exit_code = str(results.verdict), results.exit_code
    row.evaluated_at = to_utc(results.evaluated_at)
    for variant, facts in results.variants.items():
        _samples(row, variant, facts, trials)
        row.variants.append(_variant_row(rd, variant))
    for rule in results.rules:
        row.rules.append({"name": rule.name, "kind": rule.kind, "verdict": str(rule.verdict), "reason": rule.reason,
                          "params": rule.params, "numbers": rule_numbers(rule)})
        if isinstance(rule.numbers, OutputValidityNumbers):  # a series per variant: the invalid fraction
            for variant, counted in rule.numbers.variants.items():
                if (fraction := valid_number(counted.invalid_fraction)) is not None:
                    row.samples.append({"variant": variant, "metric": INVALID_FRACTION, "idx": 0, "trial": None,
                                        "value": fraction})


def _variant_files(rd: RunDir, trials: dict[str, StoredTrial]) -> dict[str, list[tuple[str, FileAnalysis]]]:
    """Per variant, its profiled trials' per-file analyses: (trial, facts). A trial the plan does not
    know is not this run's."""
    out: dict[str, list[tuple[str, FileAnalysis]]] = {}
    for trial_name, analysis in rd.analysis.items():
        if trial_name in trials:
            out.setdefault(trials[trial_name].variant, []).extend((trial_name, f) for f in analysis.files)
    return out


def _kernel_counts(row: RunRow, rd: RunDir, trials: dict[str, StoredTrial]) -> None:
    for variant, files in _variant_files(rd, trials).items():
        for trial_name, facts in files:
            for region, counts in facts.regions.items():
                for pattern, count in counts.counts.items():
                    row.kernel_counts.append({
                        "variant": variant, "trial": trial_name, "rank": facts.rank, "region": region,
                        "pattern": pattern, "unit": count.unit, "known": count.known, "replays": count.replays,
                        "total": count.total, "per_replay_min": count.per_replay_min,
                        "per_replay_max": count.per_replay_max,
                    })


def op_key(name: str) -> str:
    """The key of an op name in the database: kernel names can be longer than an index allows."""
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def _ops_and_times(row: RunRow, rd: RunDir, trials: dict[str, StoredTrial]) -> None:
    """Per variant, its profiled trials' op tables as one (every replay of every trial and rank), and
    each region's time per replay (summed over the same files)."""
    for variant, files in _variant_files(rd, trials).items():
        tables: list[OpTable] = []
        times: dict[str, dict[str, Any]] = {}
        for _, facts in files:
            tables.extend(facts.op_tables)
            for region, spent in facts.region_times.items():
                time = times.setdefault(region, {"variant": variant, "region": region, "unit": spent.unit,
                                                 "instances": 0, "time_us": 0.0, "robust_time_us": 0.0,
                                                 "basis": spent.basis})
                time["instances"] += spent.instances
                time["time_us"] += spent.time_us
                # robust time where the file has it (span wall time without a busy CPU's spikes)
                time["robust_time_us"] += spent.robust_time_us if spent.robust_time_us is not None else spent.time_us
        row.region_times.extend(times.values())
        for table in combine_op_tables(tables):
            if not table.known:
                continue  # no row: the history never stores a count the trace could not support
            for op in table.rows():
                row.op_counts.append({
                    "variant": variant, "region": table.region, "unit": table.unit, "op_key": op_key(op.name),
                    "op": op.name, "replays": table.replays, "total": op.total, "per_replay_min": op.per_replay_min,
                    "per_replay_median": op.per_replay_median, "per_replay_max": op.per_replay_max,
                    "time_us": op.time_us,
                })


def function_key(file: str, function: str, line: int) -> str:
    """The key of a function in the database: a file's path can be longer than an index allows."""
    return hashlib.sha256(f"{file}\0{function}\0{line}".encode()).hexdigest()[:32]


def _region_functions(row: RunRow, rd: RunDir, trials: dict[str, StoredTrial]) -> None:
    """Per variant and region, the Python functions that ran there in its profiled trials (every
    trial and rank summed); none for traces without with_stack."""
    for variant, files in _variant_files(rd, trials).items():
        for table in combine_region_functions([t for _, facts in files for t in facts.region_functions]):
            for call in table.rows():
                row.region_functions.append({
                    "variant": variant, "region": table.region,
                    "function_key": function_key(call.file, call.function, call.line), "file": call.file,
                    "function": call.function, "line": call.line, "calls": call.calls, "time_us": call.time_us,
                    "complete": table.complete,
                })


def output_hash(requests: list[tuple[int, list[int] | None]]) -> str:
    """sha256 over the outputs in prompt order: `[[index, output_ids], ...]` as compact JSON, a
    request that failed as `[index, null]`."""
    text = json.dumps(sorted(requests, key=lambda r: r[0]), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _outputs(rd: RunDir, variant: str) -> dict[int, list[int] | None] | None:
    """A variant's greedy outputs by prompt: the first profiled trial in plan order that sent a prompt
    gives its output (a failed request: None); None when a trial's requests cannot be read."""
    outputs: dict[int, list[int] | None] = {}
    for entry in sorted((e for e in rd.run.plan if e.variant == variant and e.kind == "profiled"),
                        key=lambda e: e.index):
        trial = next((t for t in rd.trials if t.dir == rd.path / str(entry.dir)), None)
        if trial is None or not (trial.dir / "requests.jsonl").is_file():
            return None
        try:
            requests = trial.requests
        except HarnessInputError:
            return None
        for request in requests:
            failed = bool(request.error) or request.output_ids is None
            outputs.setdefault(request.index, None if failed else request.output_ids)
    return outputs


def _output_hashes(row: RunRow, rd: RunDir) -> None:
    """Per variant, the hash of its profiled trials' greedy outputs; none where decoding samples
    (temperature > 0) or a trial's requests cannot be read."""
    temperature = as_object(rd.scenario_data.get("workload")).get("temperature", 0)
    greedy = not isinstance(temperature, (int, float)) or temperature == 0
    for variant in row.variants:
        outputs = _outputs(rd, variant["variant"]) if greedy else None
        variant.update(output_hash=output_hash(list(outputs.items())) if outputs else None,
                       outputs=len(outputs) if outputs else None)
