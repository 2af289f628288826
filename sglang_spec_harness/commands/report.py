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
    parser.add_argument("--pr-comment", metavar="FILE",
                        help="also write the pull request's comment to FILE: a hidden marker line, the verdict, the rule "
                        "table, the TPOT line and the link to the report (a workflow posts it, editing its last one)")
    parser.add_argument("--comment-key", metavar="KEY",
                        help="what the comment's marker names (default: the scenario's name): one comment per KEY")
    parser.add_argument("--report-url", metavar="URL", help="the link to the report in the comment (http or https)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sglang_spec_harness.extras import require_extras

    from sglang_spec_harness.errors import HarnessInputError

    if args.report_url and not args.report_url.startswith(("https://", "http://")):
        raise HarnessInputError(f"--report-url {args.report_url!r}: expected an http(s) URL")
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
    if args.pr_comment:
        from sglang_spec_harness.report.pr_comment import write_pr_comment

        written = write_pr_comment(Path(args.run_dir), Path(args.pr_comment), key=args.comment_key,
                                   report_url=args.report_url)
        print(f"  PR comment: {written}")
    return 0
