"""index.html of a bisection: the outcome, then one row per step linking that step's run report.

Built on the page machinery every report shares (harness/report/page.py), self-contained like them.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness import __version__
from harness.bisect.result import BisectResult
from harness.report.page import document
from harness.report.page import esc as _e
from harness.report.page import pill as _pill
from harness.report.page import table as _table

BANNER = {"found": ("FAIL", "FOUND"), "not narrowed": ("INCONCLUSIVE", "NOT NARROWED"),
          "bad passes": ("INCONCLUSIVE", "BAD PASSES"), "cannot judge": ("INCONCLUSIVE", "NO VERDICT"),
          "interrupted": ("NONE", "INTERRUPTED"), "running": ("NONE", "RUNNING")}


def _link(result: BisectResult, target: Path, text: str) -> str:
    return f'<a href="{_e(os.path.relpath(target, result.out_dir))}">{_e(text)}</a>'


def render_page(result: BisectResult) -> str:
    cls, word = BANNER.get(result.status, ("NONE", result.status.upper()))
    request = result.request
    rows = []
    for step in result.steps:
        reports = " ".join(_link(result, run_dir / "index.html", f"try {i}" if len(step.attempts) > 1 else "report")
                           for i, run_dir in enumerate(step.attempts, start=1))
        first = result.first_bad is not None and step.commit.hash == result.first_bad.hash
        rows.append([str(step.number), f'<code title="{_e(step.commit.hash)}">{_e(step.commit.short)}</code>',
                     _e(step.commit.subject), _e(step.commit.author_date), _e(step.role), _pill(step.verdict),
                     f"<b>{_e(step.mark)}: first bad</b>" if first else _e(step.mark), _e(step.reason), reports])
    steps = _table(["#", "commit", "subject", "author date", "role", "verdict", "mark", "reason", "run"], rows, raw=True)
    found = ""
    if result.first_bad is not None:
        c = result.first_bad
        found = (f"<p>First bad commit: <code>{_e(c.hash)}</code> <b>{_e(c.subject)}</b> ({_e(c.author_date)})</p>")
    elif result.candidates:
        found = "<p>The first bad commit is one of:</p><ul>" + "".join(
            f"<li><code>{_e(c.hash)}</code> {_e(c.subject)}</li>" for c in result.candidates) + "</ul>"
    baseline = (f"<p>Trials that run once (not at every commit), linked into every step: "
                f"{_link(result, result.baseline_run_dir, 'baseline/')}</p>" if result.baseline_run_dir else "")
    mode = ("statistical rules: both arms run at every step, an INCONCLUSIVE step is retried, then skipped"
            if result.plan.statistical else "exact rules: the other arms run once, each step runs the variant only")
    return document(f"bisect {result.scenario}: {word}", [
        f"""<header class="banner {cls}"><div class="inner"><div class="verdict-word" id="verdict">{_e(word)}</div>
<div class="meta"><b>bisect {_e(result.scenario)}</b> · variant {_e(request.variant)} · {_e(request.source)}<br>
good <code>{_e(result.good.short)}</code> · bad <code>{_e(result.bad.short)}</code> · {result.commits_in_range}
commits · {len(result.steps)} step(s) (at most {result.max_steps} without skips)</div></div></header>
<main>
<section><h2>Outcome</h2>{found or f"<p>{_e(result.message or result.status)}</p>"}
<p>Rules: {_e(', '.join(result.rules))} ({_e(mode)}). {_e(result.plan.describe())}.</p>{baseline}</section>
<section id="steps"><h2>Steps</h2>{steps}</section>
<footer>harness {_e(__version__)} · bisect.json holds the same in JSON</footer>
</main>"""])


def write_page(result: BisectResult) -> Path:
    path = result.out_dir / "index.html"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_page(result), encoding="utf-8")
    os.replace(tmp, path)
    return path
