"""A sweep over SGLang's real releases on this CPU run whole, and the same sweep spread over 2 shards
and merged (`harness sweep baseline`, `--shard I/N --baseline-from`, `harness sweep merge`): whether
the merged sweep.json says what the whole one says (series, change points and their explanations,
verdicts), and the wall time of each part, in one JSON file.

    flock /work/notes/real-sglang.lock .venv/bin/python benchmarks/sweep_shards.py \
        --releases 0.5.12.post1..0.5.14 --out benchmarks/sweep_shards.json

Needs `make sglang-cpu` and the releases' environments (`make sglang-cpu-releases RELEASES=...`, or a
sweep that built them): cached environments are reused, nothing is built when they are current. The
shards run one after the other here (one machine); on CI each is a runner of its own, so a sharded
sweep's wall time there is the baseline step's plus the longest shard's. Measure with nothing else
running. Everything compared comes from the sweeps' own sweep.json; nothing here knows the answer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from figures import harness, project_relative  # benchmarks/ is sys.path[0]

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "sglang_cpu_release_sweep.yaml"
# What is each run's own (when, where, how long, timings): left out of the comparison.
PER_RUN = {"run_key", "run_keys", "run_key_before", "run_key_after", "started", "path", "path_before", "report",
           "report_before", "time_per_replay_us", "time_us", "sentence", "seconds", "tpot_ms", "harness_commit_before",
           "harness_commit_after", "source_dir", "worktree"}
# sweep.json's fields that say which part of a sweep a folder is, and when and where it ran.
PARTS = {"name", "part", "out_dir", "baseline_run_dir", "wall_s", "baseline", "shards", "history", "points"}


def one_folder(out: Path, suffix: str) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir() and p.name.endswith(suffix)]
    return folder


def comparable(value: Any, names: list[str]) -> Any:
    """`value` without what is each run's own; the sweeps' names written as <sweep>; a timing series
    by where it has values; an explanation's ops (listed by their time) by name."""
    if isinstance(value, dict):
        out = {k: comparable(v, names) for k, v in value.items() if k not in PER_RUN}
        if out.get("kind") == "noisy" and "values" in out:
            out["values"] = [v is None for v in value["values"]]
        if isinstance(out.get("run_dir"), str):
            out["run_dir"] = Path(out["run_dir"]).name
        return out
    if isinstance(value, list):
        items = [comparable(v, names) for v in value]
        if items and all(isinstance(i, dict) and "op" in i for i in items):
            return sorted(items, key=lambda op: op["op"])
        return items
    if isinstance(value, str):
        for name in names:
            value = value.replace(name, "<sweep>")
    return value


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two comparable documents differ (a path and both values), at most 20."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(a.keys() | b.keys()) for d in differences(a.get(k), b.get(k), f"{where}.{k}")][:20]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")][:20]
    return [] if a == b else [f"{where}: {json.dumps(a)[:120]} vs {json.dumps(b)[:120]}"]


def compare(whole: dict[str, Any], merged: dict[str, Any]) -> dict[str, Any]:
    names = [whole["name"], merged["name"]]
    parts = {
        "request_and_outcome": ({k: v for k, v in whole.items() if k not in PARTS},
                                {k: v for k, v in merged.items() if k not in PARTS}),
        "verdicts": ([(p["label"], p["status"], p["verdict"]) for p in whole["points"]],
                     [(p["label"], p["status"], p["verdict"]) for p in merged["points"]]),
        "points": (whole["points"], merged["points"]),
        **{key: ((whole.get("history") or {}).get(key), (merged.get("history") or {}).get(key))
           for key in ("series", "change_points", "explanations")},
    }
    out = {}
    for key, (ours, theirs) in parts.items():
        found = differences(comparable(ours, names), comparable(theirs, names))
        out[key] = {"identical": not found, "differences": found}
    return out


