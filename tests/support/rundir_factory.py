"""Stored run directories with planted facts, for the rules and the report.

Every file follows docs/internals.md; the trace analysis sections are validated against the real
schema (sglang_spec_harness.traces.schema.FileAnalysis), so a schema change breaks these tests, not silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sglang_spec_harness.scenario import SCENARIO_END
from sglang_spec_harness.traces.analysis import combine
from sglang_spec_harness.traces.schema import FileAnalysis

SCENARIO = {
    "name": "planted",
    "engine": "micro",
    "variants": {"baseline": {"args": {"--disable-topk1-fast-path": True}}, "candidate": {}},
    "trials": {"repetitions": 6, "profiled": 1},
    "rules": [
        {"name": "cand_no_softmax_dd", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
         "variants": ["candidate"], "equals": 0},
        {"name": "base_softmax_dd", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
         "variants": ["baseline"], "at_least": 1},
        {"name": "accept", "kind": "accept_length", "rel_tolerance": 0.01},
        {"name": "identity", "kind": "output_identity"},
        {"name": "tpot", "kind": "tpot_gain", "min_gain": 0.01, "resamples": 2000},
        {"name": "explained", "kind": "explained_gain"},
    ],
}


def count_row(region: str, unit: str, pattern: str, per_replay: list[int], time_us: float = 0.0,
              known: bool = True) -> dict[str, Any]:
    hist: dict[int, int] = {}
    for n in per_replay:
        hist[n] = hist.get(n, 0) + 1
    total = sum(per_replay)
    return {
        "region": region, "unit": unit, "pattern": pattern, "known": known, "note": None if known else "unknown",
        "replays": len(per_replay), "empty_launches": 0, "total": total if known else None,
        "per_replay_min": min(per_replay) if per_replay and known else None,
        "per_replay_median": (sorted(per_replay)[len(per_replay) // 2] if per_replay and known else None),
        "per_replay_max": max(per_replay) if per_replay and known else None,
        "per_replay_histogram": hist, "time_us": time_us,
        "matched_names": {"cunn_SoftMaxForward": total} if total else {},
    }


def file_facts(*, softmax_per_replay: int, replays: int = 10, kernels: int = 500, graph_launches: int | None = None,
               unlabelled: int = 0, mode: str | None = None, rank: int = 0, softmax_us: float = 40.0,
               cpu: bool = False, region_us: dict[str, float] | None = None) -> dict[str, Any]:
    """One trace file's analysis: DRAFT_DECODE, DRAFT_EXTEND, TARGET_VERIFY, `replays` cycles.

    region_us: each region's time per cycle; by default 500 us (draft decode), 300 us (draft
    extend), 2000 us (target verify) plus the softmax time in them (the fast path's replacement
    then costs nothing)."""
    unit = "span" if cpu else "graph_launch"
    rows = []
    for region, per in (("DRAFT_DECODE", softmax_per_replay), ("DRAFT_EXTEND", 1 if softmax_per_replay else 0),
                        ("TARGET_VERIFY", 0)):
        rows.append(count_row(region, unit, "softmax", [per] * replays, time_us=per * replays * softmax_us))
    launches = 3 * replays if graph_launches is None else graph_launches
    facts = {
        "path": f"trace-TP-{rank}.trace.json.gz", "format": "nsys" if mode else "kineto",
        "platform": "cpu" if cpu else "cuda", "rank": rank, "rank_source": "file_name",
        "graph_launches": 0 if cpu else launches, "kernels_per_graph_launch": {} if cpu else {kernels // max(launches, 1): launches},
        "validity": {
            "subject": "cpu_ops" if cpu else "gpu_ops", "kernels": 0 if cpu else kernels, "gpu_ops": 0 if cpu else kernels,
            "cpu_ops": 4000, "runtime_calls": launches, "kernel_launch_calls": 0, "kernel_launch_calls_without_gpu_ops": 0,
            "graph_launches": 0 if cpu else launches, "graph_launches_without_kernels": 0, "gpu_ops_without_launch": 0,
            "unlabelled_graph_launches": unlabelled, "unlabelled_eager_launches": 0, "graph_trace_mode": mode,
            "per_graph_counts_known": mode in (None, "Node"), "launches_exceed_kernels": False,
            "region_instances": {r: {unit: replays} for r in ("DRAFT_DECODE", "DRAFT_EXTEND", "TARGET_VERIFY")},
            "warnings": [],
        },
        "regions": {r["region"]: {"unit": unit, "units": replays, "counts": {"softmax": r}} for r in rows},
        "counts": rows, "pattern_totals": [], "top_ops": [],
    }
    if region_us is None:
        region_us = {"DRAFT_DECODE": 500.0 + softmax_per_replay * softmax_us,
                     "DRAFT_EXTEND": 300.0 + (softmax_us if softmax_per_replay else 0.0), "TARGET_VERIFY": 2000.0}
    facts["region_times"] = {r: {"unit": unit, "instances": replays, "time_us": us * replays,
                                 "basis": "span_wall" if cpu else "gpu_ops"} for r, us in region_us.items()}
    FileAnalysis.model_validate(facts)  # the planted facts have the real shape
    return facts


@dataclass
class Arm:
    tpot_ms: list[float]
    accept_length: float = 2.5
    outputs: list[list[int]] = field(default_factory=lambda: [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    profile: list[dict[str, Any]] | None = None  # file facts of the profiled trial; None = no analysis


def write_run_dir(root: Path, baseline: Arm, candidate: Arm, *, scenario: dict | None = None, aa: bool = False,
                  status: str = "complete", temperature: float = 0.0) -> Path:
    scenario = json.loads(json.dumps(scenario or SCENARIO))
    scenario.setdefault("workload", {})["temperature"] = temperature
    run = root / "run"
    (run / "trials").mkdir(parents=True)
    (run / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False) + SCENARIO_END + "\n")
    plan, analysis, index = [], {}, 0
    n = max(len(baseline.tpot_ms), len(candidate.tpot_ms))
    order = []
    for rep in range(n):  # ABBA
        pair = [("baseline", baseline), ("candidate", candidate)]
        order += pair if rep % 2 == 0 else pair[::-1]
    for variant, arm in order:
        rep = sum(1 for p in plan if p["variant"] == variant and p["kind"] == "timed")
        if rep >= len(arm.tpot_ms):
            continue
        index += 1
        name = f"{index:02d}-{variant}-timed"
        _write_trial(run / "trials" / name, index, variant, "timed", rep, arm, arm.tpot_ms[rep])
        plan.append({"index": index, "variant": variant, "kind": "timed", "repetition": rep, "dir": f"trials/{name}"})
    for variant, arm in (("baseline", baseline), ("candidate", candidate)):
        index += 1
        name = f"{index:02d}-{variant}-profiled"
        _write_trial(run / "trials" / name, index, variant, "profiled", 0, arm, arm.tpot_ms[0] * 1.3)
        plan.append({"index": index, "variant": variant, "kind": "profiled", "repetition": 0, "dir": f"trials/{name}"})
        if arm.profile is not None:
            combined = combine([FileAnalysis.model_validate(f) for f in arm.profile]).model_dump(mode="json")
            analysis[name] = {"schema_version": 1, "patterns": {}, "region_table": [], "files": arm.profile,
                              "combined": combined}
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "scenario": scenario["name"], "aa": aa,
                                              "status": status, "error": None, "plan": plan}))
    (run / "analysis.json").write_text(json.dumps({"schema_version": 1, "trials": analysis}))
    return run


def _write_trial(path: Path, index: int, variant: str, kind: str, rep: int, arm: Arm, tpot: float) -> None:
    path.mkdir(parents=True)
    completion = 16
    requests = [
        {"index": i, "warmup": False, "prompt_tokens": 8, "completion_tokens": completion,
         "spec_verify_ct": completion / arm.accept_length, "ttft_ms": 5.0, "tpot_ms": tpot, "itl_ms": [],
         "e2e_ms": 5 + tpot * (completion - 1), "output_ids": ids, "finish_reason": "length", "error": None}
        for i, ids in enumerate(arm.outputs)
    ]
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    summary = {"requests": len(requests), "errors": 0, "accept_length": arm.accept_length,
               "median_tpot_ms": tpot, "mean_tpot_ms": tpot}
    (path / "trial.json").write_text(json.dumps({"index": index, "variant": variant, "kind": kind,
                                                 "repetition": rep, "status": "ok", "summary": summary}))
