"""The pull-request comment of a run (`harness report RUN_DIR --pr-comment FILE`): the verdict, the
rule table, the TPOT line and the link to the report, in GitHub-flavoured Markdown.

Its first line is a hidden marker naming the comment (`<!-- sglang-spec-harness:KEY -->`, KEY by
default the scenario's name): a workflow finds the comment it posted before by that line and edits
it, so a pull request carries one comment per scenario and runner, updated at each push, not one
more per run. Text from the run (reasons, kernel names) is made inert: one line per cell, no HTML,
no marker of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from sglang_spec_harness.files import write_text_atomic
from sglang_spec_harness.report.data import ReportData
from sglang_spec_harness.report.key_numbers import tpot_numbers
from sglang_spec_harness.report.summary import VERDICT_ICON
from sglang_spec_harness.vocabulary import NOT_RUN, RuleKind

MARKER_PREFIX = "<!-- sglang-spec-harness:"
# GitHub refuses a comment over 65536 characters; reasons are cut well before that.
MAX_REASON = 300
MAX_RULES = 60


def marker(key: str) -> str:
    """The hidden first line that names the comment: KEY with anything but [A-Za-z0-9_.:/@ +-] as '-'."""
    safe = re.sub(r"[^A-Za-z0-9_.:/@ +-]", "-", key).strip() or "run"
    return f"{MARKER_PREFIX}{safe[:200]} -->"


def _inert(text: object, limit: int = MAX_REASON) -> str:
    """One line of table text that GitHub renders as plain text: no pipes, tags, comments or mentions."""
    line = " ".join(str(text).split())
    line = line.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    line = line.replace("@", "@\u200b").replace("`", "'")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tpot_line(data: ReportData) -> str:
    rules = data.rules_of_kind(RuleKind.TPOT_GAIN)
    if rules and rules[0].get("verdict") == NOT_RUN:
        return "TPOT: not measured: an exact-only run (--only exact); the nightly runs the whole design"
    if not rules:
        return "TPOT: the scenario has no tpot_gain rule"
    return tpot_numbers(data).line()


def pr_comment_markdown(data: ReportData, *, key: str | None = None, report_url: str | None = None) -> str:
    verdict = data.verdict
    head = f"{VERDICT_ICON.get(verdict or '', '❔')} {verdict or 'NO VERDICT'}"
    lines = [marker(key or data.scenario_name), f"### {head}: `{_inert(data.scenario_name, 100)}`", ""]
    rules = [r for r in data.rules if isinstance(r, dict)]
    if rules:
        lines += ["| rule | kind | verdict | reason |", "|---|---|---|---|"]
        for rule in rules[:MAX_RULES]:
            v = _inert(rule.get("verdict"), 20)
            lines.append(f"| `{_inert(rule.get('name'), 100)}` | {_inert(rule.get('kind'), 40)} | "
                         f"{VERDICT_ICON.get(v, '')} {v} | {_inert(rule.get('reason') or '')} |")
        if len(rules) > MAX_RULES:
            lines.append(f"| … | | | {len(rules) - MAX_RULES} more rules in the report |")
    else:
        lines.append("No rule was evaluated: results.json is missing or holds no rules.")
    lines += ["", f"**{_inert(tpot_line(data), 600)}**", ""]
    where = f"[the report]({report_url})" if report_url else f"`{_inert(data.run_dir / 'index.html', 300)}`"
    name = data.run_dir.resolve().name  # `latest` is a link
    lines.append(f"Run `{_inert(name, 200)}`: {where} (index.html in the run-directory artifact).")
    return "\n".join(lines) + "\n"


def write_pr_comment(run_dir: Path, path: Path, *, key: str | None = None, report_url: str | None = None) -> Path:
    from sglang_spec_harness.report.data import load_report_data

    write_text_atomic(path, pr_comment_markdown(load_report_data(run_dir), key=key, report_url=report_url))
    return path
