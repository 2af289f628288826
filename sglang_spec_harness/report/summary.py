"""summary.md: the verdict, the rule table and the key numbers, in GitHub-flavoured Markdown
(also what `$GITHUB_STEP_SUMMARY` receives)."""

from __future__ import annotations

import os
from pathlib import Path

from sglang_spec_harness.files import write_text_atomic
from sglang_spec_harness.report.data import ReportData
from sglang_spec_harness.report.key_numbers import accept_line, count_lines, counts_from_rules, tpot_numbers
from sglang_spec_harness.vocabulary import Verdict

VERDICT_ICON: dict[str, str] = {Verdict.PASS: "✅", Verdict.FAIL: "❌", Verdict.INCONCLUSIVE: "⚠️", Verdict.INFO: "ℹ️",
                                Verdict.NOT_RUN: "⏭️"}
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def summary_markdown(data: ReportData) -> str:
    verdict = data.verdict
    head = f"{VERDICT_ICON.get(verdict or '', '❔')} {verdict or 'NO VERDICT'}"
    lines = [f"## {head}: `{data.scenario_name}`", ""]
    status = data.run.get("status") or (data.results or {}).get("run_status") or "unknown"
    ok = sum(t.ok for t in data.trials)
    lines.append(
        f"Run `{data.run_dir.name}`: status **{status}**, {ok} of {len(data.trials)} trials ok"
        + (" (A/A: both arms run the baseline)" if data.run.get("aa") or (data.results or {}).get("aa") else "")
        + "."
    )
    lines.append("")
    judged = [r for r in data.rules if r.get("verdict") != Verdict.INFO]
    info = [r for r in data.rules if r.get("verdict") == Verdict.INFO]
    for title, rules in ((None, judged), ("**Informational** (no bound set: not part of the verdict)", info)):
        if not rules:
            continue
        if title:
            lines += [title, ""]
        lines += ["| rule | kind | verdict | reason |", "|---|---|---|---|"]
        for rule in rules:
            v = str(rule.get("verdict"))
            lines.append(
                f"| `{_cell(rule.get('name'))}` | {_cell(rule.get('kind'))} | {VERDICT_ICON.get(v, '')} {_cell(v)} | {_cell(rule.get('reason') or '')} |"
            )
        lines.append("")
    lines.append("**Key numbers**")
    lines.append("")
    lines.append(f"- {tpot_numbers(data).line()}")
    lines.append(f"- {accept_line(data)}")
    softmax = count_lines(counts_from_rules(data))
    if softmax:
        lines.append("- Softmax count per region: " + "; ".join(softmax))
    else:
        lines.append("- Softmax count per region: no kernel_count observations")
    if data.notes:
        lines += ["", "**Notes**", ""]
        lines += [f"- {note}" for note in data.notes]
    lines += ["", f"Full report: `{data.run_dir / 'index.html'}`", ""]
    return "\n".join(lines)


def write_summary(data: ReportData, path: Path) -> Path:
    write_text_atomic(path, summary_markdown(data))
    return path


def append_step_summary(run_dir: str | Path) -> Path | None:
    """Append the run's summary.md to the file named by $GITHUB_STEP_SUMMARY, when that is set.

    Builds summary.md first if it is not there yet. Returns the file appended to, or None when the
    variable is unset or empty (not running under GitHub Actions).
    """
    target = os.environ.get(STEP_SUMMARY_ENV)
    if not target:
        return None
    summary = Path(run_dir) / "summary.md"
    if not summary.exists():
        from sglang_spec_harness.report.data import load_report_data

        write_summary(load_report_data(Path(run_dir)), summary)
    text = summary.read_text(encoding="utf-8", errors="replace")
    with open(target, "a", encoding="utf-8") as out:
        out.write(text if text.endswith("\n") else text + "\n")
    return Path(target)
