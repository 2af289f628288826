"""A hand-built run directory that follows docs/internals.md exactly, with real CPU profiler traces
recorded here: scenario `tiny`, 2 profiled + 8 timed trials (ABBA), every rule kind, verdict PASS.

Used by the report tests (tests/test_report.py) and by the escaping and security tests.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

SCENARIO_YAML = """\
name: tiny
description: hand-built run for the report tests
engine: micro
server:
  args: {--speculative-num-steps: 3, --speculative-eagle-topk: 1}
variants:
  baseline:
    description: softmax + top-1 in the draft
    args: {--disable-topk1-fast-path: true}
  candidate:
    description: argmax in the draft
"""
TPOT = {"baseline": [10.0, 10.2, 10.1, 9.9], "candidate": [9.5, 9.6, 9.4, 9.55]}
ACCEPT = {"baseline": [2.5, 2.5, 2.52, 2.48], "candidate": [2.5, 2.5, 2.52, 2.48]}


def record_cpu_trace(path: Path, *, softmax: bool, cycles: int = 4) -> None:
    """A real torch.profiler CPU trace with the micro engine's region labels."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    logits = torch.randn(2, 4096)
    weight = torch.randn(4096, 256)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(cycles):
            with record_function("step[DECODE bs=2]"):
                for _ in range(2):
                    logits @ weight
                    torch.softmax(logits, -1).max(-1) if softmax else torch.argmax(logits, -1)
            with record_function("step[TARGET_VERIFY bs=2]"):
                (logits @ weight).relu()
            with record_function("step[DRAFT_EXTEND_V2 bs=2]"):
                logits @ weight
                torch.softmax(logits, -1).max(-1) if softmax else torch.argmax(logits, -1)
    raw = path.with_suffix("")  # .trace.json
    prof.export_chrome_trace(str(raw))
    path.write_bytes(gzip.compress(raw.read_bytes()))
    raw.unlink()


def _analysis_of(trace: Path) -> dict:
    from sglang_spec_harness.traces import analyze_traces

    return analyze_traces([trace]).to_json_dict()


def _kernel_rule(name: str, variant: str, region: str, per: tuple[int, int], total: int, verdict: str, reason: str) -> dict:
    return {
        "name": name, "kind": "kernel_count", "description": f"{variant} softmax in {region}",
        "verdict": verdict, "reason": reason,
        "params": {"region": region, "pattern": "softmax", "variants": [variant], "per": "replay"},
        "numbers": {"observations": [{
            "variant": variant, "trial": f"0{0 if variant == 'baseline' else 1}-{variant}-profiled", "rank": 0,
            "region": region, "pattern": "softmax", "unit": "span", "replays": 4, "total": total,
            "per_replay_min": per[0], "per_replay_max": per[1], "ok": verdict == "PASS"}]},
        "preconditions": [{"what": "trace has CPU ops", "ok": True, "detail": "1234 ops"}],
    }


def results_document(run_dir: Path) -> dict:
    """results.json as docs/internals.md describes it: every rule kind, verdict PASS."""
    rules = [
        _kernel_rule("candidate_no_softmax_draft_decode", "candidate", "DRAFT_DECODE", (0, 0), 0, "PASS",
                     "0 softmax per replay in 4 replays"),
        _kernel_rule("baseline_has_softmax_draft_decode", "baseline", "DRAFT_DECODE", (2, 2), 8, "PASS",
                     "2 softmax per replay in 4 replays"),
        {"name": "accept_length_unchanged", "kind": "accept_length", "description": "", "verdict": "PASS",
         "reason": "ratio 1.000 within ±1%", "params": {"rel_tolerance": 0.01},
         "numbers": {"baseline": ACCEPT["baseline"], "candidate": ACCEPT["candidate"], "ratio": 1.0,
                     "ci_low": 0.995, "ci_high": 1.005, "rel_tolerance": 0.01, "min": 1.5},
         "preconditions": []},
        {"name": "greedy_outputs_identical", "kind": "output_identity", "description": "", "verdict": "PASS",
         "reason": "32 of 32 requests identical", "params": {"min_fraction": 1.0},
         "numbers": {"compared": 32, "identical": 32, "fraction": 1.0, "first_difference": None}, "preconditions": []},
        {"name": "tpot_improved", "kind": "tpot_gain", "description": "", "verdict": "PASS",
         "reason": "gain 5.4% (95% CI 4.1% – 6.6%) clears 1%", "params": {"min_gain": 0.01},
         "numbers": {"baseline_ms": TPOT["baseline"], "candidate_ms": TPOT["candidate"], "ratio": 0.946,
                     "ci_low": 0.934, "ci_high": 0.959, "confidence": 0.95, "gain": 0.054, "p_value": 0.03,
                     "min_gain": 0.01, "min_detectable_gain": 0.02}, "preconditions": []},
        {"name": "gain_explained_by_softmax", "kind": "explained_gain", "description": "", "verdict": "PASS",
         "reason": "measured 0.55 ms, predicted 0.5 ms", "params": {},
         "numbers": {"measured_saving_ms": 0.55, "predicted_saving_ms": 0.5, "ratio": 1.1,
                     "removed_us_per_cycle": 1250.0, "tokens_per_cycle": 2.5}, "preconditions": []},
    ]
    return {
        "schema_version": 1, "scenario": "tiny", "run_dir": str(run_dir), "aa": False, "run_status": "complete",
        "evaluated_at": "2026-11-29T15:30:00", "verdict": "PASS", "exit_code": 0,
        "variants": {v: {"timed_trials": [], "profiled_trials": [], "median_tpot_ms": TPOT[v],
                         "accept_length": ACCEPT[v]} for v in ("baseline", "candidate")},
        "rules": rules,
    }


