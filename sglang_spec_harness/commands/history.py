"""`harness history ingest|report|explain|ack|export`: the results database across runs, change points, the trend page.

`ingest RUN_DIR_OR_ROOT...` loads run directories (or folders of them) into the database; `report`
finds the change points of every series and writes the trend page (or prints the facts with --json),
exiting 1 when the newest change point of a series is a regression beyond --max-regression, 3 when
it is a timing regression that no side-by-side run confirmed or the database holds no complete run
(history/gate.py); `explain SWEEP_DIR` explains a stored sweep's change points again (down to the
source that ran and changed) and writes them as JSON; `ack SERIES --at POINT --reason TEXT` marks a
change point intended (the gate compares against the level after it); `export` writes the database
as one tidy table (CSV or Parquet) for dashboards.
"""

from __future__ import annotations

import argparse

DB_HELP = ("a SQLite file or a database URL (postgresql://user@host/db); default $HARNESS_HISTORY_DB, "
           "else reports/history.sqlite")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="history_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    ingest = sub.add_parser("ingest", help="load run directories into the results database",
                            description="Load run directories (or folders of them, e.g. reports/runs) into the "
                                        "results database. Re-ingesting changes nothing; a damaged or incomplete run "
                                        "is recorded with its reason.")
    ingest.add_argument("paths", nargs="+", metavar="RUN_DIR_OR_ROOT")
    ingest.add_argument("--db", metavar="PATH_OR_URL", help=DB_HELP)
    ingest.add_argument("--quiet", action="store_true", help="print only the totals")

    report = sub.add_parser("report", help="change points of every series; the trend page",
                            description="Find the change points of every series (scenario x variant x metric x "
                                        "hardware) and write the trend page. Exit 1 when a series' newest change point "
                                        "is a regression beyond --max-regression, 3 when there is no complete run.")
    report.add_argument("--db", metavar="PATH_OR_URL", help=DB_HELP)
    report.add_argument("--out", metavar="DIR", default="reports/history",
                        help="where index.html and history.json go (default reports/history)")
    report.add_argument("--json", action="store_true", help="print the facts as JSON instead of a summary")
    report.add_argument("--max-regression", type=_fraction, default=0.05, metavar="FRACTION",
                        help="gate: a newest change point worse by at least this much fails (default 0.05)")
    report.add_argument("--max-pvalue", type=_fraction, default=0.01, metavar="P",
                        help="significance of a split in the permutation test (default 0.01)")
    report.add_argument("--min-magnitude", type=_fraction, default=0.05, metavar="FRACTION",
                        help="ignore shifts smaller than this relative size (default 0.05)")
    report.add_argument("--permutations", type=_positive, default=999, help="permutations per test (default 999)")
    report.add_argument("--min-size", type=_positive, default=3, metavar="RUNS",
                        help="runs on each side of a change point (default 3)")
    report.add_argument("--seed", type=int, default=0, help="seed of the permutations (default 0)")
    report.add_argument("--scenario", action="append", metavar="NAME", dest="scenarios",
                        help="only this scenario's runs (repeatable; default every scenario)")

    explain = sub.add_parser("explain", help="a stored sweep's change points explained again, down to the source",
                             description="Explain a sweep folder's change points again, after the fact: its runs "
                                         "(analysed again where they profiled with stacks but stored no functions per "
                                         "region) into a database, then each change point with the functions that ran "
                                         "there and whose source changed, and their hunks (the release folders or the "
                                         "repository its runs record must be here). Starts no server.")
    explain.add_argument("sweep", metavar="SWEEP_DIR", help="a folder that harness sweep wrote (sweep.json, its runs)")
    explain.add_argument("--db", metavar="PATH_OR_URL",
                         help="the database to ingest into (default: a fresh SQLite file, removed at the end)")
    explain.add_argument("--out", metavar="FILE", help="where the explanations go as JSON (default SWEEP_DIR/explanations.json)")
    explain.add_argument("--page", metavar="DIR", help="also write the sweep's trend page there")
    explain.add_argument("--no-reanalyze", action="store_true",
                         help="never analyse a run again (runs without stored functions then explain without source)")

    ack = sub.add_parser("ack", help="mark a change point intended: the gate compares against the level after it",
                         description="Mark the change point of SERIES at POINT as intended (who and when are "
                                     "recorded): the gate then compares that series against the level after it, and "
                                     "the trend page shows the mark and the reason. SERIES is a series id as "
                                     "`harness history report` prints it; POINT the first run after the change (its "
                                     "name, run key, or sweep label).")
    ack.add_argument("series", metavar="SERIES")
    ack.add_argument("--at", required=True, metavar="POINT", help="the first run after the change point")
    ack.add_argument("--reason", required=True, metavar="TEXT", help="why the change is intended")
    ack.add_argument("--by", metavar="WHO", help="who acknowledges it (default: USER@HOST)")
    ack.add_argument("--db", metavar="PATH_OR_URL", help=DB_HELP)

    export = sub.add_parser("export", help="the database as one tidy table (CSV or Parquet) for dashboards",
                            description="Write one row per run, per run x variant x metric (the samples' count, "
                                        "median, mean, min, max) and per run x rule (verdict, reason, ratio and "
                                        "interval), each with its run's columns; docs/history.md lists them.")
    export.add_argument("--db", metavar="PATH_OR_URL", help=DB_HELP)
    export.add_argument("--format", choices=("csv", "parquet"), default="csv",
                        help="csv (default) or parquet (needs the [parquet] extra)")
    export.add_argument("--out", metavar="FILE", help="where to write it (default: CSV to stdout; Parquet needs a FILE)")


