"""The baseline patch against SGLang 0.5.23's real code and real kernels, on CPU.

The wheel is downloaded once into a cache (tests/support/sglang_wheel.py says how, and which stubs it
needs). Each probe is a child interpreter started as an SGLang server process would be: the
harness bootstrap on PYTHONPATH with HARNESS_PATCHES naming the patch (the baseline), or without
it (the candidate, SGLang as shipped). TRITON_INTERPRET=1 runs the real Triton kernels
(`draft_topk1_postprocess`, `draft_topk1_argmax_only`) on CPU tensors. The children drive the
real `EagleDraftWorker.draft_forward` and `_draft_extend_for_decode`; this module compares what
the baseline and the candidate chose, wrote and called.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT, PATCH_BOOTSTRAP_DIR, PATCHES_ENV
from sglang_spec_harness.engines.sglang_versions import RESTORE_TOPK1_SOFTMAX_PATCH
from sglang_spec_harness.patches.sglang_restore_topk1_softmax import APPLIED_ENV, PATCH_FAILURE_EXIT_CODE

from support import sglang_wheel
from support import sglang_wheel_probe as probe

torch = pytest.importorskip("torch")

TESTS_DIR = Path(__file__).resolve().parent
PLATFORMS = ("cuda", "hip", "cpu")  # cpu: SGLang's CPU engine, whose draft_forward has an inline argmax
CASES = [case["name"] for case in probe.make_cases()]


@pytest.fixture(scope="module")
def wheel_root() -> Path:
    return sglang_wheel.source_root_or_skip(need_triton=True)


def child_env(patched: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PATCHES_ENV, APPLIED_ENV)}
    path = [TESTS_DIR, HARNESS_SOURCE_ROOT]
    if patched:
        path.insert(0, PATCH_BOOTSTRAP_DIR)
        env[PATCHES_ENV] = RESTORE_TOPK1_SOFTMAX_PATCH
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    env["PYTHONNOUSERSITE"] = "1"
    env["TRITON_INTERPRET"] = "1"
    env["TORCHDYNAMO_DISABLE"] = "1"  # torch.compile'd SGLang helpers run eagerly (sglang_wheel.LIFTED_GLOBALS)
    return env


@pytest.fixture(scope="module")
def probes(wheel_root, tmp_path_factory) -> dict[tuple[str, bool], dict]:
    """(platform, patched) -> the probe's results, plus its stderr under "stderr"; all four run at once."""
    out_dir = tmp_path_factory.mktemp("probes")
    running = {}
    for platform in PLATFORMS:
        for patched in (False, True):
            out = out_dir / f"{platform}-{'baseline' if patched else 'candidate'}.pt"
            running[(platform, patched)] = (out, subprocess.Popen(
                [sys.executable, str(TESTS_DIR / "support" / "sglang_wheel_probe.py"), str(wheel_root), platform, str(out)],
                env=child_env(patched), cwd=out_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = {}
    for key, (out, proc) in running.items():
        _stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"probe {key} exited {proc.returncode}:\n{stderr[-4000:]}"
        results[key] = torch.load(out, weights_only=False)
        results[key]["stderr"] = stderr
    return results


def run_snippet(code: str, *, patched: bool, wheel_root: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = f"import sys\nfrom support import sglang_wheel\nsglang_wheel.install(sglang_wheel.source_root())\n{textwrap.dedent(code)}"
    env = child_env(patched)
    env[sglang_wheel.CACHE_ENV] = str(wheel_root.parent)
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


# ---- how the real code was loaded -------------------------------------------------------------------


@pytest.mark.slow
def test_the_real_modules_run_and_every_other_sglang_module_is_accounted_for(probes):
    for (platform, patched), result in probes.items():
        loaded = result["loaded"]
        for name in (sglang_wheel.WORKER_MODULE, sglang_wheel.TOPK1_MODULE, "sglang.srt.model_executor.forward_context"):
            assert loaded[name] == "real", (platform, patched, name)
        assert loaded["sglang.srt.utils.common"] == "lifted"  # fast_topk: the wheel's own text
        standins = sorted(n for n, kind in loaded.items() if kind == "stand-in")
        assert standins == sorted(sglang_wheel._standins(platform, None, None).keys() - sglang_wheel.LIFTED.keys())
        # the platform probes decide the branch the worker took
        assert (result["is_cuda"], result["is_hip"]) == (platform == "cuda", platform == "hip")


# ---- the candidate: SGLang as shipped ------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
def test_candidate_runs_the_real_kernels_and_no_softmax(probes, platform):
    result = probes[(platform, False)]
    assert result["postprocess_is_real"] and result["argmax_only_is_real"]
    assert not result["method_patched"] and not result["forward_patched"]
    assert result["applied_env"] is None and "harness patch applied" not in result["stderr"]
    for case in CASES:
        forward, extend = result["cases"][case]["draft_forward"], result["cases"][case]["draft_extend_for_decode"]
        assert forward["softmax_calls"] == 0 and extend["softmax_calls"] == 0
        assert extend["topk_p"].dtype == torch.float32 and bool((extend["topk_p"] == 1).all())


# ---- the baseline: the patch, applied by the bootstrap -------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
def test_patch_applies_through_the_bootstrap_at_every_site(probes, platform):
    result = probes[(platform, True)]
    applied = [line for line in result["stderr"].splitlines() if line.startswith("harness patch applied:")]
    assert len(applied) == 1, result["stderr"]
    assert applied[0].startswith("harness patch applied: sglang_restore_topk1_softmax: shape [draft_forward: "
                                 "draft_topk1_postprocess + inline argmax | _draft_extend_for_decode: "
                                 "draft_topk1_argmax_only + inline argmax]: ")
    for site in ("eagle_worker_v2.draft_topk1_postprocess -> softmax + fast_topk (called by EagleDraftWorker.draft_forward)",
                 "eagle_worker_v2.draft_topk1_argmax_only -> softmax + fast_topk (called by "
                 "EagleDraftWorker._draft_extend_for_decode)"):
        assert site in applied[0]
    # Each inline argmax is recompiled where the process reaches it: draft_forward's is the CPU
    # engine's (on CUDA and ROCm SGLang's own method stays), _draft_extend_for_decode's runs off ROCm.
    for method, runs_here, left_because in (("draft_forward", platform == "cpu", f"_is_{platform}"),
                                             ("_draft_extend_for_decode", platform != "hip", "_is_hip")):
        rewritten = f"EagleDraftWorker.{method}: inline torch.argmax -> softmax + fast_topk"
        left = f"EagleDraftWorker.{method} left as is (its inline argmax is not reached here: {left_because})"
        assert (rewritten in applied[0], left in applied[0]) == (runs_here, not runs_here), (method, applied[0])
    assert result["forward_patched"] == (platform == "cpu")
    assert result["method_patched"] == (platform != "hip")
    assert applied[0].endswith(f"(SGLang 0.5.23, pid {result['pid']})")
    assert result["applied_env"] == "sglang_restore_topk1_softmax"
    assert not result["postprocess_is_real"] and not result["argmax_only_is_real"]
    # StandaloneDraftWorker (--speculative-algorithm STANDALONE) inherits the patched method
    assert result["standalone_shares_method"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_baseline_chooses_the_same_tokens_with_the_same_side_effects(probes, platform, case):
    candidate = probes[(platform, False)]["cases"][case]
    baseline = probes[(platform, True)]["cases"][case]
    inputs = next(c for c in probe.make_cases() if c["name"] == case)

    # draft_forward: the chain of draft tokens (column 0 is the input token, then one per step),
    # positions advanced once per step, the constant topk=1 tree, no draft probabilities
    c, b = candidate["draft_forward"], baseline["draft_forward"]
    for key in ("draft_tokens", "positions", "parents", "score_index"):
        assert torch.equal(c[key], b[key]), key
        assert c[key].dtype == b[key].dtype and c[key].shape == b[key].shape, key
    expected_chain = torch.stack([x.float().argmax(dim=-1) for x in inputs["step_logits"]], dim=1)
    assert torch.equal(b["draft_tokens"][:, 1:], expected_chain)
    assert torch.equal(b["positions"], torch.arange(probe.BATCH) + 100 + (probe.STEPS - 1))
    assert c["draft_probs"] is None and b["draft_probs"] is None
    assert (c["softmax_calls"], b["softmax_calls"]) == (0, probe.STEPS - 1)  # one per draft step

    # _draft_extend_for_decode: the selected rows' top-1
    c, b = candidate["draft_extend_for_decode"], baseline["draft_extend_for_decode"]
    assert torch.equal(c["topk_index"], b["topk_index"])
    assert b["topk_index"].dtype == torch.int64 and b["topk_index"].shape == (probe.BATCH, 1)
    assert b["topk_p"].dtype == torch.float32 and b["topk_p"].shape == (probe.BATCH, 1)
    rows = inputs["extend_logits"][inputs["select_index"]]
    assert torch.equal(b["topk_p"], torch.softmax(rows, dim=-1).max(dim=-1, keepdim=True).values.float())
    assert (c["softmax_calls"], b["softmax_calls"]) == (0, 1)
    assert c["cuda_graph_compatible"] and b["cuda_graph_compatible"]


def test_rebound_helpers_keep_the_kernels_contract(probes):
    contract = probes[("cuda", True)]["contract"]
    for case in CASES:
        real, patched, x = contract[case]["real"], contract[case]["patched"], contract[case]["logits"]
        for key in ("topk_index", "positions", "draft_tokens", "bare_topk_index", "bare_positions", "only_topk_index"):
            assert torch.equal(real[key], patched[key]), (case, key)
        for key in ("topk_p", "bare_topk_p", "only_topk_p"):
            assert real[key].dtype == patched[key].dtype == torch.float32 and real[key].shape == patched[key].shape
            assert bool((real[key] == 1).all())  # the fast path's probabilities are constant ones
        assert torch.equal(patched["topk_p"], torch.softmax(x, dim=-1).max(dim=-1, keepdim=True).values.float())
        # only the chosen column of the chain is written; positions advance by one
        written = patched["draft_tokens"]
        assert torch.equal(written[:, 2], patched["topk_index"][:, 0])
        assert bool((written[:, [0, 1, 3]] == -1).all())
        assert torch.equal(patched["positions"], torch.arange(probe.BATCH) * 10 + 1)
        assert torch.equal(patched["bare_positions"], torch.ones(probe.BATCH, dtype=torch.long))


def test_rows_with_nan_or_inf_differ_exactly_as_documented(probes):
    # The kernels map NaN to -1e30 and take the best finite logit (or the +inf one); softmax makes
    # such a row NaN and torch.max returns a NaN's index. The patch does not match this on purpose
    # (see its docstring); everywhere else the two agree.
    special = probes[("cuda", True)]["contract"]["special_rows"]
    x = special["logits"]
    real, patched = special["real"]["topk_index"][:, 0], special["patched"]["topk_index"][:, 0]
    assert torch.equal(real, torch.nan_to_num(x, nan=-1e30, posinf=float("inf")).argmax(dim=-1))
    undefined = torch.isnan(x).any(dim=-1) | torch.isposinf(x).any(dim=-1)
    assert undefined.tolist() == [True, True, True, False, False, False]
    assert torch.equal(real[~undefined], patched[~undefined])
    differing = (real != patched).nonzero().flatten().tolist()
    assert differing == [0, 2]  # the all-NaN row: both happen to answer 0
    assert bool(torch.isnan(special["patched"]["topk_p"][undefined]).all())


def test_sub_resolution_ties_differ_only_by_the_tie_break(probes):
    # float32 logits of magnitude 0.5 one ulp apart: their softmax probabilities round equal, so
    # softmax + max (the pre-#26235 code) takes the lower index and the argmax the larger logit.
    ties = probes[("cuda", True)]["contract"]["sub_resolution_ties"]
    x = ties["logits"]
    real, patched = ties["real"]["topk_index"][:, 0], ties["patched"]["topk_index"][:, 0]
    assert torch.equal(real, x.argmax(dim=-1))
    probs = torch.softmax(x, dim=-1)
    rows = torch.arange(len(x))
    differing = real != patched
    assert 0 < int(differing.sum()) < len(x)  # the case exists (else the docstring is out of date)
    assert torch.equal(probs[rows, real][differing], probs[rows, patched][differing])
    assert bool((patched[differing] < real[differing]).all())


def test_rewritten_method_reports_the_real_line_numbers(probes, wheel_root):
    result = probes[("cuda", True)]
    assert result["method_file"] == result["original_file"]
    assert result["method_firstlineno"] == result["original_firstlineno"] == 1110
    # every instruction of the rewritten method sits on a line of the original one
    assert set(result["method_lines"]) <= set(result["original_lines"])
    # the replaced statements, located in the wheel's source
    source = (wheel_root / "sglang/srt/speculative/eagle_worker_v2.py").read_text()
    tree = ast.parse(source)
    argmax = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                  and ast.unparse(n.targets[0]) == "ret_topk_index" and ast.unparse(n.value.func) == "torch.argmax")
    ones = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "ret_topk_p"
                and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "torch.ones_like")
    logits_line = argmax.value.args[0].lineno
    assert (argmax.lineno, logits_line, ones.lineno) == (1262, 1263, 1265)
    names = result["method_names"]
    assert names["softmax"] == [argmax.lineno]  # the new softmax, where the argmax was
    assert logits_line in names["next_token_logits"]  # its argument keeps its own line (was 1416)
    assert ones.lineno in names["fast_topk"]
    assert "argmax" not in names and "ones_like" not in names


# ---- the real code, planted with the changes a release or a PR could make ---------------------------------
# The patch recognises the draft code by its shape: each case edits the wheel's own eagle_worker_v2.py
# and imports it through the bootstrap, then runs the real methods (tests/support/sglang_wheel_probe.py).

CPU_ONES = "                        topk_p = torch.ones_like(topk_index, dtype=torch.float32)\n"
EXTEND_ONES = "            ret_topk_p = torch.ones_like(ret_topk_index, dtype=torch.float32)\n"
PLANTED = {
    # another author's names for the extend's pair: the pair is recognised by its form, not its names
    "renamed_variables": (lambda src: src.replace("ret_topk_index", "chosen_index").replace("ret_topk_p", "chosen_p"),
                          "applied", "EagleDraftWorker._draft_extend_for_decode: inline torch.argmax -> softmax + fast_topk"),
    # CUDA reaching draft_forward's inline pair (as in 0.5.13-0.5.15): recompiled on CUDA too, by its guard
    "inline_pair_reached_on_cuda": (lambda src: _once(src, "                    if _is_cuda or _is_hip:\n",
                                                         "                    if _is_hip:\n"),
                                    "applied", "EagleDraftWorker.draft_forward: inline torch.argmax -> softmax + fast_topk"),
    # the extend's pair without its second statement
    "ones_like_gone": (lambda src: _once(src, EXTEND_ONES, "            chosen = None\n"), "refused",
                       "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._draft_extend_for_decode: no `X = "
                       "torch.argmax(LOGITS, dim=-1, keepdim=True)` followed by `P = torch.ones_like(X, dtype=torch.float32)`: "
                       "`ret_topk_index = torch.argmax(draft_logits_output.next_token_logits, dim=-1, keepdim=True)` "
                       "(line 1262) has no `P = torch.ones_like(ret_topk_index, ...)` after it in its block"),
    # the CPU pair's argmax written as a method call
    "argmax_in_another_form": (lambda src: _once(src, "topk_index = torch.argmax(\n                            logits_output",
                                                 "topk_index = (\n                            logits_output").replace(
                                   "logits_output.next_token_logits, dim=-1, keepdim=True\n                        )\n"
                                   + CPU_ONES, "logits_output.next_token_logits.argmax(dim=-1, keepdim=True)\n"
                                   "                        )\n" + CPU_ONES, 1),
                               "refused", "EagleDraftWorker.draft_forward line 877: `logits_output.next_token_logits.argmax("
                               "dim=-1, keepdim=True)` is an argmax the patch does not recognise"),
    # the draft-decode method renamed
    "method_renamed": (lambda src: _once(src, "    def draft_forward(self", "    def draft_steps(self"), "refused",
                       "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker has no method draft_forward (the draft "
                       "decode's token selection)"),
}


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the wheel's source changed: {old!r} found {text.count(old)} times"
    return text.replace(old, new)


PLANTED_CHILD = """
import json, sys
from pathlib import Path
from support import sglang_wheel
sglang_wheel.install(Path(sys.argv[1]), platform=sys.argv[2])
import sglang.srt.speculative.eagle_worker_v2 as worker
from support import sglang_wheel_probe as probe
case = probe.make_cases()[0]
print("RESULT " + json.dumps({"forward": probe.run_draft_forward(worker, case)["softmax_calls"],
                              "extend": probe.run_draft_extend_for_decode(worker, case)["softmax_calls"]}))
"""


def run_planted(wheel_root: Path, tmp_path: Path, edit, platform: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "planted"
    shutil.copytree(wheel_root, root)
    worker = root / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    worker.write_text(edit(worker.read_text()))
    return subprocess.run([sys.executable, "-c", PLANTED_CHILD, str(root), platform], env=child_env(True), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_planted_variations_of_the_real_code_apply_or_refuse_by_their_shape(wheel_root, tmp_path, case):
    edit, outcome, expected = PLANTED[case]
    proc = run_planted(wheel_root, tmp_path, edit, "cuda")
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    if outcome == "refused":
        assert proc.returncode == PATCH_FAILURE_EXIT_CODE and "RESULT" not in proc.stdout, proc.stderr[-3000:]
        failed = [line for line in proc.stderr.splitlines() if line.startswith("harness patch failed:")]
        assert len(failed) == 1 and proc.stderr.rstrip().endswith(failed[0]), proc.stderr
        assert expected in failed[0]
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    applied = [line for line in proc.stderr.splitlines() if line.startswith("harness patch applied:")]
    assert len(applied) == 1 and expected in applied[0], proc.stderr
    # the real methods, run: one softmax per draft step and one in the draft extend, as the pre-#26235 code
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result == {"forward": probe.STEPS - 1, "extend": 1}


def test_a_missing_helper_refuses_where_it_is_called_and_not_where_it_is_never_reached(wheel_root, tmp_path):
    # the worker calls draft_topk1_postprocess under `_is_cuda or _is_hip` but no longer imports it
    def edit(src: str) -> str:
        return _once(src, "    draft_topk1_postprocess,\n", "")

    on_cuda = run_planted(wheel_root, tmp_path / "cuda", edit, "cuda")
    assert on_cuda.returncode == PATCH_FAILURE_EXIT_CODE, on_cuda.stderr[-3000:]
    assert on_cuda.stderr.strip().splitlines()[-1].startswith(
        "harness patch failed: sglang_restore_topk1_softmax: sglang.srt.speculative.eagle_worker_v2 has no attribute "
        "'draft_topk1_postprocess' (expected it imported from sglang.kernels.ops.speculative.topk1)")
    on_cpu = run_planted(wheel_root, tmp_path / "cpu", edit, "cpu")
    assert on_cpu.returncode == 0, on_cpu.stderr[-3000:]
    applied = [line for line in on_cpu.stderr.splitlines() if line.startswith("harness patch applied:")]
    assert len(applied) == 1 and "draft_topk1_postprocess ->" not in applied[0]
    assert "EagleDraftWorker.draft_forward: inline torch.argmax -> softmax + fast_topk" in applied[0]
    assert json.loads(on_cpu.stdout.split("RESULT ", 1)[1]) == {"forward": probe.STEPS - 1, "extend": 1}


def test_no_selection_reached_is_refused_as_nothing_to_restore(wheel_root, tmp_path):
    # ROCm before 0.5.21: draft_forward's helper ran on CUDA only and its pair off ROCm, so a ROCm
    # server selected with softmax already; planted on the real code, ROCm reaches neither
    gate = "                elif self.topk == 1:\n                    if _is_cuda or _is_hip:\n"
    gate_before_0_5_21 = "                elif self.topk == 1 and not _is_hip:\n                    if _is_cuda:\n"
    proc = run_planted(wheel_root, tmp_path, lambda src: _once(src, gate, gate_before_0_5_21), "hip")
    assert proc.returncode == PATCH_FAILURE_EXIT_CODE, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "harness patch failed: sglang_restore_topk1_softmax: sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker."
        "draft_forward: none of its topk==1 selections runs here (draft_topk1_postprocess at line 869, excluded by "
        "_is_hip; inline argmax at line 876, excluded by _is_hip): it selects either without the fast path (nothing "
        "to restore) or in a form the patch does not know (SGLang 0.5.23, pid "), proc.stderr[-3000:]


# ---- MultiLayerEagleWorkerV2 ---------------------------------------------------------------------------


@pytest.mark.slow
def test_multi_layer_worker_has_no_fast_path_to_restore(wheel_root, tmp_path):
    proc = run_snippet("""
        import types
        import sglang.srt.speculative.multi_layer_eagle_worker_v2 as m
        names = set()
        def walk(code):
            names.update(code.co_names)
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    walk(const)
        for cls in (m.MultiLayerEagleDraftWorker, m.MultiLayerEagleWorkerV2):
            for value in vars(cls).values():
                if isinstance(value, types.FunctionType):
                    walk(value.__code__)
        print(sorted(names & {"argmax", "draft_topk1_postprocess", "draft_topk1_argmax_only", "softmax", "fast_topk"}))
    """, patched=False, wheel_root=wheel_root, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['fast_topk', 'softmax']"


def test_patch_refuses_the_multi_layer_worker(wheel_root, tmp_path):
    proc = run_snippet(f"""
        import {sglang_wheel.MULTI_LAYER_MODULE}
        print("multi-layer worker loaded under the baseline's name")
    """, patched=True, wheel_root=wheel_root, cwd=tmp_path)
    assert proc.returncode == PATCH_FAILURE_EXIT_CODE, (proc.returncode, proc.stderr)
    assert "loaded under the baseline's name" not in proc.stdout and "Traceback" not in proc.stderr
    failed = [line for line in proc.stderr.splitlines() if line.startswith("harness patch failed:")]
    assert len(failed) == 1 and proc.stderr.rstrip().endswith(failed[0])
    assert "MultiLayerEagleWorkerV2 (--enable-multi-layer-eagle)" in failed[0]
    assert re.search(r"\(SGLang 0\.5\.23, pid \d+\)$", failed[0]), failed[0]


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    import zipfile

    fake = tmp_path / sglang_wheel.WHEEL_NAME
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("sglang/kernels/ops/speculative/topk1.py", "def draft_topk1_postprocess(): pass\n")
    monkeypatch.setenv(sglang_wheel.WHEEL_ENV, str(fake))
    monkeypatch.setenv(sglang_wheel.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(sglang_wheel.WheelUnavailable, match=rf"sha256 [0-9a-f]{{64}}, expected {sglang_wheel.WHEEL_SHA256}"):
        sglang_wheel.source_root()
    assert not (tmp_path / "cache" / f"sglang-{sglang_wheel.SGLANG_VERSION}-src").exists()
