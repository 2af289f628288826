"""`harness bisect SCENARIO --source REPO --good REV --bad REV`: which commit broke the rules?
`harness bisect SCENARIO --sglang-releases A..B`: at which release did the rules' verdict change?

Exit codes: 0 the first bad commit (or the first changed release) was found; 3 the range could not
be narrowed to one point (skipped ones), the bad revision passes, both ends of a release range
agree, or nothing could be judged; 2 bad input; 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sglang_spec_harness.commands.progress import RunsProgressLines


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="the scenario file")
    parser.add_argument("--source", metavar="REPO",
                        help="the git repository to bisect (e.g. /src/sglang); the variant's pythonpath must lie inside it")
    parser.add_argument("--good", metavar="REV", help="a revision where the rules pass")
    parser.add_argument("--bad", metavar="REV", help="a later revision where they fail")
    parser.add_argument("--sglang-releases", metavar="A..B", dest="releases",
                        help="bisect over SGLang's releases from A to B (final and .postN, from the registry) instead "
                        "of a repository: the first release whose verdict is B's")
    parser.add_argument("--environments", default="auto", choices=("auto", "sglang-cpu", "target"),
                        help="with --sglang-releases: where each release runs (auto: this CPU's environments for a "
                        "scenario with the CPU shims, else the release installed beside the variant's interpreter)")
    parser.add_argument("--variant", default="candidate", help="the variant that runs each commit (default: candidate)")
    parser.add_argument("--rule", action="append", default=[], metavar="NAME", dest="rules",
                        help="a scenario rule to judge each commit by (repeatable; default: every kernel_count and "
                        "output_identity rule that judges the variant)")
    parser.add_argument("--retries", type=_non_negative_int, default=2, metavar="N",
                        help="statistical rules: rerun an INCONCLUSIVE step up to N times before skipping it (default 2)")
    parser.add_argument("--reuse", action="append", default=[], metavar="SWEEP_FOLDER",
                        help="judge a point from a sweep's stored run of it instead of running it again, when that "
                        "run measured the same scenario (only the rules and the seed may differ; repeatable)")
    parser.add_argument("--out", metavar="DIR", default="reports/bisect", help="where bisections go (default: reports/bisect)")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON (progress goes to stderr)")
    from sglang_spec_harness.commands.run import add_set_argument

    add_set_argument(parser)


class BisectLines(RunsProgressLines):
    """A bisection's progress as lines on `stream` (a `BisectProgress`): each step when it starts and
    ends, and, indented under it, its run's servers and trials."""

    def started(self, result: Any) -> None:
        if result.request.axis == "releases":
            what = (f"at SGLang's releases {result.good.short}..{result.bad.short}: "
                    f"{result.commits_in_range} releases")
        else:
            what = (f"at each commit of {result.request.source}, good {result.good.short}, bad {result.bad.short}: "
                    f"{result.commits_in_range} commits")
        self.say(f"bisect {result.scenario}: variant {result.request.variant} {what}, at most "
                 f"{result.max_steps} steps without skips; rules: {', '.join(result.rules)}")
        self.say(f"  {result.plan.describe()}; output: {result.out_dir}")
        for note in result.notes:
            self.say(f"  note: {note}")

    def baseline_started(self, run_dir: Path) -> None:
        self.say(f"  trials that run once: {run_dir}")

    def note(self, text: str) -> None:
        self.say(f"    {text}")

    def step_started(self, number: int, commit: Any, role: str, left: int | None, attempt: int) -> None:
        if left is not None:
            what = f"{left} commit(s) left" if role == "bisection" and not hasattr(commit, "version") else f"{left} untried between"
        else:
            what = "the bad revision" if role == "bad revision" else f"the {role} end of the range"
        again = f", attempt {attempt}" if attempt > 1 else ""
        self.say(f"  step {number}: {commit.short} {commit.subject} ({what}{again})")

    def step_finished(self, step: Any) -> None:
        self.say(f"  step {step.number}: {step.commit.short} {step.verdict} -> {step.mark}: {step.reason}")


def run(args: argparse.Namespace) -> int:
    import json

    from sglang_spec_harness.extras import require_extras

    require_extras("report")  # each step's report and the bisection page: before anything imports them
    from sglang_spec_harness.bisect import BisectRequest, run_bisection

    from sglang_spec_harness.errors import HarnessInputError

    if args.releases and (args.source or args.good or args.bad):
        raise HarnessInputError("--sglang-releases bisects releases: give it without --source, --good and --bad")
    if not args.releases and not (args.source and args.good and args.bad):
        raise HarnessInputError("give --source REPO --good REV --bad REV (commits), or --sglang-releases A..B (releases)")
    request = BisectRequest(scenario_path=Path(args.scenario), source=Path(args.source) if args.source else None,
                            good=args.good, bad=args.bad, variant=args.variant, rules=tuple(args.rules),
                            retries=args.retries, out_root=Path(args.out), releases=args.releases,
                            environments=args.environments, reuse=tuple(Path(p) for p in args.reuse),
                            overrides=tuple(args.overrides))
    result = run_bisection(request, BisectLines(sys.stderr if args.json else sys.stdout))
    if args.json:
        print(json.dumps(result.to_json_dict(), indent=2))
    else:
        print_result(result)
    if result.interrupted_by is not None:
        print(f"harness bisect: {result.message}; steps so far: {result.out_dir}", file=sys.stderr)
    return result.exit_code


def print_result(result: Any) -> None:
    for step in result.steps:
        print(f"{step.number:>3}  {step.commit.short}  {step.verdict:<12} {step.mark:<5} {step.run_dir or '(not run)'}")
    if result.first_bad is not None:
        c = result.first_bad
        if result.request.axis == "releases":
            print(f"{result.found_word}: {c.short} ({result.message.split('(', 1)[-1].rstrip(')')})")
        else:
            print(f"first bad commit: {c.hash} {c.subject} ({c.author_date})")
    elif result.candidates:
        unit = "release" if result.request.axis == "releases" else "commit"
        print(f"not narrowed to one {unit}; the {result.found_word} is one of:")
        for c in result.candidates:
            print(f"  {c.hash} {c.subject}" + (f" ({c.author_date})" if c.author_date else ""))
    else:
        print(f"no first bad commit: {result.message}")
    print(f"{len(result.steps)} step(s); report: {result.out_dir / 'index.html'}")
