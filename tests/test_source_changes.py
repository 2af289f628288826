"""The source side of a change point's explanation, on real files and real git trees: a function found
in each version of its file by name and line, its diff with both files' line numbers, a file that moved,
a function removed or added, a file gone, the harness's own code apart, hostile source (too large, not
UTF-8, not parsing) as a one-line note, and the ranking when no region's ops changed (an output change).
The whole path through `harness sweep` is tests/test_source_explanation.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sglang_spec_harness.history.changed_functions import Ran, SourceCache, regions_concerned, source_changes
from sglang_spec_harness.history.source import (
    MAX_SOURCE_BYTES,
    FolderTree,
    GitTree,
    function_diff,
    is_harness_file,
    parse_source,
)

BEFORE = '''import os


def keep(x):
    return x


def grow(x):
    y = x + 1
    return y


class Worker:
    @staticmethod
    def step(x):
        return x * 2

    def gone(self):
        return 0
'''
AFTER = '''import os


def keep(x):
    # a comment, and spaces: no change to the code
    return  x


def grow(x):
    y = x + 1
    y = y * 3
    return y


class Worker:
    @staticmethod
    def step(x):
        return x * 2

    def fresh(self):
        return 1
'''


def tree(root: Path, files: dict[str, str | bytes], label: str) -> FolderTree:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
    return FolderTree(root, ("pkg",), label)


def ran(region: str, file: str, function: str, line: int, calls: int = 1, time_us: float = 10.0) -> Ran:
    return Ran(region, file, function, line, calls, time_us, True)


def changed_region(name: str) -> dict:
    return {"region": name, "appeared": [{"op": "aten::argmax"}], "disappeared": [], "changed": []}


def quiet_region(name: str) -> dict:
    return {"region": name, "appeared": [], "disappeared": [], "changed": []}


def explain(tmp_path, before_files, after_files, ran_before, ran_after, regions):
    trees = {"before": tree(tmp_path / "a", before_files, "A"), "after": tree(tmp_path / "b", after_files, "B")}
    return source_changes({"before": ran_before, "after": ran_after}, trees, regions, SourceCache(),
                          {"before": "A", "after": "B"})


def test_a_function_is_found_by_name_and_line_and_diffed_with_both_files_line_numbers(tmp_path):
    functions = [ran("DRAFT_DECODE", "pkg/mod.py", name, line) for name, line in
                 (("keep", 4), ("grow", 8), ("step", 14))]
    after = [ran("DRAFT_DECODE", "pkg/mod.py", name, line) for name, line in
             (("keep", 4), ("grow", 9), ("step", 16))]
    source = explain(tmp_path, {"pkg/mod.py": BEFORE}, {"pkg/mod.py": AFTER}, functions, after,
                     [changed_region("DRAFT_DECODE")])
    # keep: comments and spaces only; step: unchanged (its decorator's line is its first line)
    assert (source["compared"], source["unchanged"]) == (3, 2)
    (grow,) = source["changed"]
    assert (grow["function"], grow["status"], grow["line_before"], grow["line_after"]) == ("grow", "changed", 8, 9)
    assert (grow["added"], grow["removed"], grow["rank"], grow["focus"]) == (1, 0, 1, True)
    assert grow["hunk"].splitlines() == [
        "--- A:pkg/mod.py", "+++ B:pkg/mod.py",
        "@@ -8,3 +9,4 @@", " def grow(x):", "     y = x + 1", "+    y = y * 3", "     return y"]


def test_a_removed_function_an_added_one_a_moved_file_and_a_file_gone_say_so(tmp_path):
    before_files = {"pkg/mod.py": BEFORE, "pkg/old/place.py": "def moved(x):\n    return x\n",
                    "pkg/dropped.py": "def lost():\n    return 1\n"}
    after_files = {"pkg/mod.py": AFTER, "pkg/new/place.py": "\n\ndef moved(x):\n    return x\n"}
    ran_before = [ran("DRAFT_DECODE", "pkg/mod.py", "gone", 18), ran("DRAFT_DECODE", "pkg/old/place.py", "moved", 1),
                  ran("DRAFT_DECODE", "pkg/dropped.py", "lost", 1)]
    ran_after = [ran("DRAFT_DECODE", "pkg/mod.py", "fresh", 20), ran("DRAFT_DECODE", "pkg/new/place.py", "moved", 3)]
    source = explain(tmp_path, before_files, after_files, ran_before, ran_after, [changed_region("DRAFT_DECODE")])
    by_name = {c["function"]: c for c in source["changed"]}
    assert by_name["Worker.gone"]["status"] == "removed" and by_name["Worker.gone"]["path_after"] == "pkg/mod.py"
    assert by_name["Worker.gone"]["hunk"].splitlines()[2:] == ["@@ -18,2 +0,0 @@", "-    def gone(self):", "-        return 0"]
    assert by_name["Worker.fresh"]["status"] == "added" and by_name["Worker.fresh"]["line_before"] is None
    assert by_name["lost"]["status"] == "file gone" and by_name["lost"]["path_after"] is None
    # the moved file's function ran on both sides: one entry, from the old path to the new one
    moved = by_name["moved"]
    assert (moved["status"], moved["path_before"], moved["path_after"]) == ("moved", "pkg/old/place.py", "pkg/new/place.py")
    assert (moved["added"], moved["removed"], moved["calls"]) == (0, 0, {"before": 1, "after": 1})
    assert len(source["changed"]) == 4


def test_when_no_regions_ops_changed_the_decode_cycles_functions_rank_first(tmp_path):
    """An output change: no op moved, so the functions that ran in the decode cycle's regions come
    first, even when a function that ran in the prefill only changed more lines."""
    before_files = {"pkg/mod.py": "def verify(x):\n    return x\n\n\ndef prefill(x):\n    return x\n"}
    after_files = {"pkg/mod.py": "def verify(x):\n    return -x\n\n\ndef prefill(x):\n    a = x\n    b = a\n    return b\n"}
    both = [ran("TARGET_VERIFY", "pkg/mod.py", "verify", 1), ran("DRAFT_DECODE", "pkg/mod.py", "verify", 1),
            ran("PREFILL", "pkg/mod.py", "prefill", 5, time_us=1e6)]
    regions = [quiet_region(r) for r in ("DRAFT_DECODE", "PREFILL", "TARGET_VERIFY")]
    assert regions_concerned(regions, {"before": both, "after": both}) == (["DRAFT_DECODE", "TARGET_VERIFY"], "decode cycle")
    source = explain(tmp_path, before_files, after_files, both, both, regions)
    assert source["basis"] == "decode cycle"
    assert [(c["function"], c["focus"], c["added"] + c["removed"]) for c in source["changed"]] == [
        ("verify", True, 2), ("prefill", False, 4)]
    # a function that ran in every region of the cycle ranks above one that ran in one of them only,
    # even with fewer lines changed
    before_files["pkg/mod.py"] += "\n\ndef draft_only(x):\n    return x\n"
    after_files["pkg/mod.py"] += "\n\ndef draft_only(x):\n    a = -x\n    b = a\n    return b\n"
    with_draft = [*both, ran("DRAFT_DECODE", "pkg/mod.py", "draft_only", 9)]
    source = explain(tmp_path / "cycle", before_files, after_files, with_draft, with_draft, regions)
    assert [(c["function"], c["specific"], c["added"] + c["removed"]) for c in source["changed"]] == [
        ("verify", True, 2), ("draft_only", False, 4), ("prefill", False, 4)]
    # with a region whose ops changed, that region is the focus instead
    source = explain(tmp_path / "again", before_files, after_files, both, both, [changed_region("PREFILL")])
    assert [c["function"] for c in source["changed"]] == ["prefill", "verify"]


def test_the_harness_own_code_is_listed_apart_and_other_packages_only_counted(tmp_path):
    files = {"pkg/mod.py": "def f():\n    return 1\n"}
    ran_before = [ran("DRAFT_DECODE", "pkg/mod.py", "f", 1), ran("DRAFT_DECODE", "sgl_kernel/ops.py", "old_route", 10),
                  ran("DRAFT_DECODE", "sglang_spec_harness/sglang_cpu/port.py", "both", 5),
                  ran("DRAFT_DECODE", "torch/nn/modules/module.py", "_call_impl", 1782)]
    ran_after = [ran("DRAFT_DECODE", "pkg/mod.py", "f", 1), ran("DRAFT_DECODE", "sglang_spec_harness/sglang_cpu/port.py", "both", 5),
                 ran("DRAFT_DECODE", "sglang_spec_harness/sglang_cpu/port.py", "new_route", 40, calls=3)]
    source = explain(tmp_path, files, files, ran_before, ran_after, [changed_region("DRAFT_DECODE")])
    assert source["changed"] == [] and (source["compared"], source["unchanged"], source["other_packages"]) == (1, 1, 1)
    assert [(h["file"], h["function"], h["ran"]) for h in source["harness"]] == [
        ("sglang_spec_harness/sglang_cpu/port.py", "new_route", "after only"), ("sgl_kernel/ops.py", "old_route", "before only")]
    assert is_harness_file("sglang_spec_harness/micro/engine.py") and is_harness_file("sgl_kernel/__init__.py")
    assert not is_harness_file("sglang/srt/speculative/eagle_worker_v2.py")


@pytest.mark.parametrize("content, note", [
    (b"def f():\n    return 1\n" + b"#" * (MAX_SOURCE_BYTES + 10) + b"\n", f"bytes, over the {MAX_SOURCE_BYTES} bytes read"),
    (b"def f():\n    return '\xff\xfe'\n", "not UTF-8 (byte 21)"),
    (b"def f(:\n    return 1\n", "does not parse (line 1: "),
    (b"def f():\n    return 1\x00\n", "does not parse"),
    (b"x = " + b"(" * 20000 + b")" * 20000 + b"\ndef f():\n    return 1\n", "does not parse"),
])
def test_hostile_source_is_a_one_line_note_never_a_crash(tmp_path, content, note):
    good = {"pkg/mod.py": "def f():\n    return 1\n"}
    functions = [ran("DRAFT_DECODE", "pkg/mod.py", "f", 1)]
    source = explain(tmp_path, good, {"pkg/mod.py": content}, functions, functions, [changed_region("DRAFT_DECODE")])
    assert source["changed"] == [] and len(source["notes"]) == 1
    assert note in source["notes"][0] and "\n" not in source["notes"][0] and source["notes"][0].startswith("pkg/mod.py: ")
    assert parse_source("x.py", content).definitions == []


def test_a_frame_names_its_file_from_its_sys_path_entry_and_a_bare_name_matches_nothing(tmp_path):
    repo = tmp_path / "repo"
    (repo / "python" / "pkg").mkdir(parents=True)
    (repo / "python" / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "contextlib.py").write_text("\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    git_tree = GitTree(repo, commit, "one")
    assert git_tree.resolve("pkg/mod.py") == "python/pkg/mod.py"
    assert git_tree.resolve("/tmp/worktree-3/python/pkg/mod.py") == "python/pkg/mod.py"
    assert git_tree.resolve("contextlib.py") is None and git_tree.resolve("torch/nn/modules/module.py") is None
    assert git_tree.read("python/pkg/mod.py") == b"def f():\n    return 1\n"


def test_a_long_diff_is_cut_and_says_how_much_was_left_out():
    before = [f"    x{i} = {i}" for i in range(100)]
    after = [f"    x{i} = {i + 1}" for i in range(100)]
    hunk = function_diff(["def f():", *before], ["def f():", *after], 10, 10, ("a", "b"), 60)
    assert (hunk.added, hunk.removed) == (100, 100)
    assert len(hunk.text.splitlines()) == 60 and hunk.lines_left_out == 2 + 1 + 1 + 200 - 60
    # the hunk starts at the def line itself (context), so no def after the @@
    assert hunk.text.splitlines()[2:4] == ["@@ -10,101 +10,101 @@", " def f():"]


def test_a_function_that_ran_only_where_ops_came_or_went_ranks_above_the_forward_pass(tmp_path):
    """As at SGLang 0.5.13: the softmax left the draft's region, a few counts moved in the verify; the
    forward pass that every region runs changed more lines than the draft's own method, yet the
    draft's method comes first."""
    before_files = {"pkg/mod.py": "def draft(x):\n    return x\n\n\ndef forward(x):\n    return x\n"}
    after_files = {"pkg/mod.py": "def draft(x):\n    return -x\n\n\ndef forward(x):\n    a = x\n    b = a\n    c = b\n    return c\n"}
    both = [ran("DRAFT_DECODE", "pkg/mod.py", "draft", 1), ran("DRAFT_DECODE", "pkg/mod.py", "forward", 5),
            ran("TARGET_VERIFY", "pkg/mod.py", "forward", 5)]
    counts_moved = {"region": "TARGET_VERIFY", "appeared": [], "disappeared": [], "changed": [{"op": "aten::sum"}]}
    source = explain(tmp_path, before_files, after_files, both, both, [changed_region("DRAFT_DECODE"), counts_moved])
    assert source["regions"] == ["DRAFT_DECODE", "TARGET_VERIFY"]
    assert [(c["function"], c["focus"], c["specific"], c["added"] + c["removed"]) for c in source["changed"]] == [
        ("draft", True, True, 2), ("forward", True, False, 5)]


