"""The pull request's comment (`harness report RUN_DIR --pr-comment FILE`): a hidden marker a workflow
finds it by, the verdict, the rule table, the TPOT line and the link to the report; text from the
run made inert. On the hand-built run directory of the report tests (tests/support/report_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.report.data import load_report_data
from sglang_spec_harness.report.pr_comment import MARKER_PREFIX, marker, pr_comment_markdown
from support.report_run import make_run_dir


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    return make_run_dir(tmp_path)


def test_the_comment_has_the_marker_the_rules_the_tpot_line_and_the_link(run_dir, tmp_path, capsys):
    out = tmp_path / "comment.md"
    assert main(["report", str(run_dir), "--pr-comment", str(out), "--comment-key", "tiny 1-gpu-h100",
                 "--report-url", "https://github.com/o/r/actions/runs/7/artifacts/9"]) == 0
    assert f"PR comment: {out}" in capsys.readouterr().out
    lines = out.read_text().splitlines()
    assert lines[0] == "<!-- sglang-spec-harness:tiny 1-gpu-h100 -->"
    assert lines[1] == "### ✅ PASS: `tiny`"
    results = json.loads((run_dir / "results.json").read_text())
    rows = [line for line in lines if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [rule["name"] for rule in results["rules"]]
    assert any(line.startswith("**TPOT candidate/baseline = 0.") for line in lines)
    assert lines[-1] == ("Run `20261129-150000-tiny`: [the report](https://github.com/o/r/actions/runs/7/artifacts/9) "
                         "(index.html in the run-directory artifact).")


def test_the_comment_of_an_exact_only_run_says_tpot_was_not_measured(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    for rule in results["rules"]:
        if rule["kind"] == "tpot_gain":
            rule["verdict"], rule["reason"] = "NOT_RUN", "not run: exact-only"
    (run_dir / "results.json").write_text(json.dumps(results))
    text = pr_comment_markdown(load_report_data(run_dir))
    assert "| tpot_gain | ⏭️ NOT_RUN | not run: exact-only |" in text
    assert "**TPOT: not measured: an exact-only run (--only exact); the nightly runs the whole design**" in text
    assert text.splitlines()[0] == "<!-- sglang-spec-harness:tiny -->"


def test_text_from_the_run_cannot_break_out_of_its_cell_or_the_marker(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    results["rules"][0]["reason"] = "a | b <!-- sglang-spec-harness:other --> <script>x</script> @maintainers\nnext `x`"
    (run_dir / "results.json").write_text(json.dumps(results))
    text = pr_comment_markdown(load_report_data(run_dir), key="k --> <b>")
    assert text.count(MARKER_PREFIX) == 1 and text.splitlines()[0] == marker("k --> <b>") == "<!-- sglang-spec-harness:k --- -b- -->"
    row = next(line for line in text.splitlines() if line.startswith(f"| `{results['rules'][0]['name']}`"))
    assert row.endswith("a \\| b &lt;!-- sglang-spec-harness:other --&gt; &lt;script&gt;x&lt;/script&gt; "
                        "@\u200bmaintainers next 'x' |")


def test_a_report_url_must_be_http(run_dir, tmp_path, capsys):
    assert main(["report", str(run_dir), "--pr-comment", str(tmp_path / "c.md"), "--report-url", "javascript:alert(1)"]) == 2
    assert "--report-url 'javascript:alert(1)': expected an http(s) URL" in capsys.readouterr().err
    assert not (tmp_path / "c.md").exists()