def run(args: argparse.Namespace) -> int:
    from sglang_spec_harness.extras import require_extras

    if args.history_command == "ingest":
        require_extras("history")
        return _ingest(args)
    if args.history_command == "export":
        require_extras("history", *(("parquet",) if args.format == "parquet" else ()))
        return _export(args)
    if args.history_command == "ack":
        require_extras("history")
        return _ack(args)
    require_extras("history", "report")  # the trend page
    if args.history_command == "explain":
        return _explain(args)
    return _report(args)


def _explain(args: argparse.Namespace) -> int:
    import json
    import tempfile
    from pathlib import Path

    from sglang_spec_harness.errors import one_line
    from sglang_spec_harness.files import write_text_atomic
    from sglang_spec_harness.history.db import open_database
    from sglang_spec_harness.history.page import write_trend_page
    from sglang_spec_harness.history.sweep_explanations import sweep_explanations

    folder = Path(args.sweep)
    with tempfile.TemporaryDirectory(prefix="harness-explain-") as scratch:
        engine = open_database(args.db or str(Path(scratch) / "history.sqlite"))
        try:
            found = sweep_explanations(engine, folder, reanalyze=not args.no_reanalyze,
                                       progress=lambda line: print(line, flush=True))
        finally:
            engine.dispose()
    out = Path(args.out) if args.out else folder / "explanations.json"
    write_text_atomic(out, json.dumps(found.document, indent=2, ensure_ascii=False) + "\n")
    for e in found.document["explanations"]:
        print(f"  {one_line(e['before']['label'])} -> {one_line(e['after']['label'])}: {one_line(e['sentence'])}")
    page = write_trend_page(found.facts, args.page) if args.page else None
    print(f"{len(found.document['change_points'])} change points, {len(found.document['explanations'])} explanations: "
          f"{out}" + (f"; page: {page}" if page else ""))
    return 0


def _ingest(args: argparse.Namespace) -> int:
    from sglang_spec_harness.history.db import display_url, open_database, row_counts
    from sglang_spec_harness.history.ingest import find_run_dirs, ingest

    run_dirs = find_run_dirs(args.paths)
    if not run_dirs:
        from sglang_spec_harness.errors import HarnessInputError

        raise HarnessInputError(f"{' '.join(args.paths)}: no run directory found (expected folders with run.json)")
    engine = open_database(args.db)

    def show(outcome) -> None:
        r = outcome.record
        if not args.quiet:
            extra = f": {r.reason}" if r.reason else ""
            print(f"{outcome.action:9} {r.status:10} {r.name}{extra}", flush=True)

    outcomes = ingest(engine, run_dirs, on_run=show)
    actions = {a: sum(o.action == a for o in outcomes) for a in ("added", "updated", "unchanged")}
    statuses = {s: sum(o.record.status == s for o in outcomes) for s in ("complete", "incomplete", "damaged")}
    counts = row_counts(engine)
    print(f"{len(outcomes)} runs: {actions['added']} added, {actions['updated']} updated, {actions['unchanged']} "
          f"unchanged; {statuses['complete']} complete, {statuses['incomplete']} incomplete, {statuses['damaged']} "
          f"damaged. Database {display_url(str(engine.url))}: {counts['runs']} runs, {counts['samples']} samples.")
    return 0