def test_the_sentence_speaks_of_source_only_between_two_sweep_points(tmp_path):
    from sglang_spec_harness.history.explain import sentence

    functions = [ran("DRAFT_DECODE", "pkg/mod.py", "grow", 8)]
    after = [ran("DRAFT_DECODE", "pkg/mod.py", "grow", 9)]
    source = explain(tmp_path, {"pkg/mod.py": BEFORE}, {"pkg/mod.py": AFTER}, functions, after,
                     [changed_region("DRAFT_DECODE")])

    def side(label, sweep):
        return {"run": label, "label": label, "path": f"/runs/{label}", "axis": "sglang_release" if sweep else None,
                "sweep": sweep}

    explanation = {"variant": "candidate", "op_counts": {"before": True, "after": True}, "regions": [],
                   "outputs": {"before": None, "after": None, "identical": None}, "environment_differs": [],
                   "source": source}
    swept = sentence({**explanation, "before": side("A", "s"), "after": side("B", "s")})
    assert "SGLang functions that ran in DRAFT_DECODE and changed (1 of 1 compared): pkg/mod.py:grow (+1 -0 lines)." in swept
    alone = sentence({**explanation, "before": side("A", None), "after": side("B", None)})
    assert "SGLang functions" not in alone and "Source not compared" not in alone


