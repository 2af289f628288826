"""`make profile`'s scenario N times in a row, idle or beside benchmarks/background_load.py: verdict,
wall time, and (adaptive runs) how far the looks went. Nothing else should run meanwhile.

    .venv/bin/python benchmarks/profile_runs.py --runs 10 -o /tmp/idle.json
    .venv/bin/python benchmarks/profile_runs.py --runs 10 --load -o /tmp/load.json
    .venv/bin/python benchmarks/profile_runs.py --runs 5 --set trials.budget=null   # the fixed design
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--scenario", default=str(REPO / "scenarios/micro_topk1.yaml"))
    parser.add_argument("--load", action="store_true", help="beside benchmarks/background_load.py")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--out", type=Path, default=Path("/tmp/profile_runs"))
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    load = None
    if args.load:
        load = subprocess.Popen([sys.executable, str(REPO / "benchmarks/background_load.py"), "--seconds", "100000"])
    rows = []
    try:
        for i in range(args.runs):
            started = time.monotonic()
            cmd = [str(REPO / ".venv/bin/harness"), "run", args.scenario, "--json", "--no-progress", "--out", str(args.out)]
            for item in args.set:
                cmd += ["--set", item]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.monotonic() - started
            outcome = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
            run = json.loads((Path(outcome["run_dir"]) / "run.json").read_text()) if outcome.get("run_dir") else {}
            looks = [look for look in run.get("looks") or [] if look.get("kind") == "tpot"]
            row = {"run": i + 1, "verdict": outcome.get("verdict"), "exit": proc.returncode, "wall_s": round(wall, 1),
                   "run_wall_s": run.get("wall_s"), "looks": len(looks),
                   "rounds": looks[-1]["rounds"] if looks else None,
                   "launches_per_arm": looks[-1]["launches_per_arm"] if looks else None,
                   "stopped": (run.get("looks") or [{}])[-1].get("reason")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if load is not None:
            load.terminate()
            load.wait()
    walls = [r["wall_s"] for r in rows]
    summary = {"runs": len(rows), "pass": sum(r["verdict"] == "PASS" for r in rows),
               "wall_s_median": statistics.median(walls), "wall_s_max": max(walls), "wall_s_min": min(walls),
               "load": args.load, "set": args.set}
    print(json.dumps(summary))
    if args.output:
        args.output.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
