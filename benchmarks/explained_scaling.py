"""explained_gain's prediction scaled per trial vs cycle by cycle, against known effects: re-analyzes
the profiled traces of a `sensitivity.py` result's runs (A/A: true saving 0; planted: minus the
delay per cycle) and of any `harness run` directories given after it (against their measured saving).

    .venv/bin/python benchmarks/explained_scaling.py benchmarks/sensitivity_restart.json [RUN_DIR...]
"""
import json
import sys
import statistics
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sglang_spec_harness.rundir import RunDir, load_run_dir
from sglang_spec_harness.traces.analysis import analyze_traces
from sglang_spec_harness.verdict import evidence
from sglang_spec_harness.verdict.rules import explained_gain

REGIONS = ["DRAFT_DECODE", "DRAFT_EXTEND"]
REF = "TARGET_VERIFY"
cache = {}
def fresh_files(run, trial):
    key = str(trial.dir)
    if key not in cache:
        paths = sorted((trial.dir / "profile").glob("*.trace.json*"))
        cache[key] = list(analyze_traces(paths).files) if paths else []
    return cache[key]
RunDir.analysis_files = fresh_files

def both(path):
    run = load_run_dir(path)
    b = evidence.region_times_per_cycle(run, "baseline", REGIONS + [REF])
    c = evidence.region_times_per_cycle(run, "candidate", REGIONS + [REF])
    scale = b.per_cycle_us[REF] / c.per_cycle_us[REF]
    trial = sum(b.per_cycle_us[r] - c.per_cycle_us[r] * scale for r in REGIONS)
    norm = explained_gain._per_cycle_normalized(b, c, REGIONS, REF)
    cyc = sum(v[0] - v[1] for v in norm.values())
    return trial, cyc, scale

out = []
sens = json.loads(Path(sys.argv[1]).read_text())
for row in sens["runs"]:
    truth = -(row["delay_us"] or 0)
    t, c, s = both(row["run_dir"])
    out.append({"set": row["condition"], "truth": truth, "per_trial": t, "per_cycle": c, "scale": s})
    print(row["condition"], truth, round(t), round(c), round(s, 3), flush=True)
for d in sys.argv[2:]:
    r = json.loads((Path(d) / "results.json").read_text())
    g = next(x for x in r["rules"] if x["kind"] == "explained_gain")
    meas = g["numbers"]["measured_saving_ms"] * 1000 * g["numbers"]["tokens_per_cycle"]
    t, c, s = both(d)
    out.append({"set": "profile", "truth": meas, "per_trial": t, "per_cycle": c, "scale": s})
    print("profile", round(meas), round(t), round(c), round(s, 3), flush=True)
for name in ("aa", "planted-0.03", "planted-0.05", "planted-0.1", "profile"):
    rows = [o for o in out if o["set"] == name]
    if not rows:
        continue
    for m in ("per_trial", "per_cycle"):
        err = [o[m] - o["truth"] for o in rows]
        print(f"{name:13s} {m:9s} n={len(rows)} mean err {statistics.mean(err):8.0f} us  sd {statistics.stdev(err) if len(err)>1 else 0:7.0f} us  "
              f"median |err| {statistics.median(abs(e) for e in err):6.0f}")
