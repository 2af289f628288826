"""SGLang's release history on this CPU: `harness sweep` over a release range, then `harness bisect`
over the same range, and the figures both produce, in one JSON file.

    .venv/bin/python benchmarks/release_sweep.py --releases 0.5.10..0.5.23 \
        --out benchmarks/sglang_release_sweep.json

Needs `make sglang-cpu` (the baseline's environment; the sweep builds each release's own, cached
under .sglang-cpu/releases/). Measure with nothing else running. Writes, per release: whether it ran
or why not, the verdict of the exact rules, the scenario's patterns per replay and the time per
replay in each region, TPOT and accept length, the output hash, and the wall time of each part
(environment, server start, the point's run); the change points with their explanations; the disk
the environments use; the bisection's outcome and steps; and the whole sweep's and bisection's
wall time. Everything comes from the sweep's and the bisection's own JSON: nothing here knows what
the answer should be.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import yaml
from figures import harness, project_relative

from sglang_spec_harness.releases.environments import read_stamp
from sglang_spec_harness.scenario import load_scenario, scenario_to_yaml

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "sglang_cpu_release_sweep.yaml"
PREFIX = REPO / ".sglang-cpu"


def du_bytes(path: Path) -> int:
    """Bytes on disk under `path` (du: hard links counted once)."""
    if not path.exists():
        return 0
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=False).stdout.split()
    return int(out[0]) if out else 0


def builds(prefix: Path) -> dict[str, dict]:
    """Each cached part's build as its stamp recorded it (seconds, bytes, when): a sweep over cached
    environments spends 0 s on them, so the build figures are the stamps' (see docs/history.md)."""
    out = {}
    for folder in sorted((prefix / "releases").glob("*/*/")):
        facts = read_stamp(folder)
        if facts is not None:
            out[f"{folder.parent.name}/{folder.name}"] = {k: facts.get(k) for k in ("seconds", "bytes", "built")}
    return out


def memory_copy_gb_s(megabytes: int = 200, copies: int = 5) -> float:
    """This VM's speed at what the tiny models' steps mostly do (fresh multi-MB buffers): copies of a
    buffer into new memory, page faults included. Two VMs of the same kind measured 8x apart here
    (benchmarks/README.md), so figures from different days are compared through this."""
    buffer = bytearray(megabytes << 20)
    started = time.perf_counter()
    for _ in range(copies):
        bytes(buffer)
    return round(megabytes * copies / 1024 / (time.perf_counter() - started), 2)


def newest(folder: Path) -> Path:
    return max((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default="0.5.10..0.5.23", help="the range (default 0.5.10..0.5.23)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "sglang_release_sweep.json")
    parser.add_argument("--work", type=Path, default=REPO / "reports" / "release-sweep",
                        help="where the sweep, the bisection and their database go (default: reports/release-sweep)")
    parser.add_argument("--no-bisect", action="store_true", help="only the sweep")
    parser.add_argument("--screenshot", type=Path, help="also save a screenshot of the sweep's trend page (Chromium)")
    parser.add_argument("--repetitions", type=int, default=None,
                        help="timed blocks per arm and release instead of the scenario's (recorded in the output)")
    parser.add_argument("--models", type=Path, default=None,
                        help="a folder of tiny models (target/, draft/, models.json) instead of .sglang-cpu/models")
    args = parser.parse_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    scenario = SCENARIO
    if args.repetitions is not None or args.models is not None:
        # the shipped scenario with its paths made absolute, only the timed blocks or the models changed
        data = yaml.safe_load(scenario_to_yaml(load_scenario(SCENARIO)))
        if args.repetitions is not None:
            data["trials"]["repetitions"] = args.repetitions
        if args.models is not None:
            data["server"].update(model_path=str(args.models.resolve() / "target"),
                                  draft_model_path=str(args.models.resolve() / "draft"))
        scenario = work / SCENARIO.name
        scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    db = work / "history.sqlite"
    disk_before = du_bytes(PREFIX / "releases")
    copy_speed = memory_copy_gb_s()
    print(f"sweep {args.releases} -> {work} (log: {work / 'sweep.log'})", flush=True)
    code, sweep_wall = harness("sweep", str(scenario), "--sglang-releases", args.releases, "--db", str(db),
                               "--out", str(work / "sweeps"), log=work / "sweep.log")
    sweep = json.loads((newest(work / "sweeps") / "sweep.json").read_text())
    print(f"sweep exit {code} in {sweep_wall:.0f} s", flush=True)
    record: dict = {
        "what": "harness sweep and harness bisect over SGLang releases on this CPU "
                f"({SCENARIO.relative_to(REPO)}); produced by benchmarks/release_sweep.py",
        "command": f"harness sweep {SCENARIO.relative_to(REPO)} --sglang-releases {args.releases}",
        "repetitions": load_scenario(scenario).trials.repetitions,
        "models": json.loads(((args.models or PREFIX / "models") / "models.json").read_text()),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(),
                    "memory_copy_gb_s": copy_speed},
        "date": time.strftime("%Y-%m-%d"),
        "sweep": {"exit_code": code, "wall_s": sweep_wall, "status": sweep["status"], "message": sweep["message"],
                  "rules": sweep["rules"], "environments": sweep["environments"]},
        "releases": [
            {"release": p["label"], "status": p["status"], "why": p["reason"] if p["status"] != "ran" else None,
             "verdict": p["verdict"], "rule": p["reason"] if p["status"] == "ran" else None,
             "regions": p["numbers"].get("regions"), "tpot_ms": p["numbers"].get("tpot_ms"),
             "accept_length": p["numbers"].get("accept_length"), "output_hash": p["numbers"].get("output_hash"),
             "seconds": p["seconds"], "environment": p["environment"]}
            for p in sweep["points"]
        ],
        "change_points": (sweep.get("history") or {}).get("change_points", []),
        "disk_bytes": {"releases": du_bytes(PREFIX / "releases"), "releases_before_sweep": disk_before,
                       "base_environment": du_bytes(PREFIX / "venv")},
        "builds": builds(PREFIX),
    }
    if not args.no_bisect:
        print(f"bisect {args.releases} (log: {work / 'bisect.log'})", flush=True)
        code, wall = harness("bisect", str(scenario), "--sglang-releases", args.releases, "--out", str(work / "bisect"),
                             log=work / "bisect.log")
        bisect = json.loads((newest(work / "bisect") / "bisect.json").read_text())
        record["bisect"] = {"exit_code": code, "wall_s": wall, "status": bisect["status"], "message": bisect["message"],
                            "found": bisect.get("found"), "first_changed_release": bisect.get("first_changed_release"),
                            "verdicts_at_ends": bisect.get("verdicts_at_ends"), "max_steps": bisect["max_steps"],
                            "steps": [{k: s[k] for k in ("number", "release", "role", "verdict", "reason")}
                                      for s in bisect["steps"]]}
        print(f"bisect exit {code} in {wall:.0f} s: {bisect['message']}", flush=True)
    args.out.write_text(project_relative(json.dumps(record, indent=2)) + "\n")
    if args.screenshot:
        from history_demo import screenshot  # this folder's trend-page screenshot (benchmarks/ is sys.path[0])

        screenshot(newest(work / "sweeps") / "index.html", args.screenshot)
    print(f"wrote {args.out}; the runs, pages and database: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
