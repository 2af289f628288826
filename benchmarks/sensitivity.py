"""Verdict power per minute: false verdicts on A/A data and detection of planted slowdowns, for the
restart mode and the warm interleaved mode, measured with real `harness run`s of the micro engine.

For each mode:
- A/A runs (`harness run --aa`): both arms run the baseline configuration. A PASS, or a FAIL saying
  "slower", of the TPOT rule is a false verdict (`aa_noise_floor` FAIL).
- Planted slowdowns: both arms run the baseline configuration, the candidate with the micro
  engine's `--inject-delay-us D` (a busy-wait in every draft-decode cycle). D is set to a fraction f
  of the cycle time measured in the A/A runs (cycle = TPOT x accept length), so TPOT grows by about
  f. Detection = the TPOT rule FAILs "slower".
- Per run: wall time, server launches, and the share of wall time spent in measured requests.

Runs are shuffled (seeded) so that a drift of the machine hits them alike: the A/A runs first (they
calibrate the delay), then the planted ones; with `--cycle-ms` (the cycle measured beforehand) all
conditions in one shuffled order. Each result is saved as soon as it exists (`--result`), and
`--resume` skips the runs already there.
Measure on a machine doing nothing else.

    .venv/bin/python benchmarks/sensitivity.py                        # 20 A/A + 3 x 10 planted, both modes
    .venv/bin/python benchmarks/sensitivity.py --aa-runs 2 --planted-runs 1 --modes interleaved   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from figures import project_relative

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_spec_harness.scenario import load_scenario  # noqa: E402


def mode_scenario(base: dict[str, Any], mode: str, restart_repetitions: int, warm: dict[str, int]) -> dict[str, Any]:
    """The scenario in `mode`: as written for its own mode (with `warm` overrides of trials.launches
    and trials.repetitions); restart: one launch per sample, each sample 2 blocks' worth of requests
    (the shape of the default scenario before the warm modes)."""
    data = json.loads(json.dumps(base))
    if mode == data.get("trials", {}).get("mode", "restart"):
        data["trials"].update(warm)
        return data
    if mode == "restart":
        block = data["trials"].get("block_requests") or data["workload"].get("num_requests", 16)
        data["workload"]["num_requests"] = 2 * block
        data["trials"] = {"mode": "restart", "repetitions": restart_repetitions,
                          "profiled": data["trials"].get("profiled", 1), "order": "random"}
        return data
    raise SystemExit(f"the scenario is not in mode {mode!r}; give one that is, or use --modes restart")


def planted(data: dict[str, Any], delay_us: int) -> dict[str, Any]:
    """Both arms the baseline configuration; the candidate busy-waits `delay_us` per draft cycle.
    Only the TPOT rule: the point is whether it sees the slowdown."""
    data = json.loads(json.dumps(data))
    base = data["variants"]["baseline"]
    data["variants"] = {
        "baseline": base,
        "candidate": {**base, "description": f"baseline + {delay_us} us per draft-decode cycle",
                      "args": {**base.get("args", {}), "--inject-delay-us": delay_us}},
    }
    data["rules"] = [c for c in data.get("rules", []) if c["kind"] == "tpot_gain"]
    return data


def harness_run(scenario: Path, out: Path, *extra: str) -> tuple[Path, int, float]:
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "run", str(scenario), "--out", str(out),
                           "--no-progress", *extra], cwd=REPO, capture_output=True, text=True)
    new = sorted(p for p in set(out.iterdir()) - before if not p.is_symlink())
    if not new:
        raise SystemExit(f"harness run produced no run directory (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return new[-1], proc.returncode, time.monotonic() - started


def tpot_rule(run_dir: Path, aa: bool) -> dict[str, Any]:
    results = json.loads((run_dir / "results.json").read_text())
    name = "aa_noise_floor" if aa else next(r["name"] for r in results["rules"] if r["kind"] == "tpot_gain")
    rule = next(r for r in results["rules"] if r["name"] == name)
    decision = rule["numbers"].get("decision") if aa else None
    n = rule["numbers"]
    est = (decision or {}).get("estimate") or {}
    return {
        "rule_verdict": rule["verdict"],
        "tpot_verdict": decision["verdict"] if decision else rule["verdict"],
        "fail_kind": decision["fail_kind"] if decision else n.get("fail_kind"),
        "ratio": est.get("ratio") if decision else n.get("ratio"),
        "ci": [est.get("ci_low"), est.get("ci_high")] if decision else [n.get("ci_low"), n.get("ci_high")],
        "reason": rule["reason"],
        "nested": n.get("nested"),
    }


def cycle_ms(run_dir: Path) -> float | None:
    """Median over timed samples of TPOT x accept length: the decode cycle the delay is added to."""
    values = []
    for trial in run_dir.glob("trials/*-timed/trial.json"):
        s = json.loads(trial.read_text()).get("summary") or {}
        if s.get("median_tpot_ms") and s.get("accept_length"):
            values.append(s["median_tpot_ms"] * s["accept_length"])
    return statistics.median(values) if values else None


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=REPO / "scenarios" / "micro_topk1.yaml")
    parser.add_argument("--modes", default="interleaved,restart")
    parser.add_argument("--aa-runs", type=int, default=20)
    parser.add_argument("--planted", default="0.03,0.05,0.10", help="slowdowns as fractions of TPOT")
    parser.add_argument("--planted-runs", type=int, default=10)
    parser.add_argument("--restart-repetitions", type=int, default=10)
    parser.add_argument("--launches", type=int, help="warm mode: launches per arm (default: the scenario's)")
    parser.add_argument("--rounds", type=int, help="warm mode: rounds (default: the scenario's repetitions)")
    parser.add_argument("--seed", type=int, default=0, help="the shuffled order of the runs")
    parser.add_argument("--out", type=Path, default=Path("/tmp/harness-sensitivity"))
    parser.add_argument("--result", type=Path, default=REPO / "benchmarks" / "sensitivity.json")
    parser.add_argument("--resume", action="store_true", help="keep the runs already in --result")
    parser.add_argument("--cycle-ms", type=float, help="the decode cycle to size the delays by, measured "
                        "beforehand (TPOT x accept length of the baseline's blocks): A/A and planted runs are "
                        "then shuffled together, so an interruption leaves every condition alike")
    args = parser.parse_args()

    load_scenario(args.scenario)  # valid, or one line and exit 2
    base = yaml.safe_load(args.scenario.read_text())
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    fractions = [float(f) for f in args.planted.split(",") if f.strip()]
    done: dict[str, Any] = json.loads(args.result.read_text()) if args.resume and args.result.exists() else {}
    runs: list[dict[str, Any]] = done.get("runs", [])
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        args.result.write_text(project_relative(json.dumps({
            "scenario": str(args.scenario), "machine": {"platform": platform.platform(), "python": platform.python_version(),
                                                        "cpus": __import__("os").cpu_count()},
            "calibration": calibration, "runs": runs, "summary": summarize(runs, modes, fractions)}, indent=2)) + "\n")

    def execute(mode: str, condition: str, fraction: float | None, delay_us: int | None, index: int) -> None:
        warm = {k: v for k, v in (("launches", args.launches), ("repetitions", args.rounds)) if v is not None}
        data = mode_scenario(base, mode, args.restart_repetitions, warm)
        aa = fraction is None
        if not aa:
            data = planted(data, delay_us)
        path = args.out / f"{mode}-{condition}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        run_dir, code, seconds = harness_run(path, args.out / "runs", *(["--aa"] if aa else []))
        record = json.loads((run_dir / "run.json").read_text())
        row = {"mode": mode, "condition": condition, "fraction": fraction, "delay_us": delay_us, "index": index,
               "run_dir": str(run_dir), "exit": code, "seconds": round(seconds, 1), "wall_s": record.get("wall_s"),
               "measured_s": record.get("measured_s"), "server_launches": record.get("server_launches"),
               "cycle_ms": cycle_ms(run_dir), **tpot_rule(run_dir, aa)}
        runs.append(row)
        save()
        print(f"[{len(runs)}] {mode} {condition} #{index}: exit {code} in {seconds:.0f} s; TPOT {row['tpot_verdict']}"
              f"{' ' + row['fail_kind'] if row['fail_kind'] else ''}, ratio {row['ratio']}", flush=True)

    calibration = done.get("calibration") or {}
    if args.cycle_ms is not None:
        if calibration and calibration.get("cycle_ms") != args.cycle_ms:
            raise SystemExit(f"--cycle-ms {args.cycle_ms:g} differs from the {calibration['cycle_ms']:g} ms the runs "
                             f"in {args.result} were sized by")
        calibration = {"cycle_ms": args.cycle_ms, "from_runs": "given (--cycle-ms)"}
    have = {(r["mode"], r["condition"], r["index"]) for r in runs}
    rng = random.Random(args.seed)
    aa_jobs = [(m, None, i) for m in modes for i in range(args.aa_runs) if (m, "aa", i) not in have]
    planted_jobs = [(m, f, i) for m in modes for f in fractions for i in range(args.planted_runs)
                    if (m, f"planted-{f:g}", i) not in have]

    def run_jobs(jobs: list[tuple[str, float | None, int]]) -> None:
        rng.shuffle(jobs)
        for mode, f, i in jobs:
            if f is None:
                execute(mode, "aa", None, None, i)
            else:
                execute(mode, f"planted-{f:g}", f, round(f * calibration["cycle_ms"] * 1000), i)

    if calibration:  # sized beforehand: every condition in one shuffled order
        run_jobs(aa_jobs + planted_jobs)
    else:  # A/A first: they calibrate the delay
        run_jobs(aa_jobs)
        cycles = [r["cycle_ms"] for r in runs if r["condition"] == "aa" and r["cycle_ms"]]
        if not cycles:
            raise SystemExit("no A/A run measured a cycle time: cannot size the planted delays")
        calibration = {"cycle_ms": statistics.median(cycles), "from_runs": len(cycles)}
        run_jobs(planted_jobs)
    save()
    print_table(summarize(runs, modes, fractions))
    print(f"written to {args.result}")


def summarize(runs: list[dict[str, Any]], modes: list[str], fractions: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        aa = [r for r in mine if r["condition"] == "aa"]
        false = sum(r["rule_verdict"] == "FAIL" for r in aa)
        row: dict[str, Any] = {"aa_runs": len(aa), "aa_false_verdicts": false, "aa_false_rate_ci95": wilson(false, len(aa)),
                               "aa_inconclusive": sum(r["tpot_verdict"] == "INCONCLUSIVE" for r in aa)}
        for f in fractions:
            p = [r for r in mine if r["condition"] == f"planted-{f:g}"]
            hit = sum(r["tpot_verdict"] == "FAIL" and r["fail_kind"] == "slower" for r in p)
            ratios = [r["ratio"] for r in p if r["ratio"]]
            row[f"planted_{f:g}"] = {"runs": len(p), "detected": hit, "rate_ci95": wilson(hit, len(p)),
                                     "median_ratio": statistics.median(ratios) if ratios else None,
                                     "false_pass": sum(r["tpot_verdict"] == "PASS" for r in p)}
        walls = [r["wall_s"] for r in mine if r.get("wall_s")]
        shares = [r["measured_s"] / r["wall_s"] for r in mine if r.get("wall_s") and r.get("measured_s") is not None]
        row["wall_s_median"] = statistics.median(walls) if walls else None
        row["wall_s_range"] = [min(walls), max(walls)] if walls else None
        row["server_launches"] = sorted({r["server_launches"] for r in mine if r.get("server_launches") is not None})
        row["measured_share_median"] = statistics.median(shares) if shares else None
        out[mode] = row
    return out


def print_table(summary: dict[str, Any]) -> None:
    for mode, row in summary.items():
        lo, hi = row["aa_false_rate_ci95"]
        print(f"{mode}: A/A false verdicts {row['aa_false_verdicts']}/{row['aa_runs']} (95% CI {lo:.0%}-{hi:.0%}), "
              f"inconclusive {row['aa_inconclusive']}; wall {row['wall_s_median']} s, launches {row['server_launches']}, "
              f"measured share {row['measured_share_median']}")
        for key, p in row.items():
            if key.startswith("planted_"):
                lo, hi = p["rate_ci95"]
                print(f"  {key}: detected {p['detected']}/{p['runs']} (95% CI {lo:.0%}-{hi:.0%}), median ratio "
                      f"{p['median_ratio']}, false PASS {p['false_pass']}")


if __name__ == "__main__":
    main()
