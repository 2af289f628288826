"""`make profile`'s scenario N times in a row, idle or beside benchmarks/background_load.py: verdict,
wall time, and (adaptive runs) how far the looks went. Nothing else should run meanwhile.

    .venv/bin/python benchmarks/profile_runs.py --runs 10 -o /tmp/idle.json
    .venv/bin/python benchmarks/profile_runs.py --runs 10 --load -o /tmp/load.json
    .venv/bin/python benchmarks/profile_runs.py --runs 5 --set trials.budget=null   # the fixed design
    # side by side: a run of the fixed design (2 launches x 16 rounds, no budget) after every 3rd
    .venv/bin/python benchmarks/profile_runs.py --runs 10 --fixed-every 3 -o /tmp/idle.json
    # fail fast: a planted softmax (candidate = baseline), adaptive and fixed alternating
    .venv/bin/python benchmarks/profile_runs.py --runs 4 --fixed-every 1 \\
        --set 'variants.candidate.args={--disable-topk1-fast-path: true}' -o /tmp/planted.json
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

REPO = Path(__file__).resolve().parents[1]
FIXED_DESIGN = ["trials.budget=null", "trials.repetitions=16"]  # the design before issue 27


def one_run(scenario: str, sets: list[str], out: Path, *, aa: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    cmd = [str(REPO / ".venv/bin/harness"), "run", scenario, "--json", "--no-progress", "--out", str(out),
           *(["--aa"] if aa else [])]
    for item in sets:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - started
    outcome = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    run = json.loads((Path(outcome["run_dir"]) / "run.json").read_text()) if outcome.get("run_dir") else {}
    looks = [look for look in run.get("looks") or [] if look.get("kind") == "tpot"]
    return {"verdict": outcome.get("verdict"), "exit": proc.returncode, "wall_s": round(wall, 1),
            "run_wall_s": run.get("wall_s"), "looks": len(looks),
            "rounds": looks[-1]["rounds"] if looks else None,
            "launches_per_arm": looks[-1]["launches_per_arm"] if looks else None,
            "stopped": (run.get("looks") or [{}])[-1].get("reason")}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"runs": 0}
    walls = [r["wall_s"] for r in rows]
    run_walls = [r["run_wall_s"] for r in rows if r["run_wall_s"] is not None]
    verdicts: dict[str, int] = {}
    for r in rows:
        verdicts[str(r["verdict"])] = verdicts.get(str(r["verdict"]), 0) + 1
    return {"runs": len(rows), "verdicts": verdicts, "wall_s_median": statistics.median(walls),
            "wall_s_min": min(walls), "wall_s_max": max(walls),
            "run_wall_s_median": statistics.median(run_walls) if run_walls else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--scenario", default=str(REPO / "scenarios/micro_topk1.yaml"))
    parser.add_argument("--load", action="store_true", help="beside benchmarks/background_load.py")
    parser.add_argument("--aa", action="store_true", help="A/A runs (both arms the baseline): any verdict but "
                                                          "INCONCLUSIVE on the TPOT noise floor is a false one")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--fixed-every", type=int, default=0, metavar="N",
                        help="after every N-th run, one run of the fixed design (the same --set, no budget, 16 rounds)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/profile_runs"))
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    load = None
    if args.load:
        load = subprocess.Popen([sys.executable, str(REPO / "benchmarks/background_load.py"), "--seconds", "100000"])
    rows: list[dict[str, Any]] = []
    fixed: list[dict[str, Any]] = []
    try:
        for i in range(args.runs):
            rows.append({"run": i + 1, **one_run(args.scenario, args.set, args.out, aa=args.aa)})
            print(json.dumps(rows[-1]), flush=True)
            if args.fixed_every and (i + 1) % args.fixed_every == 0:
                fixed.append({"after_run": i + 1, **one_run(args.scenario, [*args.set, *FIXED_DESIGN], args.out,
                                                            aa=args.aa)})
                print(json.dumps({"fixed": fixed[-1]}), flush=True)
    finally:
        if load is not None:
            load.terminate()
            load.wait()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    summary = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit, "host": platform.node(),
               "load": args.load, "aa": args.aa, "set": args.set, "design": summarize(rows),
               **({"fixed_design": summarize(fixed), "fixed_set": FIXED_DESIGN} if fixed else {})}
    print(json.dumps(summary))
    if args.output:
        args.output.write_text(json.dumps({"summary": summary, "rows": rows, "fixed_rows": fixed}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
