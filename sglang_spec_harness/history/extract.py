"""What one run directory contributes to the history: a `RunRecord`, read from disk only.

It never raises for a damaged run: a run whose files are missing, truncated or inconsistent becomes a
record with status `damaged` and the reason (which file, what is wrong); a run that did not finish is
`incomplete` with its error. Only complete runs carry samples, rules, kernel counts, op counts, region
times and output hashes, so half a run can never move a series. Unknown fields are ignored (newer
harnesses add some, e.g. run.json `mode`). A run of a sweep (run.json `sweep`) carries its point.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sglang_spec_harness.rundir import SweepPoint, as_list, as_object
from sglang_spec_harness.traces.analysis import combine_op_tables
from sglang_spec_harness.traces.schema import OpTable, RegionTime

RUN_FILES = ("run.json", "results.json", "environment.json", "analysis.json", "scenario.yaml")
# results.json variants.<name> lists -> metric names in the database
RESULT_METRICS = {"median_tpot_ms": "tpot_ms", "accept_length": "accept_length"}
THROUGHPUT = "throughput_tok_s"


class Damaged(Exception):
    """One line: which file, what is wrong."""


@dataclass
class RunRecord:
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


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in ("run.json", "results.json", "trials"))


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


def _read_json(run_dir: Path, name: str, *, required: bool) -> Any:
    path = run_dir / name
    if not path.exists():
        if required:
            raise Damaged(f"{name}: missing")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise Damaged(f"{name}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise Damaged(f"{name}:{exc.lineno}: not valid JSON ({exc.msg}; truncated?)") from None


def _fingerprint(run_dir: Path) -> str:
    """Changes when any file the history reads changes (a re-check, a finished run)."""
    digest = hashlib.sha256()
    for name in RUN_FILES:
        path = run_dir / name
        digest.update(name.encode())
        digest.update(path.read_bytes() if path.is_file() else b"<absent>")
    trials = run_dir / "trials"
    for trial_json in sorted(trials.glob("*/trial.json")) if trials.is_dir() else []:
        digest.update(trial_json.parent.name.encode())
        digest.update(trial_json.read_bytes())
        if trial_json.parent.name.endswith("-profiled") and (requests := trial_json.parent / "requests.jsonl").is_file():
            digest.update(requests.read_bytes())  # the output hash is read from them
    return digest.hexdigest()[:32]


def _run_key(run_dir: Path, run: dict[str, Any] | None, env: dict[str, Any] | None) -> str:
    """The run's identity: the same run copied elsewhere (a CI artifact) is the same run."""
    run = run or {}
    parts = [run_dir.name, str(run.get("scenario")), str(run.get("started")), str((env or {}).get("hostname"))]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def hardware_of(env: dict[str, Any] | None) -> str:
    """The series dimension `hardware`: the GPUs when there are any, else the CPU."""
    env = env or {}
    gpus = [str(name) for g in as_list(env.get("gpus")) if isinstance(g, dict) and (name := g.get("name"))]
    if gpus:
        names = sorted(set(gpus))
        return " + ".join(f"{gpus.count(n)}x {n}" for n in names)
    cpu = env.get("cpu")
    if cpu:
        count = env.get("cpu_count")
        return f"{cpu} ({count} CPUs)" if count else str(cpu)
    return "unknown"


def read_run(run_dir: str | Path) -> RunRecord:
    """The record of one run directory (never raises for a damaged run)."""
    run_dir = Path(run_dir).resolve()
    record = RunRecord(key="", fingerprint=_fingerprint(run_dir), name=run_dir.name, path=str(run_dir),
                       status="damaged")
    run: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    try:
        env = _read_json(run_dir, "environment.json", required=False)
        if env is not None and not isinstance(env, dict):
            raise Damaged("environment.json: expected an object")
        _environment(record, env)
        run = _read_json(run_dir, "run.json", required=True)
        if not isinstance(run, dict) or not isinstance(run.get("plan"), list):
            raise Damaged("run.json: expected an object with a `plan` list")
        _run_facts(record, run)
        record.scenario_json = _scenario(run_dir)
        record.engine = (record.scenario_json or {}).get("engine")
        status = run.get("status")
        if status != "complete":
            record.status = "incomplete"
            record.reason = (f"run.json: status {status!r}"
                             + (f": {run['error']}" if run.get("error") else " (still running, or the harness was killed)"))
            return record
        results = _read_json(run_dir, "results.json", required=True)
        trials = _trials(run_dir, run)
        _results(record, results, trials)
        analysis = _read_json(run_dir, "analysis.json", required=False)
        _kernel_counts(record, analysis, trials)
        _ops_and_times(record, analysis, trials)
        _output_hashes(record, run_dir, run)
        record.status = "complete"
        report = run_dir / "index.html"
        record.report = str(report) if report.exists() else None
    except Damaged as exc:
        record.status = "damaged"
        record.reason = str(exc)
        record.samples, record.rules, record.kernel_counts = [], [], []
        record.op_counts, record.region_times = [], []
        for variant in record.variants:
            variant.update(output_hash=None, outputs=None)
    finally:
        record.key = _run_key(run_dir, run, env)
    return record


