"""The patch bootstrap and the restore-softmax patch's failure modes, in real child interpreters.

SGLang's real 0.5.23 code is the reference for what the patch does: tests/test_sglang_real_wheel.py
runs it against the wheel's own worker module and Triton kernels, planted variations of that code
included. This module keeps what a released wheel cannot show: how the patch fails when
SGLang's code changes shape (a helper gone, a new parameter, a call that does not fit, a moved
call site, a selection gone or in another form), and the bootstrap's mechanics (chained
sitecustomize, spawned children, reloads). The fake `sglang` package below has the 0.5.23 shape
of everything the patch touches, with torch CPU code in place of the Triton kernels, so each case
is a one-line edit of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT, PATCH_BOOTSTRAP_DIR, PATCHES_ENV
from sglang_spec_harness.engines.sglang_versions import RESTORE_TOPK1_SOFTMAX_PATCH
from sglang_spec_harness.patches.sglang_restore_topk1_softmax import APPLIED_ENV, PATCH_FAILURE_EXIT_CODE

pytest.importorskip("torch")

WORKER_MODULE = "sglang.srt.speculative.eagle_worker_v2"

FAKE_TOPK1 = '''\
import torch


def draft_topk1_postprocess(next_token_logits, positions, draft_tokens=None, draft_token_column=0):
    # CPU stand-in for the split-vocabulary Triton argmax: same contract and side effects
    topk_index = torch.argmax(next_token_logits, dim=-1, keepdim=True)
    topk_p = torch.ones_like(topk_index, dtype=torch.float32)
    positions.add_(1)
    if draft_tokens is not None:
        draft_tokens[:, draft_token_column].copy_(topk_index[:, 0])
    return topk_p, topk_index


def draft_topk1_argmax_only(next_token_logits):
    topk_index = torch.argmax(next_token_logits, dim=-1, keepdim=True)
    return torch.ones_like(topk_index, dtype=torch.float32), topk_index
'''

FAKE_COMMON = '''\
import torch


def fast_topk(values, topk, dim):
    if topk == 1:
        return torch.max(values, dim=dim, keepdim=True)
    return torch.topk(values, topk, dim=dim)
'''

FAKE_WORKER = '''\
import torch

from sglang.kernels.ops.speculative.topk1 import (
    draft_topk1_argmax_only,
    draft_topk1_postprocess,
)
from sglang.srt.utils.common import fast_topk

_is_cuda = True  # the branch a CUDA server takes
_is_hip = False


class EagleDraftWorker:
    def __init__(self, topk=1, use_rejection_sampling=False):
        self.topk = topk
        self.use_rejection_sampling = use_rejection_sampling

    def draft_forward(self, step_logits, positions):
        """The draft-step loop: one token selection per draft forward."""
        draft_tokens = torch.zeros((positions.shape[0], len(step_logits) + 1), dtype=torch.long)
        for i, logits in enumerate(step_logits):
            if self.topk == 1:
                if _is_cuda or _is_hip:
                    topk_p, topk_index = draft_topk1_postprocess(
                        logits,
                        positions,
                        draft_tokens,
                        i + 1,
                    )
                else:
                    topk_index = torch.argmax(logits, dim=-1, keepdim=True)
                    topk_p = torch.ones_like(topk_index, dtype=torch.float32)
                    positions.add_(1)
            else:
                probs = torch.softmax(logits, dim=-1)
                topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
                positions.add_(1)
        return topk_p, topk_index, draft_tokens

    def _draft_extend_for_decode(self, draft_logits_output, next_draft_input):
        if self.use_rejection_sampling:
            raise NotImplementedError("not part of the fake")
        elif self.topk == 1 and _is_hip:
            ret_topk_p, ret_topk_index = draft_topk1_argmax_only(
                draft_logits_output.next_token_logits
            )
            ret_draft_probs = None
        elif self.topk == 1 and not _is_hip:
            # Gated to CUDA (the comment and layout of the real branch)
            ret_topk_index = torch.argmax(
                draft_logits_output.next_token_logits, dim=-1, keepdim=True
            )
            ret_topk_p = torch.ones_like(ret_topk_index, dtype=torch.float32)
            ret_draft_probs = None
        else:
            probs = torch.softmax(draft_logits_output.next_token_logits, dim=-1)
            ret_topk_p, ret_topk_index = fast_topk(probs, self.topk, dim=-1)
            ret_draft_probs = None
        next_draft_input.topk_p = ret_topk_p
        next_draft_input.topk_index = ret_topk_index
        next_draft_input.draft_probs = ret_draft_probs
'''

def write_fake_sglang(root: Path, *, topk1: str = FAKE_TOPK1, worker: str = FAKE_WORKER) -> Path:
    files = {
        "sglang/__init__.py": '__version__ = "0.5.23"\n',
        "sglang/kernels/__init__.py": "",
        "sglang/kernels/ops/__init__.py": "",
        "sglang/kernels/ops/speculative/__init__.py": "",
        "sglang/kernels/ops/speculative/topk1.py": topk1,
        "sglang/srt/__init__.py": "",
        "sglang/srt/utils/__init__.py": "",
        "sglang/srt/utils/common.py": FAKE_COMMON,
        "sglang/srt/speculative/__init__.py": "",
        "sglang/srt/speculative/eagle_worker_v2.py": worker,
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def replaced(text: str, old: str, new: str) -> str:
    assert old in text, f"fake source changed: {old!r} not found"
    return text.replace(old, new)


def child_env(pythonpath: list[Path], patches: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PATCHES_ENV, APPLIED_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    env["PYTHONNOUSERSITE"] = "1"
    if patches is not None:
        env[PATCHES_ENV] = patches
    return env


def run_child(args: list[str], *, pythonpath: list[Path], patches: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=child_env(pythonpath, patches), cwd=cwd,
        capture_output=True, text=True, timeout=180,
    )


EXTEND_ARGMAX = "ret_topk_index = torch.argmax(\n                draft_logits_output.next_token_logits, dim=-1, keepdim=True\n            )"
EXTEND_ONES = "ret_topk_p = torch.ones_like(ret_topk_index, dtype=torch.float32)"

BROKEN_SHAPES = {
    # draft_forward calls the helper, but the worker no longer imports it (renamed upstream)
    "missing_helper": (
        lambda: {"worker": replaced(FAKE_WORKER, "    draft_topk1_postprocess,\n", "")},
        "has no attribute 'draft_topk1_postprocess'",
    ),
    # the helper grew a parameter: its contract may have changed
    "changed_signature": (
        lambda: {"topk1": replaced(FAKE_TOPK1, "draft_token_column=0)", "draft_token_column=0, hot_token_id=None)")},
        "draft_topk1_postprocess has parameters (next_token_logits, positions, draft_tokens, draft_token_column, hot_token_id)",
    ),
    # the call passes an argument the replacement does not take
    "call_does_not_fit": (
        lambda: {"worker": replaced(FAKE_WORKER, "                        i + 1,\n", "                        i + 1,\n                        fused=True,\n")},
        "does not fit draft_topk1_postprocess's parameters (next_token_logits, positions, draft_tokens, draft_token_column)",
    ),
    # draft_forward selects through something else on CUDA now: its only selection is the CPU one
    "moved_call_site": (
        lambda: {"worker": replaced(FAKE_WORKER, "= draft_topk1_postprocess(", "= self._select_topk1(")},
        "EagleDraftWorker.draft_forward: none of its topk==1 selections runs here (inline argmax at line 31, excluded by _is_cuda)",
    ),
    # _draft_extend_for_decode selects with a new kernel on CUDA: only the ROCm helper is left
    "extend_selects_elsewhere": (
        lambda: {"worker": replaced(replaced(FAKE_WORKER, EXTEND_ARGMAX, "ret_topk_p, ret_topk_index = draft_topk1_cuda(\n"
                                             "                draft_logits_output.next_token_logits\n            )"),
                                    EXTEND_ONES, "pass")},
        "EagleDraftWorker._draft_extend_for_decode: none of its topk==1 selections runs here (draft_topk1_argmax_only at "
        "line 44, excluded by not _is_hip)",
    ),
    # the pair lost its second statement
    "ones_like_gone": (
        lambda: {"worker": replaced(FAKE_WORKER, EXTEND_ONES, "ret_topk_p = None")},
        "EagleDraftWorker._draft_extend_for_decode: no `X = torch.argmax(LOGITS, dim=-1, keepdim=True)` followed by "
        "`P = torch.ones_like(X, dtype=torch.float32)`: `ret_topk_index = torch.argmax(",
    ),
    # an argmax in another form: the patch cannot tell it from a fast path it would leave in place
    "argmax_in_another_form": (
        lambda: {"worker": replaced(FAKE_WORKER, "topk_index = torch.argmax(logits, dim=-1, keepdim=True)",
                                    "topk_index = logits.argmax(dim=-1, keepdim=True)")},
        "`logits.argmax(dim=-1, keepdim=True)` is an argmax the patch does not recognise",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_SHAPES))
def test_unexpected_sglang_shape_fails_the_process_with_one_clear_line(tmp_path, case):
    make_sources, expected = BROKEN_SHAPES[case]
    fake = write_fake_sglang(tmp_path / "fake", **make_sources())
    proc = run_child(["-c", f"import {WORKER_MODULE}\nprint('fast path ran')"],
                     pythonpath=[fake, PATCH_BOOTSTRAP_DIR, HARNESS_SOURCE_ROOT],
                     patches=RESTORE_TOPK1_SOFTMAX_PATCH, cwd=tmp_path)
    assert proc.returncode == PATCH_FAILURE_EXIT_CODE, (proc.returncode, proc.stderr)
    assert "fast path ran" not in proc.stdout
    assert "Traceback" not in proc.stderr
    failed = [line for line in proc.stderr.splitlines() if line.startswith("harness patch failed:")]
    assert len(failed) == 1 and proc.stderr.rstrip().endswith(failed[0]), proc.stderr
    assert expected in failed[0]
    assert "SGLang 0.5.23" in failed[0] and "sglang_restore_topk1_softmax" in failed[0]


def test_bootstrap_fails_clearly_when_a_patch_module_cannot_be_imported(tmp_path):
    proc = run_child(["-c", "print('started')"], pythonpath=[PATCH_BOOTSTRAP_DIR, HARNESS_SOURCE_ROOT],
                     patches="sglang_spec_harness.patches.no_such_patch", cwd=tmp_path)
    assert proc.returncode == PATCH_FAILURE_EXIT_CODE and "started" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("harness bootstrap: cannot import patch module 'sglang_spec_harness.patches.no_such_patch'")
    assert "ModuleNotFoundError" in lines[0]


@pytest.mark.parametrize("patches", [RESTORE_TOPK1_SOFTMAX_PATCH, None])
def test_bootstrap_chains_to_the_sitecustomize_it_shadows(tmp_path, patches):
    other = tmp_path / "other_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import os, sys\nos.environ['CHAINED_SITECUSTOMIZE'] = __file__\n"
        "sys.stderr.write('other sitecustomize ran\\n')\n"
    )
    script = (
        "import os, sys\n"
        "print(os.environ.get('CHAINED_SITECUSTOMIZE'))\n"
        f"print({RESTORE_TOPK1_SOFTMAX_PATCH!r} in sys.modules)\n"
        "print(sys.modules['sitecustomize'].__file__)\n"
    )
    proc = run_child(["-c", script], pythonpath=[PATCH_BOOTSTRAP_DIR, other, HARNESS_SOURCE_ROOT],
                     patches=patches, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    chained, patch_loaded, active = proc.stdout.strip().splitlines()
    assert Path(chained) == other / "sitecustomize.py"
    assert patch_loaded == str(patches is not None)
    assert Path(active).parent == PATCH_BOOTSTRAP_DIR
    assert proc.stderr.count("other sitecustomize ran") == 1


def test_broken_chained_sitecustomize_warns_like_python_and_patches_still_apply(tmp_path):
    other = tmp_path / "other_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("raise RuntimeError('broken on purpose')\n")
    script = f"import sys\nprint({RESTORE_TOPK1_SOFTMAX_PATCH!r} in sys.modules)\n"
    proc = run_child(["-c", script], pythonpath=[PATCH_BOOTSTRAP_DIR, other, HARNESS_SOURCE_ROOT],
                     patches=RESTORE_TOPK1_SOFTMAX_PATCH, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr
    assert "Error in sitecustomize" in proc.stderr and "RuntimeError: broken on purpose" in proc.stderr


@pytest.mark.slow
def test_patch_applies_in_a_multiprocessing_spawn_child(tmp_path):
    # SGLang's scheduler is a spawned child: it must get the patch from its own start-up, not
    # from the parent (which here never imports the worker module at all).
    fake = write_fake_sglang(tmp_path / "fake")
    script = tmp_path / "spawn_probe.py"
    script.write_text(textwrap.dedent(f"""
        import multiprocessing
        import os
        import sys


        def scheduler_like_child():
            import {WORKER_MODULE} as m
            patched = (
                getattr(m.draft_topk1_postprocess, "__harness_patch__", None) is not None
                and getattr(m.EagleDraftWorker._draft_extend_for_decode, "__harness_patch__", None) is not None
            )
            print("child pid", os.getpid(), "patched", patched, flush=True)
            sys.exit(0 if patched else 3)


        if __name__ == "__main__":
            assert {WORKER_MODULE!r} not in sys.modules
            process = multiprocessing.get_context("spawn").Process(target=scheduler_like_child)
            process.start()
            process.join()
            assert {WORKER_MODULE!r} not in sys.modules
            print("parent pid", os.getpid(), "child exit", process.exitcode, flush=True)
            sys.exit(process.exitcode)
    """))
    proc = run_child([str(script)], pythonpath=[fake, PATCH_BOOTSTRAP_DIR, HARNESS_SOURCE_ROOT],
                     patches=RESTORE_TOPK1_SOFTMAX_PATCH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    child_line = next(line for line in proc.stdout.splitlines() if line.startswith("child pid"))
    child_pid = child_line.split()[2]
    assert "patched True" in child_line
    applied = [line for line in proc.stderr.splitlines() if line.startswith("harness patch applied:")]
    assert len(applied) == 1 and applied[0].endswith(f"pid {child_pid})"), proc.stderr


def test_patch_imported_after_the_worker_module_still_applies(tmp_path):
    # e.g. a patch imported by hand in a process that had already loaded SGLang
    fake = write_fake_sglang(tmp_path / "fake")
    script = textwrap.dedent(f"""
        import {WORKER_MODULE} as m
        unpatched = m.draft_topk1_postprocess
        import {RESTORE_TOPK1_SOFTMAX_PATCH}
        assert m.draft_topk1_postprocess is not unpatched
        assert m.draft_topk1_postprocess.__harness_patch__["replaces"] is unpatched
        import importlib
        importlib.reload(m)  # re-executing the module must patch it again, not keep the fast path
        assert m.draft_topk1_postprocess.__harness_patch__["patch"] == "sglang_restore_topk1_softmax"
        print("ok")
    """)
    proc = run_child(["-c", script], pythonpath=[fake, HARNESS_SOURCE_ROOT], patches=None, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert proc.stderr.count("harness patch applied:") == 2


@pytest.mark.slow
def test_rocm_only_helper_mismatch_is_reported_not_fatal_off_rocm(tmp_path):
    # draft_topk1_argmax_only is called only under `_is_hip`; on CUDA (and this CPU) a changed
    # signature must not stop the server, but the applied line says it was left alone.
    topk1 = replaced(FAKE_TOPK1, "def draft_topk1_argmax_only(next_token_logits):",
                     "def draft_topk1_argmax_only(next_token_logits, vocab_size=None):")
    fake = write_fake_sglang(tmp_path / "fake", topk1=topk1)
    script = f"import {WORKER_MODULE} as m\nprint(hasattr(m.draft_topk1_argmax_only, '__harness_patch__'))\n"
    proc = run_child(["-c", script], pythonpath=[fake, PATCH_BOOTSTRAP_DIR, HARNESS_SOURCE_ROOT],
                     patches=RESTORE_TOPK1_SOFTMAX_PATCH, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr
    applied = [line for line in proc.stderr.splitlines() if line.startswith("harness patch applied:")]
    assert len(applied) == 1
    assert f"{WORKER_MODULE}.draft_topk1_postprocess -> softmax + fast_topk" in applied[0]
    assert f"{WORKER_MODULE}.draft_topk1_argmax_only left as is (not reached here: not _is_hip; " in applied[0]
    assert "_draft_extend_for_decode: inline torch.argmax -> softmax + fast_topk" in applied[0]
