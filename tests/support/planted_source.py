"""A git repository with a package that the micro engine runs in its draft (`planted.selection.choose`
becomes the engine's draft token selection), whose second commit plants a change in that one function
among unrelated ones: another function of the same file that never runs, a whitespace-and-comment
edit of a function that runs in the same region, another file, the README. A sweep over its commits
with with_stack traces must name `choose` first, with its hunk (tests/test_source_explanation.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from support.bisect_demo import commit_revision, git, scenario_data

SELECTION_BEFORE = '''"""Draft token selection for the micro engine (planted for the source explanation's test)."""

import sglang_spec_harness.micro.model as _model

_select = _model.select_draft_tokens


def rows_of(logits):
    return logits.shape[0]


def choose(logits, topk, fast_path):
    """Select draft tokens as the engine asks."""
    if rows_of(logits) < 0:
        raise ValueError("no rows")
    return _select(logits, topk, fast_path)


def never_runs(x):
    return x + 1
'''

# The planted change: `choose` (lines 12-16 -> 13-18) skips the fast path. `rows_of` gets a comment and
# spaces only (no change to its code), `never_runs` changes but never runs.
SELECTION_AFTER = '''"""Draft token selection for the micro engine (planted for the source explanation's test)."""

import sglang_spec_harness.micro.model as _model

_select = _model.select_draft_tokens


def rows_of(logits):
    # the number of rows (a comment: no change to the code)
    return logits.shape[ 0 ]


def choose(logits, topk, fast_path):
    """Select draft tokens as the engine asks."""
    if rows_of(logits) < 0:
        raise ValueError("no rows")
    # planted: the draft always takes the softmax path
    return _select(logits, topk, False)


def never_runs(x):
    return x + 2
'''

CHOOSE_HUNK = '''@@ -13,4 +14,5 @@ def choose(logits, topk, fast_path):
     """Select draft tokens as the engine asks."""
     if rows_of(logits) < 0:
         raise ValueError("no rows")
-    return _select(logits, topk, fast_path)
+    # planted: the draft always takes the softmax path
+    return _select(logits, topk, False)'''

HOOKS_BEFORE = '''"""Makes planted.selection.choose the micro engine's draft token selection."""
import sglang_spec_harness.micro.engine as _engine

from planted import selection


def install():
    _engine.select_draft_tokens = selection.choose


install()
'''
HOOKS_AFTER = HOOKS_BEFORE.replace("def install():\n", "def install():\n\n")  # a blank line only

UNRELATED_BEFORE = '''def helper(a, b):
    return a * b
'''
UNRELATED_AFTER = '''def helper(a, b):
    """Changed, and never imported."""
    return a * b + 0
'''

REVISIONS = [
    {"selection.py": SELECTION_BEFORE, "hooks.py": HOOKS_BEFORE, "unrelated.py": UNRELATED_BEFORE},
    {"selection.py": SELECTION_AFTER, "hooks.py": HOOKS_AFTER, "unrelated.py": UNRELATED_AFTER},
]


def make_planted_repo(root: Path, revisions: list[dict[str, str]] = REVISIONS) -> tuple[Path, list[str]]:
    """One commit per revision (files of `python/planted/`); the repository and its commits, oldest first."""
    repo = root / "src"
    package = repo / "python" / "planted"
    package.mkdir(parents=True)
    git(repo, "init", "-q")
    hashes = []
    for i, files in enumerate(revisions):
        (package / "__init__.py").write_text('"""A package planted in a test repository."""\n')
        for name, text in files.items():
            (package / name).write_text(text)
        hashes.append(commit_revision(repo, i, f"2025-02-{i + 1:02d}T12:00:00+00:00"))
    return repo, hashes


def write_planted_scenario(root: Path, repo: Path) -> Path:
    """The micro engine's candidate runs the repository's package in its draft; profiled with stacks."""
    data = scenario_data(repo, {"mode": "interleaved", "launches": 1, "repetitions": 1, "profiled": 1},
                         patches=["planted.hooks"])
    data.update(name="planted_source", profile={"num_steps": 4, "activities": ["CPU"], "with_stack": True},
                rules=[rule for rule in data["rules"] if rule["name"] == "no_softmax"])
    path = root / "planted_source.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