def sglang_commit(sglang: dict[str, Any], harness: dict[str, Any]) -> str | None:
    """SGLang's commit as recorded, except where an older probe took the harness's own HEAD for it: a
    release unpacked inside the harness's checkout (.sglang-cpu/releases/) is not a git tree of its own."""
    commit = sglang.get("git_commit") or sglang.get("commit")
    path, source = sglang.get("path"), harness.get("source")
    if (commit and commit == harness.get("git_commit") and isinstance(path, str) and isinstance(source, str)
            and Path(path).is_relative_to(source)):
        return None
    return commit


def _environment(record: RunRecord, env: dict[str, Any] | None) -> None:
    record.environment_json = env
    record.hardware = hardware_of(env)
    if not env:
        return
    record.host = env.get("hostname")
    harness = as_object(env.get("harness"))
    record.harness_version = harness.get("version")
    record.harness_commit = harness.get("git_commit")
    per_variant = as_object(env.get("variants"))
    # The run's SGLang is the candidate's (what is under test), else any variant's.
    for name in ("candidate", *per_variant):
        sglang = as_object(per_variant.get(name)).get("sglang")
        if isinstance(sglang, dict) and (sglang.get("version") or sglang.get("git_commit")):
            record.sglang_version = sglang.get("version")
            record.sglang_commit = sglang_commit(sglang, harness)
            break


def _run_facts(record: RunRecord, run: dict[str, Any]) -> None:
    record.run_json = run
    record.scenario = run.get("scenario")
    record.aa = bool(run.get("aa"))
    # Runs written before the warm run modes have no `mode`: they are `restart` runs.
    record.mode = run.get("mode") if isinstance(run.get("mode"), str) and run.get("mode") else "restart"
    record.started = to_utc(run.get("started"))
    record.finished = to_utc(run.get("finished"))
    if run.get("sweep") is not None:
        try:
            point = SweepPoint.model_validate(run["sweep"])
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            raise Damaged(f"run.json: sweep{'.' + where if where else ''}: {error['msg']}") from None
        record.sweep, record.sweep_axis, record.sweep_point = point.sweep, point.axis, point.point
        record.sweep_label, record.sweep_position = point.label, point.position


