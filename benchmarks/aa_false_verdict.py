"""Measure the false-verdict rate of the TPOT rule on A/A data (both arms the same variant).

1. One A/A run with many timed trials (>= 20 in all) gives a pool of per-trial median TPOTs of one
   variant; the TPOT rule is evaluated on >= 200 seeded random splits of that pool into two arms.
2. Several real `harness run --aa` runs confirm it end to end (the `aa_noise_floor` rule).
A PASS, or a FAIL saying "slower", on A/A data is a false verdict; the target is at most 5%.
(With min_gain > 0, "gain below min_gain" is the correct answer on A/A data and is not counted.)

    .venv/bin/python benchmarks/aa_false_verdict.py [--scenario scenarios/micro_topk1.yaml]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.verdict import stats  # noqa: E402
from harness.rundir import load_run_dir  # noqa: E402
from harness.scenario import TpotGainCheck, load_scenario  # noqa: E402


def harness_run(scenario: Path, out: Path, *extra: str) -> Path:
    """One real `harness run --aa`; returns its run directory."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    cmd = [sys.executable, "-m", "harness.commands.cli", "run", str(scenario), "--aa", "--out", str(out), "--no-progress", *extra]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    new = sorted(p for p in set(out.iterdir()) - before if not p.is_symlink())  # not `latest`
    if not new:
        raise SystemExit(f"harness run produced no run directory (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    print(f"  {new[-1].name}: exit {proc.returncode} in {time.monotonic() - started:.0f} s", flush=True)
    return new[-1]


def pooled_tpots(run_dir: Path) -> list[float]:
    run = load_run_dir(run_dir)
    return [float(t.summary["median_tpot_ms"]) for t in run.trials
            if t.kind == "timed" and t.ok and t.summary.get("median_tpot_ms") is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=REPO / "scenarios" / "micro_topk1.yaml")
    parser.add_argument("--pool-repetitions", type=int, default=12, help="timed trials per arm of the pool run")
    parser.add_argument("--splits", type=int, default=400)
    parser.add_argument("--aa-runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/harness-aa"))
    parser.add_argument("--result", type=Path, default=REPO / "benchmarks" / "aa_false_verdict.json")
    parser.add_argument("--pool-run", type=Path, help="reuse this A/A run directory as the pool (no new pool run)")
    parser.add_argument("--reuse", type=Path, nargs="*", default=[],
                        help="earlier `harness run --aa` directories to count with the new real runs")
    args = parser.parse_args()

    scenario = load_scenario(args.scenario)
    tpot_rules = [c for c in scenario.checks if isinstance(c, TpotGainCheck)]
    min_gain = tpot_rules[0].min_gain if tpot_rules else 0.0

    if args.pool_run:
        pool_dir = args.pool_run
        print(f"pool: {pool_dir}", flush=True)
    else:
        print(f"pool: one A/A run with {args.pool_repetitions} timed trials per arm", flush=True)
        pool_dir = harness_run(args.scenario, args.out, "--repetitions", str(args.pool_repetitions))
    pool = pooled_tpots(pool_dir)
    per_arm = scenario.trials.repetitions
    per_arm = min(per_arm, len(pool) // 2)
    splits = {}
    for paired in (True, False):  # the checks use the paired rule on interleaved runs
        for gain in sorted({0.0, min_gain}):
            key = f"{'paired' if paired else 'unpaired'} min_gain={gain}"
            s = splits[key] = stats.false_verdict_rate(pool, min_gain=gain, n_splits=args.splits, per_arm=per_arm,
                                                       seed=1, paired=paired)
            print(f"  {len(pool)} trials, {args.splits} splits, {per_arm} per arm, {key}: "
                  f"PASS {s['pass']:.1%}, FAIL slower {s['fail_slower']:.1%}, FAIL below min_gain "
                  f"{s['fail_below_min_gain']:.1%} -> false verdicts {s['false_verdict_rate']:.1%}", flush=True)

    print(f"{len(args.reuse)} earlier and {args.aa_runs} new real A/A runs of the scenario as written", flush=True)
    runs = []
    for run_dir in [*args.reuse, *(None for _ in range(args.aa_runs))]:
        run_dir = run_dir or harness_run(args.scenario, args.out)
        results = json.loads((run_dir / "results.json").read_text())
        rule = next(r for r in results["rules"] if r["name"] == "aa_noise_floor")
        runs.append({"run": run_dir.name, "verdict": rule["verdict"], "reason": rule["reason"],
                     "tpot_verdict": rule["numbers"]["decision"]["verdict"],
                     "cv": rule["numbers"]["noise"]["cv"], "mde": rule["numbers"]["noise"]["mde"]})
        print(f"    aa_noise_floor {rule['verdict']}: {rule['reason']}", flush=True)
    false_runs = sum(r["verdict"] == "FAIL" for r in runs)

    result = {
        "scenario": str(args.scenario.relative_to(REPO)) if args.scenario.is_relative_to(REPO) else str(args.scenario),
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "python": platform.python_version()},
        "pool": {"run": pool_dir.resolve().name, "trials": len(pool), "tpot_ms": pool},
        "splits": splits,
        "aa_runs": runs,
        "aa_runs_false_verdicts": false_runs,
    }
    args.result.write_text(json.dumps(result, indent=2) + "\n")
    print(f"false verdicts: splits {max(s['false_verdict_rate'] for s in splits.values()):.1%} "
          f"(worst min_gain), real A/A runs {false_runs}/{len(runs)}; written to {args.result}")


if __name__ == "__main__":
    main()
