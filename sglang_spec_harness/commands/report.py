"""`harness report RUN_DIR`: rebuild index.html, junit.xml and summary.md from a run directory."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `harness run` (e.g. reports/latest)")
    parser.add_argument(
        "--step-summary",
        action="store_true",
        help="also append summary.md to the file named by $GITHUB_STEP_SUMMARY (when set)",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sglang_spec_harness.extras import require_extras

    require_extras("report")  # before anything imports the report's modules
    from sglang_spec_harness.report import append_step_summary, build_report

    paths = build_report(Path(args.run_dir))
    print(f"{paths.verdict or 'NO VERDICT'}: {paths.html}")
    print(f"  JUnit:   {paths.junit}")
    print(f"  summary: {paths.summary}")
    if args.step_summary:
        target = append_step_summary(Path(args.run_dir))
        if target is not None:
            print(f"  appended to {target}")
    return 0