def test_the_sentence_names_the_first_few_of_the_harness_own_functions(tmp_path):
    from sglang_spec_harness.history.explain import sentence

    files = {"pkg/mod.py": "def f():\n    return 1\n"}
    port = "sglang_spec_harness/sglang_cpu/port.py"
    ran_before = [ran("TARGET_VERIFY", "pkg/mod.py", "f", 1), ran("TARGET_VERIFY", port, "<listcomp>", 9, calls=50),
                  *(ran("TARGET_VERIFY", port, f"piece{i}", 10 + i, calls=10 - i) for i in range(5))]
    source = explain(tmp_path, files, files, ran_before, [ran("TARGET_VERIFY", "pkg/mod.py", "f", 1)],
                     [changed_region("TARGET_VERIFY")])
    assert [h["function"] for h in source["harness"]] == [f"piece{i}" for i in range(5)]  # no <listcomp>
    side = {"run": "r", "label": "A", "path": "/r", "axis": "sglang_release", "sweep": "s"}
    text = sentence({"variant": "candidate", "op_counts": {"before": True, "after": True}, "regions": [],
                     "outputs": {"before": None, "after": None, "identical": None}, "environment_differs": [],
                     "source": source, "before": side, "after": {**side, "label": "B"}})
    assert text.endswith(f"The harness's own code in those regions: {port}:piece0, {port}:piece1, {port}:piece2 "
                         "and 2 more ran before only.")