def summary(sweep: dict[str, Any]) -> dict[str, Any]:
    history = sweep.get("history") or {}
    return {"status": sweep["status"], "message": sweep["message"], "exit_code": sweep["exit_code"],
            "wall_s": sweep["wall_s"],
            "points": [{"release": p["label"], "status": p["status"], "verdict": p["verdict"],
                        "tpot_ms": p["numbers"].get("tpot_ms"), "seconds": p["seconds"]} for p in sweep["points"]],
            "change_points": [{"series": c["series"].split(" · sweep ")[0], "before": c["label_before"],
                               "after": c["label_after"], "kind": c["kind"], "values": [c["before"], c["after"]]}
                              for c in history.get("change_points", [])],
            "explanations": [e["sentence"] for e in history.get("explanations", [])]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default="0.5.12.post1..0.5.14", help="the range (default 0.5.12.post1..0.5.14)")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "sweep_shards.json")
    parser.add_argument("--work", type=Path, default=REPO / "reports" / "sweep-shards",
                        help="where the sweeps and their databases go (default: reports/sweep-shards)")
    parser.add_argument("--set", action="append", dest="overrides", metavar="PATH=VALUE",
                        default=["trials.repetitions=1", "workload.output_len=48", "trials.seed=7"],
                        help="--set on the scenario (default: one timed block of 48-token requests per release, one seed)")
    parser.add_argument("--again", action="store_true",
                        help="compare the sweeps stored in --work again (no server): `same` in --out rewritten")
    args = parser.parse_args(argv)
    work = args.work
    if args.again:
        record = json.loads(args.out.read_text())
        whole = json.loads((one_folder(work / "whole", "") / "sweep.json").read_text())
        record["same"] = compare(whole, json.loads((work / "merged" / "sweep.json").read_text()))
        args.out.write_text(project_relative(json.dumps(record, indent=2), (work, "<work>")) + "\n")
        print(json.dumps({k: v["identical"] for k, v in record["same"].items()}))
        return 0
    work.mkdir(parents=True, exist_ok=True)
    sets = [a for o in args.overrides for a in ("--set", o)]
    points = [str(SCENARIO), "--sglang-releases", args.releases, *sets]
    print(f"whole sweep of {args.releases} -> {work / 'whole'}", flush=True)
    code, whole_s = harness("sweep", *points, "--out", str(work / "whole"), "--db", str(work / "whole.sqlite"),
                            log=work / "whole.log")
    print(f"  exit {code} in {whole_s:.0f} s", flush=True)
    timings: dict[str, Any] = {"whole": {"exit_code": code, "wall_s": whole_s}}
    code, timings["baseline_step"] = harness("sweep", "baseline", *points, "--out", str(work / "sharded"),
                                             log=work / "baseline.log")
    print(f"baseline step: exit {code} in {timings['baseline_step']:.0f} s", flush=True)
    baseline = one_folder(work / "sharded", "-baseline")
    shards = []
    for index in range(1, args.shards + 1):
        code, wall = harness("sweep", *points, "--shard", f"{index}/{args.shards}", "--baseline-from", str(baseline),
                             "--out", str(work / "sharded"), log=work / f"shard-{index}.log")
        folder = one_folder(work / "sharded", f"-shard-{index}-of-{args.shards}")
        shard = json.loads((folder / "sweep.json").read_text())
        shards.append({"shard": f"{index}/{args.shards}", "exit_code": code, "wall_s": wall,
                       "releases": [p["label"] for p in shard["points"]], "folder": str(folder)})
        print(f"shard {index}/{args.shards}: exit {code} in {wall:.0f} s", flush=True)
    code, merge_s = harness("sweep", "merge", *(s["folder"] for s in shards), "--out", str(work / "merged"), "--db",
                            str(work / "merged.sqlite"), log=work / "merge.log")
    print(f"merge: exit {code} in {merge_s:.0f} s", flush=True)
    whole = json.loads((one_folder(work / "whole", "") / "sweep.json").read_text())
    merged = json.loads((work / "merged" / "sweep.json").read_text())
    record = {
        "what": "a release sweep on this CPU run whole, and the same sweep in shards merged; produced by "
                "benchmarks/sweep_shards.py",
        "commands": [f"harness sweep {SCENARIO.relative_to(REPO)} --sglang-releases {args.releases} {' '.join(sets)}",
                     "harness sweep baseline ... ; harness sweep ... --shard I/N --baseline-from FOLDER (one after "
                     "the other here); harness sweep merge SHARD_FOLDER..."],
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "load_average_at_end": os.getloadavg()},
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": {"whole": whole_s, "baseline_step": timings["baseline_step"],
                   "shards": [s["wall_s"] for s in shards], "merge": merge_s,
                   "sharded_on_separate_runners": round(timings["baseline_step"] + max(s["wall_s"] for s in shards)
                                                        + merge_s, 1)},
        "shards": shards,
        "whole": summary(whole),
        "merged": {**summary(merged), "missing_shards": merged["missing_shards"]},
        "same": compare(whole, merged),
    }
    args.out.write_text(project_relative(json.dumps(record, indent=2), (work, "<work>")) + "\n")
    print(json.dumps({k: v["identical"] for k, v in record["same"].items()}))
    print(f"wrote {args.out}; the sweeps and databases: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
