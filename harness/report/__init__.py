"""The report of a run directory: index.html (for people), junit.xml and summary.md (for CI).

`build_report(run_dir)` reads only the run directory (see docs/internals.md) and rewrites the three
files; it works on incomplete runs too, showing what is missing as notes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import encodable
from harness.report.summary import append_step_summary

__all__ = ["ReportPaths", "build_report", "append_step_summary", "update_latest_link"]


@dataclass(frozen=True)
class ReportPaths:
    html: Path
    junit: Path
    summary: Path
    verdict: str | None  # PASS / FAIL / INCONCLUSIVE from results.json, None when there is none


def build_report(run_dir: str | Path) -> ReportPaths:
    """Write index.html, junit.xml and summary.md into `run_dir`. Bad run dir: HarnessInputError."""
    from harness.report.data import load_report_data
    from harness.report.html import render_html
    from harness.report.junit import write_junit
    from harness.report.summary import write_summary

    run_dir = Path(run_dir)
    data = load_report_data(run_dir)
    # The page first: reading the traces may add notes, which the summary and JUnit then carry too.
    html = render_html(data)
    paths = ReportPaths(
        html=run_dir / "index.html", junit=run_dir / "junit.xml", summary=run_dir / "summary.md", verdict=data.verdict
    )
    _write_atomic(paths.html, html)
    write_junit(data, paths.junit)
    write_summary(data, paths.summary)
    update_latest_link(run_dir)
    return paths


def _write_atomic(path: Path, text: str) -> None:
    """Replace the file in one step, so a browser reloading it never sees half a page."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(encodable(text), encoding="utf-8")
    os.replace(tmp, path)


def update_latest_link(run_dir: str | Path) -> Path | None:
    """Point `reports/latest` at the newest run in `reports/runs/` (by name: names start with a
    timestamp). Idempotent; rebuilding an old run's report leaves `latest` on the newest run.
    Only for run directories inside a folder named `runs`; returns the link, or None."""
    run_dir = Path(run_dir).resolve()
    runs = run_dir.parent
    if runs.name != "runs":
        return None
    newest = max((p for p in runs.iterdir() if p.is_dir() and (p / "run.json").exists()), key=lambda p: p.name,
                 default=run_dir)
    link = runs.parent / "latest"
    target = os.path.relpath(newest, link.parent)
    try:
        if link.is_symlink() and os.readlink(link) == target:
            return link
        if link.exists() and not link.is_symlink():
            return None  # a real file or folder named `latest`: not ours to replace
        tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(target)
        os.replace(tmp, link)
    except OSError:
        return None  # a convenience only: never fail a report over it
    return link