def make_run_dir(root: Path, *, name: str = "20261129-150000-tiny", analysis: bool = True) -> Path:
    """A complete run directory of scenario `tiny`: 2 profiled + 8 timed trials (ABBA), PASS."""
    run_dir = root / "runs" / name
    (run_dir / "trials").mkdir(parents=True)
    (run_dir / "scenario.yaml").write_text(SCENARIO_YAML)
    plan = []
    order = [("baseline", "profiled", 0), ("candidate", "profiled", 0)]
    for rep in range(4):
        arms = ["baseline", "candidate"] if rep % 2 == 0 else ["candidate", "baseline"]
        order += [(arm, "timed", rep) for arm in arms]
    analysis_doc: dict = {"schema_version": 1, "trials": {}}
    for index, (variant, kind, rep) in enumerate(order):
        dir_name = f"{index:02d}-{variant}-{kind}"
        trial_dir = run_dir / "trials" / dir_name
        trial_dir.mkdir()
        plan.append({"index": index, "variant": variant, "kind": kind, "repetition": rep, "dir": f"trials/{dir_name}"})
        traces = []
        if kind == "profiled":
            (trial_dir / "profile").mkdir()
            trace = trial_dir / "profile" / f"{variant}-1-TP-0.trace.json.gz"
            record_cpu_trace(trace, softmax=variant == "baseline")
            traces.append(f"profile/{trace.name}")
            if analysis:
                analysis_doc["trials"][dir_name] = _analysis_of(trace)
        tpot = TPOT[variant][rep] if kind == "timed" else 30.0
        accept = ACCEPT[variant][rep] if kind == "timed" else 2.5
        (trial_dir / "server.log").write_text("server started\n")
        (trial_dir / "requests.jsonl").write_text("")
        (trial_dir / "trial.json").write_text(json.dumps({
            "index": index, "variant": variant, "kind": kind, "repetition": rep, "status": "ok", "error": None,
            "command": f"python -m sglang_spec_harness.micro.server --port 1234{' --disable-topk1-fast-path' if variant == 'baseline' else ''}",
            "started": "2026-11-29T15:00:00", "finished": "2026-11-29T15:00:10",
            "server_info": {"version": "micro-0.1", "speculative_eagle_topk": 1,
                            "fast_path": variant == "candidate"},
            "summary": {"requests": 8, "errors": 0, "completion_tokens": 384, "spec_verify_ct": 154,
                        "accept_length": accept, "median_tpot_ms": tpot, "mean_tpot_ms": tpot,
                        "median_ttft_ms": 20.0, "median_itl_ms": tpot * 2.5, "output_throughput_tok_s": 1000 / tpot,
                        "duration_s": 5.0},
            "traces": traces,
        }))
    (run_dir / "run.json").write_text(json.dumps({
        "schema_version": 1, "scenario": "tiny", "aa": False, "status": "complete", "error": None,
        "started": "2026-11-29T15:00:00", "finished": "2026-11-29T15:02:05", "plan": plan}))
    (run_dir / "environment.json").write_text(json.dumps({
        "harness_version": "0.1.0", "git_commit": "abc123", "python": "3.11.9", "torch": "2.13.0+cpu",
        "gpu": None, "cpu": "test CPU", "hostname": "testhost"}))
    if analysis:
        (run_dir / "analysis.json").write_text(json.dumps(analysis_doc))
    (run_dir / "results.json").write_text(json.dumps(results_document(run_dir)))
    return run_dir