def _export(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from sglang_spec_harness.errors import HarnessInputError
    from sglang_spec_harness.history.export import existing_database, export_table, write_table

    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():
        raise HarnessInputError(f"--out {args.out}: no such directory {out.parent}")
    table = export_table(existing_database(args.db))
    write_table(table, args.format, out)
    if out is not None:  # stdout holds the CSV otherwise
        runs = int((table["record"] == "run").sum())
        print(f"{len(table)} rows ({runs} runs) written to {out}", file=sys.stderr)
    return 0


def _ack(args: argparse.Namespace) -> int:
    from sglang_spec_harness.errors import one_line
    from sglang_spec_harness.history.acks import acknowledge
    from sglang_spec_harness.history.export import existing_database
    from sglang_spec_harness.history.marks import who

    ack = acknowledge(existing_database(args.db), args.series, args.at, args.reason, args.by or who())
    print(f"acknowledged {one_line(ack['series'])} at {one_line(ack['label'] or ack['run'])}: {one_line(ack['reason'])} "
          f"(by {one_line(ack['by'])}, {ack['at']}); the gate compares against the level from there on")
    return 0


WORDS = {"regression": "REGRESSION   ", "improvement": "improvement  ", "change": "change       ",
         "not confirmed": "not confirmed"}


def _report(args: argparse.Namespace) -> int:
    import json

    from sglang_spec_harness.errors import one_line
    from sglang_spec_harness.history.analyze import history_facts
    from sglang_spec_harness.history.changepoints import Options
    from sglang_spec_harness.history.db import display_url, open_database
    from sglang_spec_harness.history.page import write_trend_page
    from sglang_spec_harness.pages.numbers import fmt, p_value, pct, signed_pct

    engine = open_database(args.db)
    options = Options(max_pvalue=args.max_pvalue, permutations=args.permutations, min_size=args.min_size,
                      min_magnitude=args.min_magnitude, seed=args.seed)
    facts = history_facts(engine, options, max_regression=args.max_regression,
                          database=display_url(engine.url.render_as_string(hide_password=False)),
                          scenarios=args.scenarios)
    page = write_trend_page(facts, args.out)
    if args.json:
        print(json.dumps(facts, indent=2, ensure_ascii=False))
        return facts["exit_code"]
    runs = facts["runs"]
    print(f"{runs['complete']} complete runs ({runs['incomplete']} incomplete, {runs['damaged']} damaged), "
          f"{len(facts['series'])} series, {len(facts['change_points'])} change points")
    explanations = {e["id"]: e for e in facts["explanations"]}
    for i, c in enumerate(facts["change_points"]):
        size = signed_pct(c["magnitude"]) if c["magnitude"] is not None else "from zero"
        p = "exact" if c["kind"] == "exact" else "zero rule" if c["p_value"] is None else f"p={p_value(c['p_value'])}"
        where = f"at {c['label_after']}" if c["label_after"] is not None else f"from run {c['run']}"
        print(f"  {WORDS[c['reading']]} {one_line(c['series'])}: {fmt(c['before'], 4)} -> {fmt(c['after'], 4)} "
              f"({size}, {p}) {one_line(where)}{_marks(c)}")
        following = facts["change_points"][i + 1] if i + 1 < len(facts["change_points"]) else None
        if c["explanation"] and (following is None or following["explanation"] != c["explanation"]):
            print(f"    why: {one_line(explanations[c['explanation']]['sentence'])}")
    for d in facts["damaged"]:
        print(f"  {d['status']}: {one_line(d['run'])}: {one_line(d['reason'] or '')}")
    gate = facts["gate"]
    for c in gate["not_confirmed"]:
        print(f"  gate: {one_line(c['series'])} {signed_pct(c['magnitude'])} {c['way']}: {one_line(c['gate_reason'])}")
    print(f"gate: {gate['verdict']} (max regression {pct(args.max_regression)}); page: {page}")
    return facts["exit_code"]


def _marks(change: dict) -> str:
    """A change point's confirmation and ack, as the printout's tail."""
    from sglang_spec_harness.errors import one_line
    from sglang_spec_harness.history.analyze import confirmation_text

    out = ""
    confirmation = change.get("confirmation")
    if confirmation is not None and change["way"] != "neither":
        out += f" [{one_line(confirmation_text(confirmation))}]"
    if change.get("acknowledged"):
        out += f" [acknowledged: {one_line(change['acknowledged']['reason'])}]"
    return out
