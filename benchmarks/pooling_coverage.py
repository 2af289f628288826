"""How the launch term's pooling rule changes the TPOT interval, on the blocks of real runs.

Re-fits the mixed model (`sglang_spec_harness.verdict.stats.nested`) to the stored blocks of every run of a
`sensitivity.py` result, under several pooling levels (`fit_nested(pool_p=...)`: pool the launch term when the F test
of launch effects gives p >= this; 0.25 is the rule's; 1.01 never pools, 0 always does), and reports
per condition how often the 95% interval contains 1 (A/A: it should, 95% of the time), how often it
lies above 1 (planted: found), and the intervals' half-widths. Nothing is timed: it reads the run
directories that the result names (they must still exist).

    .venv/bin/python benchmarks/pooling_coverage.py benchmarks/sensitivity_host_d.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_spec_harness.verdict.stats import nested  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from power_simulation import bad_input  # noqa: E402
from sensitivity import wilson  # noqa: E402

LEVELS = (0.0, 0.25, 0.5, 1.01)


def blocks_of(run_dir: Path) -> list[dict] | None:
    results = json.loads((run_dir / "results.json").read_text())
    for rule in results["rules"]:
        blocks = (rule.get("numbers") or {}).get("blocks")
        if rule["kind"] in ("tpot_gain", "aa_noise") and blocks:
            return blocks
    return None


def interval(blocks: list[dict], pool_p: float) -> tuple[float, float, float]:
    """(ratio, low, high) with the launch term pooled at `pool_p`."""
    fit = nested.fit_nested([b["tpot_ms"] for b in blocks], [b["variant"] == "candidate" for b in blocks],
                            [b["launch"] for b in blocks], [b["round"] for b in blocks], pool_p=pool_p)
    est = nested.nested_ratio_ci(fit)
    return est.ratio, est.ci_low, est.ci_high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="sensitivity.py result files")
    args = parser.parse_args()
    runs = []
    for path in args.results:
        try:
            runs += json.loads(path.read_text())["runs"]
        except (OSError, ValueError, KeyError) as exc:
            raise bad_input(f"{path}: not a sensitivity.py result ({exc})") from None
    loaded = []
    for run in runs:
        run_dir = Path(run["run_dir"])
        if not (run_dir / "results.json").exists():
            raise bad_input(f"{run_dir}: missing (the run directories of {args.results[0]} are gone)")
        blocks = blocks_of(run_dir)
        if blocks:
            loaded.append((run["condition"], blocks))
    if not loaded:
        raise bad_input(f"{args.results[0]}: no run with blocks (only the warm modes have them)")
    conditions = sorted({c for c, _ in loaded}, key=lambda c: (c != "aa", c))
    print("| condition | runs | pooling (POOL_P) | interval contains 1 | above 1 | below 1 | half-width median (range) |")
    print("|---|---:|---|---|---:|---:|---|")
    for condition in conditions:
        rows = [b for c, b in loaded if c == condition]
        for level in LEVELS:
            fits = [interval(b, level) for b in rows]
            inside = sum(lo <= 1.0 <= hi for _, lo, hi in fits)
            above = sum(lo > 1.0 for _, lo, _ in fits)
            below = sum(hi < 1.0 for _, _, hi in fits)
            widths = [100 * (hi - lo) / 2 / r for r, lo, hi in fits]
            lo_ci, hi_ci = wilson(inside, len(fits))
            name = {0.0: "always", 1.01: "never"}.get(level, f"p >= {level:g}")
            print(f"| {condition} | {len(fits)} | {name} | {inside} ({inside / len(fits):.0%} [{lo_ci:.0%}, {hi_ci:.0%}]) "
                  f"| {above} | {below} | {statistics.median(widths):.2f}% ({min(widths):.2f}-{max(widths):.2f}) |")


if __name__ == "__main__":
    main()
