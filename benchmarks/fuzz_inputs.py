"""Hostile and broken inputs, many of them, through the real `harness` command line: a table of
inputs tried per class, tracebacks (must be 0), exit codes, and the most time and memory one
input cost.

    .venv/bin/python benchmarks/fuzz_inputs.py [--examples 300] [--classes scenario,kineto,nsys,rundir]
                                               [--seed 0] [--timeout 120] [--json out.json]

The inputs are tests/support/hostile.py's Hypothesis strategies (the same as tests/test_hostile_inputs.py,
which runs a few per class in `make test`). Each command runs in a forked child of this process
(the harness already imported, nothing shared back), so that a crash, a hang (killed after
--timeout s) or a memory blow-up is one input's, and its wall time and peak RSS (ru_maxrss of the
child: it includes the ~150-250 MB of pages shared with this process, so it is an upper bound)
are measured. Trace-size limits are the defaults (see sglang_spec_harness/traces/readers.py).

Exit status: 0 when no input produced a traceback, a hang, or an answer outside its allowed exit
codes (see tests/support/hostile.py); 1 otherwise, after printing the first problems.
A script, not a test: counts are the point; the times depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import hostile  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


class Tally:
    def __init__(self) -> None:
        self.inputs = 0
        self.commands = 0
        self.tracebacks = 0
        self.hangs = 0
        self.problems: list[str] = []
        self.codes: Counter[str] = Counter()  # "command exit"
        self.labels: Counter[str] = Counter()
        self.max_s = 0.0
        self.max_rss_mb = 0.0
        self.worst: str = ""


def run_class(kind: str, examples: int, seed_value: int, timeout_s: float, bases: list[Path], tally: Tally,
              progress: bool) -> None:
    strategies = {
        "scenario": lambda root: hostile.scenario_case(root),
        "kineto": lambda root: hostile.kineto_case(root, bomb_bytes=(32 << 20, 640 << 20)),
        "nsys": lambda root: hostile.nsys_case(root, real=True),
        "rundir": lambda root: hostile.rundir_case(root, bases),
    }

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one(data):
        with tempfile.TemporaryDirectory(prefix=f"fuzz-{kind}-") as tmp:
            case = data.draw(strategies[kind](Path(tmp)))
            tally.inputs += 1
            tally.labels[case.label.split(":")[0].split("+")[-1]] += 1
            rnd = random.Random(tally.inputs)
            for step, outcome, found in hostile.run_case(case, lambda argv: hostile.run_forked(argv, timeout_s), rnd):
                tally.commands += 1
                tally.codes[f"{step.argv[0]} {outcome.code if not outcome.timed_out else 'killed'}"] += 1
                if outcome.seconds > tally.max_s:
                    tally.max_s, tally.worst = outcome.seconds, f"{case.label} ({step.argv[0]})"
                tally.max_rss_mb = max(tally.max_rss_mb, outcome.max_rss_mb or 0.0)
                tally.tracebacks += "traceback" in " ".join(found)
                tally.hangs += outcome.timed_out
                if found:
                    tally.problems.append(f"{kind} {case.label}: harness {' '.join(step.argv)}: {found}")
            if progress and tally.inputs % 25 == 0:
                print(f"  {kind}: {tally.inputs} inputs, {len(tally.problems)} problems", file=sys.stderr, flush=True)

    one()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="inputs per class (default 300)")
    parser.add_argument("--classes", default=",".join(hostile.CLASSES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before one command counts as a hang")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    classes = [c for c in args.classes.split(",") if c]
    unknown = set(classes) - set(hostile.CLASSES)
    if unknown:
        parser.error(f"unknown classes {sorted(unknown)}; known: {', '.join(hostile.CLASSES)}")

    import sglang_spec_harness.commands.cli  # imported once here, shared by every forked child
    import sglang_spec_harness.report.html
    import sglang_spec_harness.traces.analysis
    import sglang_spec_harness.verdict.judge  # noqa: F401

    started = time.perf_counter()
    tallies: dict[str, Tally] = defaultdict(Tally)
    with tempfile.TemporaryDirectory(prefix="fuzz-bases-") as bases_dir:
        bases = hostile.build_base_runs(Path(bases_dir)) if "rundir" in classes else []
        for kind in classes:
            run_class(kind, args.examples, args.seed, args.timeout, bases, tallies[kind], not args.quiet)
    elapsed = time.perf_counter() - started

    print(f"\nfuzz_inputs: {args.examples} examples per class, seed {args.seed}, {elapsed:.0f} s, "
          f"{platform.machine()} {platform.python_version()}")
    header = ("class", "inputs", "commands", "tracebacks", "hangs", "other problems", "exit codes", "max s", "max RSS MB")
    rows = []
    for kind in classes:
        t = tallies[kind]
        other = len(t.problems) - t.tracebacks - t.hangs
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(t.codes.items()))
        rows.append((kind, t.inputs, t.commands, t.tracebacks, t.hangs, other, codes, f"{t.max_s:.1f}", f"{t.max_rss_mb:.0f}"))
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    for kind in classes:
        t = tallies[kind]
        print(f"{kind}: mutations {dict(sorted(t.labels.items()))}; slowest: {t.worst}")
    failures = [p for kind in classes for p in tallies[kind].problems]
    for problem in failures[:20]:
        print("PROBLEM", problem[:2000])
    if args.json:
        Path(args.json).write_text(json.dumps({
            "examples": args.examples, "seed": args.seed, "seconds": elapsed,
            "classes": {kind: {"inputs": t.inputs, "commands": t.commands, "tracebacks": t.tracebacks, "hangs": t.hangs,
                               "problems": t.problems, "exit_codes": dict(t.codes), "mutations": dict(t.labels),
                               "max_s": t.max_s, "max_rss_mb": t.max_rss_mb}
                        for kind, t in tallies.items()},
        }, indent=2) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
