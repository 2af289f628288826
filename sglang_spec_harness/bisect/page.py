"""index.html of a bisection: the outcome, then one row per step linking that step's run report.

Built on the page machinery every report shares (sglang_spec_harness/pages/), self-contained like them:
this module gathers the values, `sglang_spec_harness/pages/templates/bisect.html` lays them out.
"""

from __future__ import annotations

from pathlib import Path

from sglang_spec_harness.bisect.result import BisectResult
from sglang_spec_harness.files import write_text_atomic
from sglang_spec_harness.pages.render import relative_link, render

BANNER = {"found": ("FAIL", "FOUND"), "not narrowed": ("INCONCLUSIVE", "NOT NARROWED"),
          "bad passes": ("INCONCLUSIVE", "BAD PASSES"), "no change": ("INCONCLUSIVE", "NO CHANGE"),
          "cannot judge": ("INCONCLUSIVE", "NO VERDICT"),
          "interrupted": ("NONE", "INTERRUPTED"), "running": ("NONE", "RUNNING")}


def render_page(result: BisectResult) -> str:
    cls, word = BANNER.get(result.status, ("NONE", result.status.upper()))
    steps = []
    for step in result.steps:
        steps.append({
            "step": step, "first_bad": result.first_bad is not None and step.commit.hash == result.first_bad.hash,
            "reports": [(relative_link(run_dir / "index.html", result.out_dir),
                         f"try {i}" if len(step.attempts) > 1 else "report")
                        for i, run_dir in enumerate(step.attempts, start=1)],
        })
    return render(
        "bisect.html", title=f"bisect {result.scenario}: {word}", banner_class=cls, banner_word=word,
        result=result, steps=steps, releases=result.request.axis == "releases",
        mode=("statistical rules: both arms run at every step, an INCONCLUSIVE step is retried, then skipped"
              if result.plan.statistical else "exact rules: the other arms run once, each step runs the variant only"),
        baseline=relative_link(result.baseline_run_dir, result.out_dir) if result.baseline_run_dir else None,
    )


def write_page(result: BisectResult) -> Path:
    path = result.out_dir / "index.html"
    write_text_atomic(path, render_page(result))
    return path
