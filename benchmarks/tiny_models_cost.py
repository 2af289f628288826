"""What the context models cost: the shipped CPU scenario's wall time with the context models against
the bigram models (the models before 2026-12), side by side, ABBA-interleaved on the same machine in
the same hour, and each run's verdict.

    make sglang-cpu
    .venv/bin/python benchmarks/tiny_models_cost.py --pairs 3 --result benchmarks/tiny_models_cost.json

Issue 39's target: the scenario still passes, and its wall time is within 20% of the bigram models'.
The bigram models are built on first use into .sglang-cpu/models-bigram (as benchmarks/mutations.py
does). The ratio of medians is reported with every run's time, so its spread is in view.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "sglang_cpu_tiny_eagle_topk1.yaml"
MODELS = {"context": ROOT / ".sglang-cpu" / "models", "bigram": ROOT / ".sglang-cpu" / "models-bigram"}


def ensure(design: str, where: Path) -> None:
    manifest = where / "models.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("design", "bigram") == design:
        return
    if design == "context":
        sys.exit(f"{where}: no context models; run `make sglang-cpu` first")
    python = ROOT / ".sglang-cpu" / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "sglang_spec_harness.sglang_cpu.tiny_models", str(where), "--design", design],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def one_run(design: str, out: Path) -> dict:
    models = MODELS[design]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "run", str(SCENARIO), "--out", str(out),
                           "--no-progress", "--set", f"server.model_path={models / 'target'}",
                           "--set", f"server.draft_model_path={models / 'draft'}"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    wall = round(time.monotonic() - started, 1)
    run_dir = max((p for p in out.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.stat().st_mtime)
    results = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").exists() else {}
    rules = {r["name"]: r["verdict"] for r in results.get("rules", [])}
    accept = results.get("variants", {}).get("candidate", {}).get("accept_length") or []
    # where the time went: the launches start together, so the last one ready ends the start-up
    ready = [json.loads(p.read_text()).get("ready_at_s") for p in run_dir.glob("launches/*/launch.json")]
    startup = max((r for r in ready if r is not None), default=None)
    return {"design": design, "exit_code": proc.returncode, "verdict": results.get("verdict"), "rules": rules,
            "wall_s": wall, "startup_s": round(startup, 1) if startup is not None else None,
            "accept_length": round(statistics.fmean(accept), 3) if accept else None,
            "run_dir": os.path.relpath(run_dir, ROOT)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="ABBA: each pair runs both designs, alternating which first")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "tiny-models-cost")
    parser.add_argument("--result", type=Path, help="JSON file for the figures (written after every run; continued when it exists)")
    args = parser.parse_args()
    for design, where in MODELS.items():
        ensure(design, where)
    args.out.mkdir(parents=True, exist_ok=True)
    # a result file that exists is continued: its pairs count, the next pair takes the next order
    record = json.loads(args.result.read_text()) if args.result and args.result.exists() else {
        "scenario": os.path.relpath(SCENARIO, ROOT), "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{os.cpu_count()} CPUs", "runs": []}
    runs: list[dict] = record["runs"]
    done = len(runs) // 2
    for pair in range(done, done + args.pairs):
        order = ["bigram", "context"] if pair % 2 == 0 else ["context", "bigram"]
        for design in order:
            runs.append(one_run(design, args.out / design))
            print(f"{design}: {runs[-1]['verdict']} in {runs[-1]['wall_s']} s, accept {runs[-1]['accept_length']}", flush=True)
            if args.result:
                args.result.write_text(json.dumps(record, indent=1) + "\n")
    walls = {d: [r["wall_s"] for r in runs if r["design"] == d] for d in MODELS}
    record["median_wall_s"] = {d: statistics.median(w) for d, w in walls.items()}
    record["ratio_context_to_bigram"] = round(record["median_wall_s"]["context"] / record["median_wall_s"]["bigram"], 3)
    record["within_20_percent"] = record["ratio_context_to_bigram"] <= 1.2
    # the ratio of each ABBA pair on its own: its spread is the figure's
    record["pair_ratios"] = [round(c["wall_s"] / b["wall_s"], 3) for b, c in
                             (sorted(runs[i:i + 2], key=lambda r: r["design"]) for i in range(0, len(runs) - 1, 2))]
    if args.result:
        args.result.write_text(json.dumps(record, indent=1) + "\n")
    print(f"median wall: {record['median_wall_s']}; context / bigram = {record['ratio_context_to_bigram']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
