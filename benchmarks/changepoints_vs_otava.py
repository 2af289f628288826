"""Our change points (sglang_spec_harness/history/changepoints.py) against Apache Otava's on the same series.

Otava is never installed into the project: it pins numpy==2.2.0.* and scipy<1.17 and pulls the
BigQuery, gRPC and Slack SDKs. This script makes a venv of its own for it (default
/tmp/harness-otava-venv, `pip install apache-otava==0.8.0`) and runs Otava there, in a subprocess,
on the same series as ours:

- synthetic series: 24 runs, one level shift of a given size after run 12 (or none), normal noise of
  a given coefficient of variation, several seeds each;
- the demonstration's real series (benchmarks/history_demo.json, from history_demo.py), when present.

Otava runs twice: its default (`compute_change_points`: Hunter's windowed E-divisive with a t-test,
max_pvalue 0.001) and the original permutation test (`compute_change_points_orig`). A change point
counts as found when it is within one run of the planted one; any other is a false one.

    .venv/bin/python benchmarks/changepoints_vs_otava.py [--seeds 20] [--venv /tmp/harness-otava-venv]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_spec_harness.history.changepoints import Options, change_points  # noqa: E402

OTAVA = "apache-otava==0.8.0"

# Runs inside Otava's venv: series on stdin, change-point indices on stdout.
OTAVA_SCRIPT = r"""
import json, sys
from otava.analysis import compute_change_points, compute_change_points_orig
job = json.load(sys.stdin)
out = {"default": [], "orig": []}
for values in job["series"]:
    cps, _ = compute_change_points(values, window_len=job["window_len"], max_pvalue=job["max_pvalue"],
                                   min_magnitude=job["min_magnitude"])
    out["default"].append([int(cp.index) for cp in cps])
    cps, _ = compute_change_points_orig(values, max_pvalue=job["orig_max_pvalue"], seed=0)
    out["orig"].append([int(cp.index) for cp in cps])
print(json.dumps(out))
"""


def otava_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} with {OTAVA} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", OTAVA], check=True)
    return python


def synthetic(seeds: int, length: int = 24, at: int = 12) -> list[dict]:
    series = []
    for cv in (0.02, 0.05, 0.10):
        for shift in (0.0, 0.05, 0.10, 0.30):
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                levels = np.r_[np.full(at, 10.0), np.full(length - at, 10.0 * (1 + shift))]
                values = levels * (1 + cv * rng.standard_normal(length))
                series.append({"family": f"cv {cv:.0%}, shift {shift:+.0%}", "values": values.tolist(),
                               "planted": [at] if shift else []})
    return series


def demo_series(paths: list[Path]) -> list[dict]:
    """The real series of history_demo.py runs (its JSON output): the candidate's are planted."""
    out = []
    for path in paths:
        if not path.exists():
            continue
        demo = json.loads(path.read_text())
        for name, values in demo.get("series_values", {}).items():
            scenario, variant, metric = name.split(" · ")[:3]
            planted = [demo["change_at"] - 1] if "[A/A]" not in scenario and "candidate" in variant else []
            out.append({"family": f"demo {demo['delay_us'] // 1000} ms: {scenario} · {variant} · {metric}",
                        "values": values, "planted": planted})
    return out


def score(found: list[int], planted: list[int]) -> tuple[bool, int]:
    hit = all(any(abs(f - p) <= 1 for f in found) for p in planted)
    false = sum(1 for f in found if not any(abs(f - p) <= 1 for p in planted))
    return hit, false


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="series per family (default 20)")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/harness-otava-venv"))
    parser.add_argument("--demo", type=Path, action="append",
                        help="history_demo.py JSON output(s) whose series to add (default benchmarks/history_demo.json)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "changepoints_vs_otava.json")
    args = parser.parse_args()

    series = synthetic(args.seeds) + demo_series(args.demo or [REPO / "benchmarks" / "history_demo.json"])
    options = Options()  # the defaults of `harness history report`
    started = time.monotonic()
    ours = [[cp.index for cp in change_points(s["values"], options)] for s in series]
    ours_s = time.monotonic() - started
    job = {"series": [s["values"] for s in series], "window_len": 50, "max_pvalue": 0.001,
           "min_magnitude": options.min_magnitude, "orig_max_pvalue": options.max_pvalue}
    started = time.monotonic()
    done = subprocess.run([str(otava_python(args.venv)), "-c", OTAVA_SCRIPT], input=json.dumps(job),
                          capture_output=True, text=True, check=True)
    otava_s = time.monotonic() - started
    theirs = json.loads(done.stdout)

    methods = {"harness": ours, "otava default (t-test)": theirs["default"], "otava orig (permutation)": theirs["orig"]}
    families = list(dict.fromkeys(s["family"] for s in series))
    rows = []
    for family in families:
        idx = [i for i, s in enumerate(series) if s["family"] == family]
        row = {"family": family, "series": len(idx), "planted": bool(series[idx[0]]["planted"])}
        for name, found in methods.items():
            scored = [score(found[i], series[i]["planted"]) for i in idx]
            row[name] = {"found": sum(h for h, _ in scored) if row["planted"] else None,
                         "false": sum(f for _, f in scored)}
        row["agree"] = sum(ours[i] == theirs["default"][i] for i in idx)
        rows.append(row)

    header = f"{'family':58} {'n':>3} | " + " | ".join(f"{m:>26}" for m in methods) + " | same as otava"
    print(header)
    print("-" * len(header))
    for row in rows:
        cells = []
        for m in methods:
            r = row[m]
            cells.append(f"{'found ' + str(r['found']) if r['found'] is not None else '':>14}, false {r['false']:>3}")
        print(f"{row['family'][:58]:58} {row['series']:>3} | " + " | ".join(f"{c:>26}" for c in cells)
              + f" | {row['agree']}/{row['series']}")
    print(f"\nharness: {ours_s:.1f} s for {len(series)} series; otava (both methods, incl. start): {otava_s:.1f} s")
    args.out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d"), "otava": OTAVA, "seeds": args.seeds,
                                    "options": {"harness": options.__dict__, "otava_default": {
                                        k: job[k] for k in ("window_len", "max_pvalue", "min_magnitude")},
                                        "otava_orig": {"max_pvalue": job["orig_max_pvalue"]}},
                                    "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
