"""How the baseline patch reads SGLang's draft code (sglang_spec_harness.patches.draft_shape), on small
methods written the ways SGLang's releases wrote them. The real code, whole: tests/test_sglang_real_wheel.py
(planted variations of 0.5.23's worker, in the server's own interpreter) and tests/test_sglang_cpu.py
(the files of a release, before any server starts)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from sglang_spec_harness.patches.draft_shape import HarnessPatchError, find_selections, reached

CUDA = {"_is_cuda": True, "_is_hip": False}
ROCM = {"_is_cuda": False, "_is_hip": True}
CPU = {"_is_cuda": False, "_is_hip": False}


def selections(body: str):
    source = "def draft_forward(self, logits, positions):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    func_def = ast.parse(source).body[0]
    assert isinstance(func_def, ast.FunctionDef)
    return find_selections(func_def, "w.Worker.draft_forward")


# 0.5.13: one inline pair, off ROCm
V0_5_13 = """
    if self.topk == 1 and not _is_hip:
        topk_index = torch.argmax(logits, dim=-1, keepdim=True)
        topk_p = torch.ones_like(topk_index, dtype=torch.float32)
    else:
        probs = torch.softmax(logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
"""
# 0.5.21 on: the helper on CUDA and ROCm, the inline pair elsewhere
V0_5_21 = """
    if needs_draft_probs:
        pass
    elif self.topk == 1:
        if _is_cuda or _is_hip:
            topk_p, topk_index = draft_topk1_postprocess(logits, positions, None, 1)
        else:
            idx = torch.argmax(logits, dim=-1, keepdim=True)
            p = torch.ones_like(idx, dtype=torch.float32)
"""


def test_the_pair_is_found_by_its_form_whatever_its_names():
    (pair,) = selections(V0_5_13)
    assert (pair.kind, pair.index_var, pair.prob_var, pair.line) == ("inline argmax", "topk_index", "topk_p", 4)
    assert pair.when() == "self.topk == 1 and (not _is_hip)"
    helper, renamed = selections(V0_5_21)
    assert (helper.kind, renamed.kind, renamed.index_var, renamed.prob_var) == (
        "draft_topk1_postprocess", "inline argmax", "idx", "p")
    assert renamed.when() == "not needs_draft_probs and self.topk == 1 and not (_is_cuda or _is_hip)"


@pytest.mark.parametrize(("flags", "expected"), [
    (CUDA, [(None, ""), (False, "_is_cuda")]),
    (ROCM, [(None, ""), (False, "_is_hip")]),
    (CPU, [(False, "not _is_cuda and not _is_hip"), (None, "")]),
])
def test_the_guards_decide_what_a_platform_runs(flags, expected):
    assert [reached(s, flags) for s in selections(V0_5_21)] == expected
    # before 0.5.16 CUDA ran the inline pair (a version-keyed table had left it in place there)
    assert reached(selections(V0_5_13)[0], flags) == ((False, "_is_hip") if flags is ROCM else (None, ""))


def test_a_local_never_stands_for_the_module_flag_of_its_name():
    (pair,) = selections("""
        _is_hip = self.platform_is_hip()
        if not _is_hip:
            topk_index = torch.argmax(logits, dim=-1, keepdim=True)
            topk_p = torch.ones_like(topk_index, dtype=torch.float32)
    """)
    assert reached(pair, ROCM) == (None, "")  # the module's _is_hip is not the one tested here


@pytest.mark.parametrize(("body", "message"), [
    ("probs = torch.softmax(logits, dim=-1)\ntopk_p, topk_index = fast_topk(probs, 1, dim=-1)\n",
     "w.Worker.draft_forward: no topk==1 selection: no `X = torch.argmax(LOGITS, dim=-1, keepdim=True)` followed by "
     "`P = torch.ones_like(X, dtype=torch.float32)`, and no call to draft_topk1_postprocess or draft_topk1_argmax_only"),
    ("topk_index = torch.argmax(logits, dim=-1, keepdim=True)\ntopk_p = None\n",
     "w.Worker.draft_forward: no `X = torch.argmax(LOGITS, dim=-1, keepdim=True)` followed by `P = torch.ones_like(X, "
     "dtype=torch.float32)`: `topk_index = torch.argmax(logits, dim=-1, keepdim=True)` (line 2) has no "
     "`P = torch.ones_like(topk_index, ...)` after it in its block"),
    ("topk_index = torch.argmax(logits, dim=-1)\ntopk_p = torch.ones_like(topk_index, dtype=torch.float32)\n",
     "w.Worker.draft_forward line 2: `torch.argmax(logits, dim=-1)` is an argmax the patch does not recognise"),
    ("topk_index = torch.argmax(logits, dim=-1, keepdim=True)\ntopk_p = torch.ones_like(topk_index, dtype=torch.bfloat16)\n",
     "w.Worker.draft_forward line 3: `topk_p = torch.ones_like(topk_index, dtype=torch.bfloat16)` is not "
     "`P = torch.ones_like(X, dtype=torch.float32)`"),
    ("if self.topk == 1:\n    best = logits.max(-1).indices.argmax()\n",
     "w.Worker.draft_forward line 3: `logits.max(-1).indices.argmax()` is an argmax the patch does not recognise"),
])
def test_what_is_missing_is_named(body, message):
    with pytest.raises(HarnessPatchError) as refused:
        selections(body)
    assert str(refused.value).startswith(message), str(refused.value)
