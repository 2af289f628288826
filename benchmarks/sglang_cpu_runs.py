"""The real SGLang server on this CPU, run again and again: how often the scenario ends PASS, how long
a run and a server start take, and the figures behind each verdict.

Runs `harness run scenarios/sglang_cpu_tiny_eagle_topk1.yaml` N times (each its own run directory
under --out), and with --planted once more as a known failure (the baseline patch in both arms:
must end FAIL on the kernel rule). Per run: verdict and exit code, wall time, each server launch's
start-up time, the TPOT ratio with its interval and df, the block-to-block sd, accept length. Each
run's figures are saved as soon as it ends (--result); the summary is printed at the end.
Needs `make sglang-cpu`. Measure on a machine doing nothing else.

    .venv/bin/python benchmarks/sglang_cpu_runs.py --runs 10 --planted --result benchmarks/sglang_cpu_runs.json

The shipped scenario has a fixed design (3 launches per arm, 18 rounds). Given a budget
(trials.budget in the scenario file: an adaptive design), each row also says how far its looks went;
with --fixed N, N runs of the fixed design (FIXED_DESIGN, no budget) are spread evenly among the
adaptive ones, and --planted runs the planted scenario in both designs: the same machine, the same
hour, side by side.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_spec_harness.scenario import load_scenario, scenario_to_yaml  # noqa: E402
from sglang_spec_harness.sglang_cpu.base import is_current  # noqa: E402

SCENARIO = REPO / "scenarios" / "sglang_cpu_tiny_eagle_topk1.yaml"
INSTALL = REPO / ".sglang-cpu"


def bad_input(message: str) -> SystemExit:
    print(message, file=sys.stderr)
    return SystemExit(2)


# The design the shipped scenario had before its budget (2026-12-03): the reference for wall time.
FIXED_DESIGN = {"launches": 3, "repetitions": 18, "budget": None}


def derived_scenario(out: Path, name: str, *, planted: bool = False, fixed: bool = False) -> Path:
    """The scenario, with softmax in both arms (the baseline's patches in the candidate too) and/or
    the fixed design."""
    data = yaml.safe_load(scenario_to_yaml(load_scenario(SCENARIO)))
    data["name"] = name
    if planted:
        data["variants"]["candidate"]["patches"] = data["variants"]["baseline"]["patches"]
    if fixed:
        data["trials"].update(FIXED_DESIGN)
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_once(scenario: Path, out: Path) -> dict[str, Any]:
    before = set(out.iterdir()) if out.exists() else set()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "run", str(scenario), "--out", str(out),
                           "--no-progress"], cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    new = [p for p in out.iterdir() if p.is_dir() and p not in before and p.name != "latest"]
    row: dict[str, Any] = {"exit_code": proc.returncode, "command_wall_s": round(wall, 1)}
    if len(new) != 1:
        row["error"] = (proc.stderr.strip().splitlines() or ["no run directory"])[-1]
        return row
    run_dir = new[0]
    row["run_dir"] = str(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())
    row.update(verdict=results["verdict"], run_wall_s=run.get("wall_s"), measured_s=run.get("measured_s"),
               rules={r["name"]: r["verdict"] for r in results["rules"]})
    row["startup_s"] = sorted(json.loads(p.read_text()).get("startup_s") or 0
                              for p in (run_dir / "launches").glob("*/launch.json"))
    tpot = next((r for r in results["rules"] if r["kind"] == "tpot_gain"), None)
    if tpot is not None:
        n = tpot["numbers"]
        nested = n.get("nested") or {}
        row["tpot"] = {"ratio": n.get("ratio"), "ci_low": n.get("ci_low"), "ci_high": n.get("ci_high"),
                       "df": nested.get("df"), "block_sd": nested.get("sd_block"), "launch_sd": nested.get("sd_launch"),
                       "launches_pooled": nested.get("pooled")}
        row["tpot_reason"] = tpot["reason"]
    row["accept_length"] = {v: statistics.median(results["variants"][v]["accept_length"] or [0])
                            for v in ("baseline", "candidate")}
    row["failing"] = {r["name"]: r["reason"] for r in results["rules"] if r["verdict"] != "PASS"}
    looks = run.get("looks") or []
    if looks:
        tpot_looks = [look for look in looks if look.get("kind") == "tpot"]
        row["looks"] = {"tpot_looks": len(tpot_looks), "rounds": tpot_looks[-1]["rounds"] if tpot_looks else 0,
                        "launches_per_arm": tpot_looks[-1]["launches_per_arm"] if tpot_looks else None,
                        "stopped": looks[-1].get("reason")}
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--planted", action="store_true", help="one more run with softmax planted in both arms")
    parser.add_argument("--fixed", type=int, default=0, help="runs of the fixed design, spread among the adaptive ones")
    parser.add_argument("--out", type=Path, default=Path("/tmp/harness-sglang-cpu-runs"))
    parser.add_argument("--result", type=Path, help="JSON file for the figures (written after every run)")
    args = parser.parse_args()
    if args.runs < 0:
        raise bad_input("--runs: expected 0 or more")
    if not is_current(INSTALL):
        raise bad_input(f"{INSTALL} is missing or out of date: run `make sglang-cpu` first")
    args.out.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {"scenario": str(SCENARIO.relative_to(REPO)), "host": platform.node(),
                                "machine": platform.machine(), "python": platform.python_version(),
                                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": [], "planted": None}
    if args.fixed < 0:
        raise bad_input("--fixed: expected 0 or more")
    jobs: list[tuple[str, Path]] = [("run", SCENARIO)] * args.runs
    fixed = derived_scenario(args.out, "sglang_cpu_fixed_design", fixed=True)
    for k in range(args.fixed):  # evenly among the adaptive runs, none first
        jobs.insert(round((k + 1) * (len(jobs) + 1) / (args.fixed + 1)), ("fixed", fixed))
    if args.planted:
        jobs.append(("planted", derived_scenario(args.out, "sglang_cpu_planted_softmax_in_both", planted=True)))
        if args.fixed:
            jobs.append(("planted_fixed", derived_scenario(args.out, "sglang_cpu_planted_fixed", planted=True, fixed=True)))
    document["fixed_runs"], document["planted_fixed"] = [], None
    for i, (kind, scenario) in enumerate(jobs, 1):
        row = run_once(scenario, args.out)
        if kind in ("planted", "planted_fixed"):
            document[kind] = row
        else:
            document["runs" if kind == "run" else "fixed_runs"].append(row)
        tpot = row.get("tpot") or {}
        print(f"[{i}/{len(jobs)}] {kind}: {row.get('verdict', row.get('error'))} (exit {row['exit_code']}) "
              f"wall {row.get('run_wall_s')} s, starts {row.get('startup_s')}, TPOT {tpot.get('ratio')} "
              f"[{tpot.get('ci_low')}, {tpot.get('ci_high')}] df {tpot.get('df')}; looks {row.get('looks')}", flush=True)
        if args.result:
            args.result.write_text(json.dumps(document, indent=2) + "\n")
    runs = document["runs"]
    if runs:
        passed = sum(1 for r in runs if r.get("verdict") == "PASS")
        walls = [r["run_wall_s"] for r in runs if r.get("run_wall_s")]
        starts = [s for r in runs for s in r.get("startup_s", [])]
        ratios = [r["tpot"]["ratio"] for r in runs if r.get("tpot", {}).get("ratio")]
        print(f"PASS {passed}/{len(runs)}; run wall {min(walls):.0f}-{max(walls):.0f} s (median {statistics.median(walls):.0f}); "
              f"server start {min(starts):.0f}-{max(starts):.0f} s (median {statistics.median(starts):.0f}); "
              f"TPOT ratio {min(ratios):.3f}-{max(ratios):.3f}")
    for name in ("fixed_runs",):
        fixed_rows = document[name]
        if fixed_rows:
            walls = [r["run_wall_s"] for r in fixed_rows if r.get("run_wall_s")]
            print(f"fixed design: PASS {sum(1 for r in fixed_rows if r.get('verdict') == 'PASS')}/{len(fixed_rows)}; "
                  f"run wall {min(walls):.0f}-{max(walls):.0f} s (median {statistics.median(walls):.0f})")
    if document["planted_fixed"]:
        planted = document["planted_fixed"]
        print(f"planted, fixed design: {planted.get('verdict')} (exit {planted['exit_code']}), "
              f"command {planted['command_wall_s']} s")
    if document["planted"]:
        planted = document["planted"]
        print(f"planted: {planted.get('verdict')} (exit {planted['exit_code']}); failing: {sorted(planted.get('failing', {}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
