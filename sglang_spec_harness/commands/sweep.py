"""`harness sweep SCENARIO --sglang-releases A..B`: the candidate at each SGLang release of the range
(or `--source REPO --revisions REV...`: at each revision of a checkout), a run directory and a
history point per release, and the change points with the kernel diff that explains each.

Spread over runners: `harness sweep baseline SCENARIO ...` (the baseline's trials, once), then on each
runner `harness sweep SCENARIO ... --shard I/N --baseline-from FOLDER`, then `harness sweep merge
SHARD_FOLDER...` (one sweep folder, the history, the change points). `harness sweep SCENARIO` is
`harness sweep run SCENARIO`.

Exit codes: 0 when at least two points ran (the series and their change points are in sweep.json and
the history; a shard: one of its own; the baseline step: its run completed); 3 when fewer did; 2 bad
input; 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sglang_spec_harness.commands.progress import RunsProgressLines
from sglang_spec_harness.pages.numbers import MISSING, count_range, fixed, fmt, ms, seconds

DB_HELP = ("the history database the points go into: a SQLite file or a database URL; default $HARNESS_HISTORY_DB, "
           "else reports/history.sqlite")


ACTIONS = ("run", "baseline", "merge")
DEFAULT_ACTION = "run"  # `harness sweep SCENARIO ...` (cli.py)


def _add_sweep_arguments(parser: argparse.ArgumentParser, *, baseline_step: bool) -> None:
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="the scenario file")
    parser.add_argument("--sglang-releases", metavar="A..B", dest="releases",
                        help="SGLang's releases from A to B inclusive (final and .postN, from the registry, in version order)")
    parser.add_argument("--source", metavar="REPO", help="or: a git checkout of SGLang (the variant's pythonpath lies inside it)")
    parser.add_argument("--revisions", nargs="+", default=[], metavar="REV",
                        help="with --source: the revisions to run, in the order to sweep (tags, commits, branches)")
    parser.add_argument("--variant", default="candidate", help="the variant that runs each point (default: candidate)")
    parser.add_argument("--rule", action="append", default=[], metavar="NAME", dest="rules",
                        help="an exact rule to judge each point by (repeatable; default: every kernel_count and "
                        "output_identity rule that judges the variant)")
    parser.add_argument("--environments", default="auto", choices=("auto", "sglang-cpu", "target"),
                        help="where each release runs: sglang-cpu (this CPU's environments, sglang_spec_harness.sglang_cpu), target "
                        "(the release installed beside the variant's interpreter: a GPU runner), auto (sglang-cpu for a "
                        "scenario with the CPU shims)")
    if not baseline_step:
        parser.add_argument("--db", metavar="PATH_OR_URL", help=DB_HELP)
        parser.add_argument("--no-history", action="store_true", help="do not ingest the points into the history database")
        parser.add_argument("--shard", metavar="I/N",
                            help="run shard I of N only: the points at positions I-1, I-1+N, ... (needs --baseline-from; "
                            "no history: the merge ingests)")
        parser.add_argument("--baseline-from", metavar="FOLDER",
                            help="with --shard: the folder `harness sweep baseline` wrote (its baseline run is adopted)")
        parser.add_argument("--confirm", action="store_true",
                            help="run the two points of each timing change point again side by side (interleaved, one "
                            "session, the TPOT rule's statistics) and keep whether it is confirmed, with its interval; in "
                            "a sweep too short for the change-point test, every step of the timing series (not with --shard)")
    parser.add_argument("--out", metavar="DIR", default="reports/sweeps", help="where sweeps go (default: reports/sweeps)")
    parser.add_argument("--json", action="store_true", help="print sweep.json at the end (progress goes to stderr)")
    from sglang_spec_harness.commands.run import add_set_argument

    add_set_argument(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sweep_action", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    run_help = "the candidate at each point (the default action: harness sweep SCENARIO ...)"
    _add_sweep_arguments(sub.add_parser("run", help=run_help, description=run_help), baseline_step=False)
    baseline_help = ("a sharded sweep's first step: the baseline's trials, run once; names the sweep, and every "
                     "shard adopts them (--shard I/N --baseline-from FOLDER)")
    _add_sweep_arguments(sub.add_parser("baseline", help=baseline_help, description=baseline_help), baseline_step=True)
    merge_help = ("join the shards' folders into one sweep folder: sweep.json, the run directories, the history "
                  "database, the change points and the trend page")
    merge = sub.add_parser("merge", help=merge_help, description=merge_help)
    merge.add_argument("shards", nargs="+", metavar="SHARD_FOLDER", help="each shard's folder (harness sweep --shard I/N)")
    merge.add_argument("--out", metavar="DIR", help="the merged sweep's folder (default: reports/sweeps/<the sweep's name>)")
    merge.add_argument("--db", metavar="PATH_OR_URL", help=DB_HELP)
    merge.add_argument("--no-history", action="store_true", help="do not ingest the points (no change points, no page)")
    merge.add_argument("--partial", action="store_true",
                       help="merge the shards given even if some are missing (their points: could not run)")
    merge.add_argument("--json", action="store_true", help="print the merged sweep.json")


class SweepLines(RunsProgressLines):
    """A sweep's progress as lines on `stream` (a `SweepProgress`): each point when it starts and
    ends, and, indented under it, its run's servers and trials."""

    def started(self, result: Any) -> None:
        labels = [p.label for p in result.points]
        of = f" of {len(result.sweep_points)}" if result.sweep_points else ""
        what = f"variant {result.request.variant} at {len(labels)}{of} point(s) ({labels[0]} .. {labels[-1]})"
        if result.part == "baseline":
            what = f"the baseline's trials, once, for the shards of a sweep of {what}"
        elif result.request.shard is not None:
            what = f"{result.request.shard.describe()}: {what}"
        self.say(f"sweep {result.scenario}: {what}, environments: {result.environments}; rules: {', '.join(result.rules)}")
        self.say(f"  output: {result.out_dir}" + (f" (sweep {result.name})" if result.name != result.out_dir.name else ""))
        for note in result.notes:
            self.say(f"  note: {note}")

    def baseline_started(self, run_dir: Path) -> None:
        self.say(f"  trials that run once: {run_dir}")

    def point_started(self, point: Any, total: int) -> None:
        self.say(f"  [{point.position + 1}/{total}] {point.label}")

    def note(self, text: str) -> None:
        self.say(f"    {text}")

    def point_finished(self, point: Any, total: int) -> None:
        self.say(f"  [{point.position + 1}/{total}] {point_line(point)}")


