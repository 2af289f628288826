"""Verdict power of a warm interleaved design, predicted: the TPOT rule's real statistics on simulated
blocks, before spending hours of real runs on a design.

Each simulated run has the plan's shape (rounds x one block per arm, launches rotated between rounds
by the plan's own Latin rotation) and log block TPOT = round drift + launch effect + block noise
(+ log(1 + effect) on the candidate), with the block-to-block and launch-to-launch sd a real run
reported (`tpot_improved`'s "block-to-block sd", "launch-to-launch sd"). Each goes through the
rule's own `nested_tpot_gain_decision` (the mixed model with its sometimes-pool launch test), and
the script counts the verdicts as benchmarks/sensitivity.py does: with an effect, detected = FAIL
"slower"; without one, false = PASS or FAIL "slower". No servers, no timing: the figures do not
depend on the machine, only on the sds given.

    .venv/bin/python benchmarks/power_simulation.py --designs 4x64,8x96 --effects 0,0.05 --block-sd 0.10
    .venv/bin/python benchmarks/power_simulation.py --designs 8x96 --effects 0 --launch-sd 0,0.01,0.02,0.03
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_spec_harness.run.plan import rotation  # noqa: E402
from sglang_spec_harness.vocabulary import FAIL, PASS  # noqa: E402
from sglang_spec_harness.verdict.stats.nested import nested_tpot_gain_decision  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from sensitivity import wilson  # noqa: E402  (the real campaigns' intervals, the same formula)


def simulate_run(launches: int, rounds: int, effect: float, block_sd: float, launch_sd: float,
                 min_gain: float, rng: np.random.Generator) -> tuple[str, str | None, bool]:
    """(verdict, fail_kind, pooled) of one simulated interleaved run."""
    levels = {arm: rng.normal(0.0, launch_sd, launches) for arm in (0, 1)}
    values, candidate, launch, round_of = [], [], [], []
    for r in range(rounds):
        drift = rng.normal(0.0, 0.1)  # a round's shared level: absorbed by the round's fixed effect
        for arm in (0, 1):
            k = rotation(arm, r, launches)
            log_y = drift + levels[arm][k] + (math.log1p(effect) if arm else 0.0) + rng.normal(0.0, block_sd)
            values.append(math.exp(log_y))
            candidate.append(bool(arm))
            launch.append(f"{arm}-{k}")
            round_of.append(r)
    decision, fit = nested_tpot_gain_decision(values, candidate, launch, round_of, min_gain=min_gain)
    return decision.verdict, decision.fail_kind, fit.pooled


def bad_input(message: str) -> SystemExit:
    """One line on stderr and exit code 2, as the harness's own commands do."""
    print(message, file=sys.stderr)
    return SystemExit(2)


def parse_designs(text: str) -> list[tuple[int, int]]:
    designs = []
    for item in text.split(","):
        try:
            launches, rounds = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise bad_input(f"--designs: {item!r} is not LAUNCHESxROUNDS (e.g. 4x64)") from None
        if launches < 2 or rounds < launches:
            raise bad_input(f"--designs: {item!r}: need >= 2 launches per arm and >= as many rounds")
        designs.append((launches, rounds))
    return designs


def floats(name: str, text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise bad_input(f"{name}: {text!r} is not a comma-separated list of numbers") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--designs", default="4x64,8x96", help="LAUNCHESxROUNDS per arm, comma-separated")
    ap.add_argument("--effects", default="0,0.05", help="candidate slowdowns as fractions of TPOT (0: A/A)")
    ap.add_argument("--block-sd", default="0.10", help="block-to-block sd (log scale), comma-separated")
    ap.add_argument("--launch-sd", default="0", help="launch-to-launch sd (log scale), comma-separated")
    ap.add_argument("--min-gain", type=float, default=0.01, help="the TPOT rule's min_gain")
    ap.add_argument("--runs", type=int, default=400, help="simulated runs per cell")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    designs = parse_designs(args.designs)
    effects = floats("--effects", args.effects)
    block_sds = floats("--block-sd", args.block_sd)
    launch_sds = floats("--launch-sd", args.launch_sd)
    rng = np.random.default_rng(args.seed)
    print("| launches x rounds | block sd | launch sd | effect | runs | rate [95% CI] | launch term kept |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for launches, rounds in designs:
        for block_sd in block_sds:
            for launch_sd in launch_sds:
                for effect in effects:
                    start = time.monotonic()
                    hits = kept = 0
                    for _ in range(args.runs):
                        verdict, kind, pooled = simulate_run(launches, rounds, effect, block_sd, launch_sd,
                                                             args.min_gain, rng)
                        slower = verdict == FAIL and kind == "slower"
                        hits += slower if effect else (slower or verdict == PASS)
                        kept += not pooled
                    lo, hi = wilson(hits, args.runs)
                    what = "found" if effect else "false"
                    print(f"| {launches} x {rounds} | {block_sd:.1%} | {launch_sd:.1%} | {effect:.1%} | {args.runs} "
                          f"| {what} {hits / args.runs:.0%} [{lo:.0%}, {hi:.0%}] | {kept / args.runs:.0%} |", flush=True)
                    print(f"  ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
