"""The report of a run directory: index.html (for people), junit.xml and summary.md (for CI).

`build_report(run_dir)` reads only the run directory (see docs/internals.md) and rewrites the three
files; it works on incomplete runs too, showing what is missing as notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglang_spec_harness import files
from sglang_spec_harness.report.summary import append_step_summary

__all__ = ["ReportPaths", "append_step_summary", "build_report"]


@dataclass(frozen=True)
class ReportPaths:
    html: Path
    junit: Path
    summary: Path
    verdict: str | None  # PASS / FAIL / INCONCLUSIVE from results.json, None when there is none


def build_report(run_dir: str | Path) -> ReportPaths:
    """Write index.html, junit.xml and summary.md into `run_dir`. Bad run dir: HarnessInputError."""
    from sglang_spec_harness.report.data import load_report_data
    from sglang_spec_harness.report.html import render_html
    from sglang_spec_harness.report.junit import write_junit
    from sglang_spec_harness.report.summary import write_summary

    run_dir = Path(run_dir)
    data = load_report_data(run_dir)
    # The page first: reading the traces may add notes, which the summary and JUnit then carry too.
    html = render_html(data)
    paths = ReportPaths(
        html=run_dir / "index.html", junit=run_dir / "junit.xml", summary=run_dir / "summary.md", verdict=data.verdict
    )
    files.write_text_atomic(paths.html, html)
    write_junit(data, paths.junit)
    write_summary(data, paths.summary)
    files.point_latest_at_newest_run(run_dir)
    return paths