def _per_replay(value: Any) -> str:
    return count_range(*value) if isinstance(value, list) and len(value) == 2 else count_range(value, value)


def point_line(point: Any) -> str:
    """One line per point: what it measured, or why it could not run."""
    if point.status != "ran":
        return f"{point.label}: {point.status}: {point.reason}"
    numbers = point.numbers
    regions = []
    for region, entry in sorted(numbers.get("regions", {}).items()):
        if region.startswith("("):  # work outside every region: not what the rules count
            continue
        counts = " ".join(f"{pattern} {_per_replay(v)}" for pattern, v in sorted(entry.get("per_replay", {}).items()))
        if counts:
            regions.append(f"{region}: {counts}")
    tpot = f"TPOT {ms(numbers.get('tpot_ms'))}"
    accept = f"accept {fixed(numbers.get('accept_length'), 2)}"
    outputs = f"outputs {numbers['output_hash'][:10] if numbers.get('output_hash') else MISSING}"
    took = ", ".join(f"{k.replace('_', ' ')} {seconds(v)}" for k, v in point.seconds.items() if isinstance(v, (int, float)))
    return (f"{point.label}: {point.verdict}; per replay {'; '.join(regions) or 'no regions'}; {tpot}; {accept}; "
            f"{outputs} ({took})")


def run(args: argparse.Namespace) -> int:
    from sglang_spec_harness.extras import require_extras

    if args.sweep_action == "merge":
        return _merge(args)
    baseline_step = args.sweep_action == "baseline"
    require_extras("report", *([] if baseline_step or args.no_history or args.shard else ["history"]))
    from sglang_spec_harness.sweep.result import SweepRequest
    from sglang_spec_harness.sweep.run import run_sweep
    from sglang_spec_harness.sweep.shards import Shard

    shard = getattr(args, "shard", None)
    baseline_from = getattr(args, "baseline_from", None)
    request = SweepRequest(scenario_path=Path(args.scenario), releases=args.releases,
                           source=Path(args.source) if args.source else None, revisions=tuple(args.revisions),
                           variant=args.variant, rules=tuple(args.rules), environments=args.environments,
                           out_root=Path(args.out), db=getattr(args, "db", None),
                           ingest=not (baseline_step or args.no_history), overrides=tuple(args.overrides),
                           baseline_only=baseline_step, shard=Shard.parse(shard) if shard is not None else None,
                           baseline_from=Path(baseline_from) if baseline_from else None,
                           confirm=getattr(args, "confirm", False))
    result = run_sweep(request, SweepLines(sys.stderr if args.json else sys.stdout))
    if args.json:
        print(json.dumps(result.to_json_dict(), indent=2))
    else:
        print_result(result)
    if result.interrupted_by is not None:
        print(f"harness sweep: {result.message}; points so far: {result.out_dir}", file=sys.stderr)
    return result.exit_code


def _merge(args: argparse.Namespace) -> int:
    from sglang_spec_harness.extras import require_extras

    require_extras("report", *([] if args.no_history else ["history"]))
    from sglang_spec_harness.sweep.merge import MergeRequest, merge_shards

    request = MergeRequest(shards=tuple(Path(f) for f in args.shards), out_dir=Path(args.out) if args.out else None,
                           db=args.db, ingest=not args.no_history, partial=args.partial)
    stream = sys.stderr if args.json else sys.stdout
    result = merge_shards(request, lambda text: print(text, file=stream, flush=True))
    if args.json:
        print(json.dumps(result.to_json_dict(), indent=2))
    else:
        print_result(result)
    return result.exit_code


def print_result(result: Any) -> None:
    print(f"{result.message or result.status}")
    if result.part != "baseline":
        for point in result.points:
            print("  " + point_line(point))
    if result.part == "shard":
        print("change points: the merge's (harness sweep merge), over every shard's points")
    elif result.part != "baseline":
        print_changes(result.history or {})
    page = result.out_dir / "index.html"
    print(f"sweep.json: {result.out_dir / 'sweep.json'}" + (f"; page: {page}" if page.exists() else "")
          + f" ({seconds(result.wall_s or 0)})")


def print_changes(history: dict[str, Any]) -> None:
    changes = history.get("change_points", [])
    print(f"{len(changes)} change point(s)" + (":" if changes else ""))
    for change in changes:
        values = "" if change.get("kind") == "exact" and str(change.get("metric", "")).startswith("ops:") else (
            f": {fmt(change.get('before'), 4)} -> {fmt(change.get('after'), 4)}" if isinstance(change.get("before"), (int, float))
            and isinstance(change.get("after"), (int, float)) else "")
        print(f"  {change.get('label_before')} -> {change.get('label_after')}  {change['variant']} "
              f"{change['metric']}{values} ({change.get('kind')}; why: {change.get('explanation') or MISSING})")
    for explanation in history.get("explanations") or []:
        print(f"why {explanation.get('id')}: {explanation.get('sentence')}")