def _scenario(run_dir: Path) -> dict[str, Any] | None:
    # Raw YAML, not the validating loader: a newer harness's fields must not make an old run unreadable.
    path = run_dir / "scenario.yaml"
    if not path.exists():
        raise Damaged("scenario.yaml: missing")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise Damaged(f"scenario.yaml: not readable YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise Damaged("scenario.yaml: expected a mapping")
    return data


def _trials(run_dir: Path, run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every trial the plan lists, by directory name; a missing or unreadable one damages the run."""
    trials: dict[str, dict[str, Any]] = {}
    for entry in run["plan"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("dir"), str):
            raise Damaged("run.json: a plan entry without `dir`")
        rel = entry["dir"]
        if not (run_dir / rel).is_dir():
            raise Damaged(f"{rel}: missing (run.json's plan lists it)")
        info = _read_json(run_dir, f"{rel}/trial.json", required=True)
        if not isinstance(info, dict):
            raise Damaged(f"{rel}/trial.json: expected an object")
        trials[Path(rel).name] = info
    return trials


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _results(record: RunRecord, results: Any, trials: dict[str, dict[str, Any]]) -> None:
    if not isinstance(results, dict) or not isinstance(results.get("variants"), dict):
        raise Damaged("results.json: expected an object with `variants`")
    record.verdict = results.get("verdict") if isinstance(results.get("verdict"), str) else None
    record.exit_code = results.get("exit_code") if isinstance(results.get("exit_code"), int) else None
    record.evaluated_at = to_utc(results.get("evaluated_at"))
    scenario_variants = as_object((record.scenario_json or {}).get("variants"))
    env_variants = as_object((record.environment_json or {}).get("variants"))
    for variant, facts in results["variants"].items():
        if not isinstance(facts, dict):
            raise Damaged(f"results.json: variants.{variant}: expected an object")
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
                if (number := _number(value)) is not None:
                    record.samples.append({"variant": variant, "metric": metric, "idx": i,
                                           "trial": timed[i] if i < len(timed) else None, "value": number})
        for i, trial in enumerate(timed):
            if trial not in trials:
                raise Damaged(f"results.json: variants.{variant}.timed_trials: {trial} is not in run.json's plan")
            summary = as_object(trials[trial].get("summary"))
            if (number := _number(summary.get("output_throughput_tok_s"))) is not None:
                record.samples.append({"variant": variant, "metric": THROUGHPUT, "idx": i, "trial": trial,
                                       "value": number})
        probe = as_object(env_variants.get(variant))
        sglang = as_object(probe.get("sglang"))
        torch = as_object(probe.get("torch"))
        record.variants.append({
            "variant": variant,
            "config": scenario_variants.get(variant) if isinstance(scenario_variants.get(variant), dict) else None,
            "python": probe.get("python") if isinstance(probe.get("python"), str) else None,
            "torch_version": torch.get("version") if torch else (probe.get("torch") if isinstance(probe.get("torch"), str) else None),
            "sglang_version": sglang.get("version"),
            "sglang_commit": sglang_commit(sglang, as_object((record.environment_json or {}).get("harness"))),
        })
    rules = results.get("rules") or []
    if not isinstance(rules, list):
        raise Damaged("results.json: rules: expected a list")
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("name"), str):
            raise Damaged("results.json: rules: an entry without a `name`")
        record.rules.append({"name": rule["name"], "kind": rule.get("kind"), "verdict": rule.get("verdict"),
                             "reason": rule.get("reason"), "params": rule.get("params"), "numbers": rule.get("numbers")})


def _kernel_counts(record: RunRecord, analysis: Any, trials: dict[str, dict[str, Any]]) -> None:
    if analysis is None:
        return
    per_trial = analysis.get("trials") if isinstance(analysis, dict) else None
    if not isinstance(per_trial, dict):
        raise Damaged("analysis.json: expected an object with `trials`")
    for trial_name, trial_analysis in per_trial.items():
        variant = (trials.get(trial_name) or {}).get("variant")
        if variant is None or not isinstance(trial_analysis, dict):
            continue  # a trial the plan does not know: not this run's
        for position, facts in enumerate(as_list(trial_analysis.get("files"))):
            if not isinstance(facts, dict):
                continue
            rank = facts.get("rank") if isinstance(facts.get("rank"), int) else position
            for region, counts in as_object(facts.get("regions")).items():
                for pattern, row in as_object(as_object(counts).get("counts")).items():
                    if not isinstance(row, dict):
                        continue
                    record.kernel_counts.append({
                        "variant": variant, "trial": trial_name, "rank": rank, "region": region, "pattern": pattern,
                        "unit": row.get("unit"), "known": bool(row.get("known", True)),
                        "replays": row.get("replays"), "total": row.get("total"),
                        "per_replay_min": row.get("per_replay_min"), "per_replay_max": row.get("per_replay_max"),
                    })


def _variant_files(analysis: Any, trials: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, int, dict[str, Any]]]]:
    """Per variant, its profiled trials' per-file analyses: (trial, file position, facts)."""
    out: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}
    for trial_name, trial_analysis in as_object(as_object(analysis).get("trials")).items():
        variant = (trials.get(trial_name) or {}).get("variant")
        if not isinstance(variant, str) or not isinstance(trial_analysis, dict):
            continue  # a trial the plan does not know: not this run's
        for position, facts in enumerate(as_list(trial_analysis.get("files"))):
            if isinstance(facts, dict):
                out.setdefault(variant, []).append((trial_name, position, facts))
    return out


def _known_fields(raw: Any, model: type[BaseModel]) -> Any:
    """A record without the fields this harness does not know (a newer one's): ignored, not damage."""
    return {k: v for k, v in raw.items() if k in model.model_fields} if isinstance(raw, dict) else raw


def op_key(name: str) -> str:
    """The key of an op name in the database: kernel names can be longer than an index allows."""
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def _ops_and_times(record: RunRecord, analysis: Any, trials: dict[str, dict[str, Any]]) -> None:
    """Per variant, its profiled trials' op tables as one (every replay of every trial and rank), and
    each region's time per replay (summed over the same files)."""
    for variant, files in _variant_files(analysis, trials).items():
        tables: list[OpTable] = []
        times: dict[str, dict[str, Any]] = {}
        for trial_name, position, facts in files:
            where = f"analysis.json: trials.{trial_name}.files[{position}]"
            for i, raw in enumerate(as_list(facts.get("op_tables"))):
                try:
                    tables.append(OpTable.model_validate(_known_fields(raw, OpTable)))
                except ValidationError as exc:
                    raise Damaged(f"{where}.op_tables[{i}]: {exc.errors()[0]['msg']}") from None
            for region, raw in as_object(facts.get("region_times")).items():
                try:
                    spent = RegionTime.model_validate(_known_fields(raw, RegionTime))
                except ValidationError as exc:
                    raise Damaged(f"{where}.region_times.{region}: {exc.errors()[0]['msg']}") from None
                row = times.setdefault(region, {"variant": variant, "region": region, "unit": spent.unit,
                                                "instances": 0, "time_us": 0.0, "robust_time_us": 0.0,
                                                "basis": spent.basis})
                row["instances"] += spent.instances
                row["time_us"] += spent.time_us
                # robust time where the file has it (span wall time without a busy CPU's spikes)
                row["robust_time_us"] += spent.robust_time_us if spent.robust_time_us is not None else spent.time_us
        record.region_times.extend(times.values())
        for table in combine_op_tables(tables):
            if not table.known:
                continue  # no row: the history never stores a count the trace could not support
            for op in table.rows():
                record.op_counts.append({
                    "variant": variant, "region": table.region, "unit": table.unit, "op_key": op_key(op.name),
                    "op": op.name, "replays": table.replays, "total": op.total, "per_replay_min": op.per_replay_min,
                    "per_replay_median": op.per_replay_median, "per_replay_max": op.per_replay_max,
                    "time_us": op.time_us,
                })


def output_hash(requests: list[tuple[int, list[int] | None]]) -> str:
    """sha256 over the outputs in prompt order: `[[index, output_ids], ...]` as compact JSON, a
    request that failed as `[index, null]`."""
    text = json.dumps(sorted(requests, key=lambda r: r[0]), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _output_hashes(record: RunRecord, run_dir: Path, run: dict[str, Any]) -> None:
    """Per variant, the hash of its profiled trials' greedy outputs (prompt by prompt, the first
    trial in plan order that sent a prompt gives its output); none where decoding samples
    (temperature > 0) or a trial's requests cannot be read."""
    temperature = as_object(as_object(record.scenario_json).get("workload")).get("temperature", 0)
    greedy = not isinstance(temperature, (int, float)) or temperature == 0
    for variant in record.variants:
        variant.update(output_hash=None, outputs=None)
        if not greedy:
            continue
        outputs: dict[int, list[int] | None] = {}
        readable = True
        entries = [e for e in run["plan"] if e.get("variant") == variant["variant"] and e.get("kind") == "profiled"]
        for entry in sorted(entries, key=lambda e: e.get("index") if isinstance(e.get("index"), int) else 0):
            rows = _requests(run_dir / entry["dir"] / "requests.jsonl")
            if rows is None:
                readable = False
                break
            for index, ids in rows:
                outputs.setdefault(index, ids)
        if readable and outputs:
            variant.update(output_hash=output_hash(list(outputs.items())), outputs=len(outputs))


def _requests(path: Path) -> list[tuple[int, list[int] | None]] | None:
    """(index, output ids) of each measured request of requests.jsonl; None if it cannot be read."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    rows: list[tuple[int, list[int] | None]] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            return None
        if not isinstance(row, dict) or row.get("warmup") or not isinstance(row.get("index"), int):
            continue
        ids = row.get("output_ids")
        failed = bool(row.get("error")) or not isinstance(ids, list) or not all(isinstance(i, int) for i in ids)
        rows.append((row["index"], None if failed else ids))
    return rows
