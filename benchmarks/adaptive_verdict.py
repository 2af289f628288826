"""The adaptive design (trials.budget) against the fixed one, on resampled real block data.

Source data: long real A/A runs of the default scenario (the micro engine on this CPU), each with 4
launches per arm and 64 rounds (`--collect N` makes them; nothing else should run meanwhile). Every
launch holds 16 real blocks; launch-to-launch differences and block noise are the machine's own.

A simulated run picks one real A/A run, deals its 8 launches to two arms at random, and replays a
design on them: each round takes, for each arm, the next unused real block of the launch the Latin
rotation names (with replacement once a launch's 16 are used). A planted effect multiplies the
candidate's blocks by (1 + effect). The adaptive design is sglang_spec_harness.run.adaptive's: the same nested
mixed-model decision (sglang_spec_harness.verdict.stats) at each look's nominal level (look_levels: Lan-DeMets
spending), the same rule for adding a launch (launch_noise_dominates), the same minutes budget with
the measured seconds per round and per launch bring-up. The fixed design: 2 launches per arm, 16
rounds, one look at alpha 0.05. What resampling loses: a round's two blocks ran back to back on the
real machine; here they come from different times (pairs are looser than real ones).

    .venv/bin/python benchmarks/adaptive_verdict.py --collect 3 --out /tmp/aapool   # ~6 min
    .venv/bin/python benchmarks/adaptive_verdict.py --runs /tmp/aapool --sims 400 --effects 0,0.03,0.05 -o a.json
    .venv/bin/python benchmarks/adaptive_verdict.py --runs /tmp/aapool --sims 400 --effects 0.10,-0.20 -o b.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_spec_harness.run.adaptive import launch_noise_dominates  # noqa: E402
from sglang_spec_harness.run.plan import rotation  # noqa: E402
from sglang_spec_harness.scenario import TpotGainRule  # noqa: E402
from sglang_spec_harness.verdict import stats  # noqa: E402
from sglang_spec_harness.verdict.rules.tpot_gain import look_levels  # noqa: E402
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS  # noqa: E402


@dataclass(frozen=True)
class Design:
    name: str
    first_rounds: int
    launches: int
    max_rounds: int
    max_launches: int
    stage_rounds: int
    max_minutes: float | None
    spending: str = "pocock"
    adaptive: bool = True


FIXED = Design("fixed: 2 launches x 16 rounds", 16, 2, 16, 2, 0, None, adaptive=False)
ADAPTIVE = Design("adaptive: 6 rounds, +2 per look, <= 48 rounds, <= 4 launches, <= 3 min", 6, 2, 48, 4, 2, 3.0)


@dataclass
class RealRun:
    blocks: dict[str, list[float]]  # launch dir -> block TPOTs (ms), in time order
    per_round_s: float  # both arms' blocks
    launch_s: float  # bring-up + warm-up of one launch (all started together)


def collect(count: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        print(f"A/A run {i + 1} of {count} (4 launches per arm, 64 rounds)", flush=True)
        subprocess.run([str(REPO / ".venv/bin/harness"), "run", str(REPO / "scenarios/micro_topk1.yaml"), "--aa",
                        "--set", "trials.launches=4", "--set", "trials.repetitions=64", "--set", "trials.profiled=0",
                        "--no-progress", "--out", str(out)], check=False)


def load(root: Path) -> list[RealRun]:
    runs = []
    for run_json in sorted(root.glob("*/run.json")):
        run_dir = run_json.parent
        if run_dir.is_symlink():  # `latest`: a second name of a run already counted
            continue
        blocks: dict[str, list[float]] = {}
        durations = []
        for trial_json in sorted((run_dir / "trials").glob("*/trial.json")):
            trial = json.loads(trial_json.read_text())
            summary = trial.get("summary") or {}
            if trial.get("kind") != "timed" or summary.get("median_tpot_ms") is None:
                continue
            blocks.setdefault(trial["launch"], []).append(summary["median_tpot_ms"])
            durations.append(summary.get("duration_s") or 0.0)
        if len(blocks) < 8:
            continue
        ups = [json.loads(p.read_text()) for p in (run_dir / "launches").glob("*/launch.json")]
        launch_s = max(u.get("ready_at_s", 0) + u.get("warmup_s", 0) for u in ups)
        runs.append(RealRun(blocks, 2 * statistics.median(durations), launch_s))
    return runs


def simulate(run: RealRun, design: Design, effect: float, rng: np.random.Generator, rule: TpotGainRule) -> dict:
    launches = list(run.blocks)
    rng.shuffle(launches)
    pools = {"baseline": launches[0::2], "candidate": launches[1::2]}
    used = {name: 0 for name in launches}
    tpot: list[float] = []
    is_cand: list[bool] = []
    labels: list[str] = []
    rounds_of: list[int] = []
    fractions: list[float] = []
    rounds, per_arm, stage = 0, design.launches, design.first_rounds
    seconds = run.launch_s
    while True:
        for r in range(rounds, min(rounds + stage, design.max_rounds)):
            for position, arm in enumerate(("baseline", "candidate")):
                launch = pools[arm][rotation(position, r, per_arm)]
                series = run.blocks[launch]
                k = used[launch]
                value = series[k] if k < len(series) else series[int(rng.integers(len(series)))]
                used[launch] = k + 1
                tpot.append(value * (1 + effect) if arm == "candidate" else value)
                is_cand.append(arm == "candidate")
                labels.append(launch)
                rounds_of.append(r)
        seconds += run.per_round_s * (min(rounds + stage, design.max_rounds) - rounds)
        rounds = min(rounds + stage, design.max_rounds)
        if design.adaptive:
            fractions.append(rounds / design.max_rounds)
            alpha = look_levels(rule, fractions, design.spending)[-1][0]
        else:
            alpha = rule.alpha
        decision, fit = stats.nested_tpot_gain_decision(tpot, is_cand, labels, rounds_of, min_gain=rule.min_gain,
                                                        alpha=alpha, confidence=1 - alpha)
        verdict = decision.verdict
        done = verdict in (PASS, FAIL) or not design.adaptive or rounds >= design.max_rounds
        grow = (not done) and per_arm < design.max_launches and launch_noise_dominates(fit.to_dict(), rounds, per_arm)
        cost = design.stage_rounds * run.per_round_s + (run.launch_s if grow else 0.0)
        if not done and design.max_minutes is not None and seconds + cost > design.max_minutes * 60:
            done = True
        if done:
            return {"verdict": str(verdict), "fail_kind": decision.fail_kind, "rounds": rounds, "launches": per_arm,
                    "seconds": seconds, "looks": len(fractions) or 1}
        if grow:
            per_arm += 1
            seconds += run.launch_s
        stage = design.stage_rounds


def summarize(results: list[dict], effect: float) -> dict:
    n = len(results)
    verdicts = [r["verdict"] for r in results]
    slower = sum(1 for r in results if r["verdict"] == FAIL and r["fail_kind"] == "slower")
    passes = verdicts.count(PASS)
    out = {"runs": n, "pass": passes, "fail_slower": slower, "fail_below_min_gain": verdicts.count(FAIL) - slower,
           "inconclusive": verdicts.count(INCONCLUSIVE),
           "seconds_median": round(statistics.median(r["seconds"] for r in results), 1),
           "seconds_max": round(max(r["seconds"] for r in results), 1),
           "rounds_median": statistics.median(r["rounds"] for r in results),
           "launches_added_runs": sum(1 for r in results if r["launches"] > 2)}
    if effect == 0:
        out["false_verdict_rate"] = (passes + slower) / n
    elif effect > 0:
        # a slowdown caught: FAIL (slower, or not the required gain: both say "do not merge")
        out["caught_rate"] = verdicts.count(FAIL) / n
    else:
        out["pass_rate"] = passes / n
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collect", type=int, default=0, help="first make this many long A/A runs under --out")
    parser.add_argument("--out", type=Path, default=Path("/tmp/aapool"))
    parser.add_argument("--runs", type=Path, help="a folder of A/A run directories (default: --out)")
    parser.add_argument("--sims", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--effects", default="0,0.03,0.05,0.10,-0.20",
                        help="planted effects: candidate blocks x (1 + effect); + slower, - faster")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    if args.collect:
        collect(args.collect, args.out)
    runs = load(args.runs or args.out)
    if not runs:
        print("no A/A runs with 8 launches found", file=sys.stderr)
        return 2
    rule = TpotGainRule(name="tpot_improved", kind="tpot_gain", min_gain=0.01)
    rng = np.random.default_rng(args.seed)
    table = {}
    for effect in (float(e) for e in args.effects.split(",")):
        for design in (FIXED, ADAPTIVE):
            results = [simulate(runs[int(rng.integers(len(runs)))], design, effect, rng, rule) for _ in range(args.sims)]
            row = summarize(results, effect)
            table[f"{effect:+.2f} {design.name}"] = row
            print(f"effect {effect:+.0%}  {design.name}: {row}", flush=True)
    document = {"source_runs": [len(r.blocks) for r in runs], "per_round_s": [round(r.per_round_s, 3) for r in runs],
                "launch_s": [round(r.launch_s, 2) for r in runs], "sims": args.sims, "results": table}
    if args.output:
        args.output.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
