"""The sgl-kernel CPU stand-ins against the Triton kernels SGLang 0.5.23 runs for the same calls.

sglang_spec_harness/sglang_cpu/stand_ins/sgl_kernel/ops.py replaces the sgl-kernel CPU ops that SGLang's EAGLE
topk 1 path calls on a CPU (no CPU build of sgl-kernel is on PyPI); each must do, element for
element, what SGLang's Triton kernel does for the same call on a GPU. Three child interpreters serve
`sglang` from the wheel (tests/support/sglang_wheel.py) and call SGLang's own wrappers with the same inputs
(tests/support/sglang_cpu_stand_ins_probe.py): as "cpu" the wrappers call the stand-ins; as "cuda" (and
"xpu" for the tree ops, whose CUDA kernel is JIT-compiled CUDA, not Triton) they launch the real
Triton kernels, which TRITON_INTERPRET=1 runs on CPU tensors. Every tensor returned or written must
be equal in dtype, shape and value (the KV cache byte for byte). Each op's result is also held to
what its call site expects, so two equal wrong answers cannot pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT
from sglang_spec_harness.sglang_cpu import STAND_INS_DIR

from support import sglang_wheel
from support import sglang_cpu_stand_ins_probe as probe

torch = pytest.importorskip("torch")

TESTS_DIR = Path(__file__).resolve().parent
CASES = {case["name"]: case for case in probe.make_cases()}


@pytest.fixture(scope="module")
def wheel_root() -> Path:
    return sglang_wheel.source_root_or_skip(need_triton=True)


@pytest.fixture(scope="module")
def results(wheel_root, tmp_path_factory) -> dict[str, dict]:
    """Platform -> the probe's results; the three children run at once."""
    out_dir = tmp_path_factory.mktemp("stand-ins")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join((str(TESTS_DIR), str(HARNESS_SOURCE_ROOT))), PYTHONNOUSERSITE="1",
               TRITON_INTERPRET="1")
    running = {platform: subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "support" / "sglang_cpu_stand_ins_probe.py"), str(wheel_root), platform,
         str(out_dir / f"{platform}.pt")],
        env=env, cwd=out_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for platform in probe.PLATFORMS}
    loaded = {}
    for platform, proc in running.items():
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"probe {platform} exited {proc.returncode}:\n{stderr[-4000:]}"
        loaded[platform] = torch.load(out_dir / f"{platform}.pt", weights_only=False)
    return loaded


def sides(results, name: str) -> tuple[dict, dict]:
    """(the stand-in's outputs, the Triton kernel's) for one case."""
    return results["cpu"]["cases"][name], results[probe.TRITON_PLATFORM[CASES[name]["op"]]]["cases"][name]


def names(op: str) -> list[str]:
    return [name for name, case in CASES.items() if case["op"] == op]


def assert_same(stand_in, kernel, where: str) -> None:
    if isinstance(kernel, torch.Tensor):
        assert isinstance(stand_in, torch.Tensor), where
        assert (stand_in.dtype, tuple(stand_in.shape)) == (kernel.dtype, tuple(kernel.shape)), where
        if not torch.equal(stand_in, kernel):
            differ = (stand_in != kernel).nonzero()
            at = tuple(differ[0].tolist())
            raise AssertionError(f"{where}: {len(differ)} of {kernel.numel()} elements differ, the first at {at}: "
                                 f"stand-in {stand_in[at].item()}, kernel {kernel[at].item()}")
    elif isinstance(kernel, dict):
        assert isinstance(stand_in, dict) and stand_in.keys() == kernel.keys(), where
        for key in kernel:
            assert_same(stand_in[key], kernel[key], f"{where}.{key}")
    elif isinstance(kernel, (list, tuple)):
        assert type(stand_in) is type(kernel) and len(stand_in) == len(kernel), where
        for i, (a, b) in enumerate(zip(stand_in, kernel)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert stand_in == kernel, where


# ---- what ran -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_cpu_branch_called_the_stand_ins_and_the_others_the_triton_kernels(results):
    cpu = results["cpu"]["bindings"]
    assert Path(cpu["sgl_kernel_file"]).is_relative_to(STAND_INS_DIR)
    assert len(cpu["stand_ins"]) == 8 and all(cpu["stand_ins"].values()), cpu["stand_ins"]
    assert all(results["cpu"]["is_cpu"].values())
    for platform in ("cuda", "xpu"):
        bound = results[platform]["bindings"]
        assert set(bound["kernels"].values()) == {"InterpretedFunction"}, bound  # TRITON_INTERPRET=1 took them
        assert not bound["sgl_kernel_imported"] and not any(results[platform]["is_cpu"].values())
    for result in results.values():  # the callers are the wheel's files, not copies
        for module in (sglang_wheel.CACHE_MOVE_MODULE, sglang_wheel.EAGLE_OPS_MODULE, sglang_wheel.CACHE_LOCS_MODULE,
                       sglang_wheel.SPEC_TREE_MODULE, sglang_wheel.ALLOCATION_MODULE):
            assert result["loaded"][module] == "real", (result["platform"], module)


def test_every_op_has_cases_and_both_sides_ran_them(results):
    for op in probe.OPS:
        assert len(names(op)) >= 3, op
    assert results["cpu"]["cases"].keys() == CASES.keys()
    for platform in ("cuda", "xpu"):
        assert set(results[platform]["cases"]) == {n for n, c in CASES.items() if probe.TRITON_PLATFORM[c["op"]] == platform}


# ---- the stand-ins against the kernels -----------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_stand_in_writes_exactly_what_the_triton_kernel_writes(results, name):
    stand_in, kernel = sides(results, name)
    assert_same(stand_in, kernel, name)


# ---- and what their callers expect -----------------------------------------------------------------------


def _rows(case: dict, cols: int) -> torch.Tensor:
    """req_to_token[r, seq_len : seq_len + cols] of each request, concatenated (int64)."""
    table = case["req_to_token"]
    return torch.cat([table[r, s:s + cols] for r, s in zip(case["req_pool_indices"].tolist(), case["seq_lens"].tolist())]).long()


@pytest.mark.parametrize("name", names("copy_all_layer_kv_cache"))
def test_kv_rows_move_as_move_kv_cache_intends(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    cap = out["kv_copy_config"]["num_locs_upper"]
    for key in ("k", "v"):
        for before, after in zip(out["before"][key], out[key]):
            expected = before.clone()
            for start in range(0, len(case["tgt_loc"]), cap):  # each chunk reads all its rows, then writes
                tgt, src = case["tgt_loc"][start:start + cap], case["src_loc"][start:start + cap]
                expected[tgt] = expected[src].clone()
            assert torch.equal(after, expected), (name, key)
            assert not torch.equal(after, before)  # a move happened
    kv = case["kv"]  # one stride per buffer, K layers then V layers: a slot row's bytes
    k_row, v_row = (kv["head_num"] * kv[dim] * kv["dtype"].itemsize for dim in ("head_dim", "v_head_dim"))
    assert out["data_strides"].tolist() == [k_row] * kv["layer_num"] + [v_row] * kv["layer_num"]


@pytest.mark.parametrize("name", names("move_accept_tokens"))
def test_accepted_chain_tokens_stay_where_they_are(results, name):
    # topk 1: the accepted drafts already lead their verify window, so every move is row onto itself
    # (the trailing zeros move the padding slot onto itself)
    out, _ = sides(results, name)
    assert_same(out["k"], out["before"]["k"], name)
    assert_same(out["v"], out["before"]["v"], name)


@pytest.mark.parametrize("name", names("assign_req_to_token_pool"))
def test_new_slots_land_in_req_to_token(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    expected, offset = case["req_to_token"].clone(), 0
    for r, cur, nxt in zip(case["req_pool_indices"].tolist(), case["cur_kv_lens"].tolist(), case["nxt_kv_lens"].tolist()):
        expected[r, cur:nxt] = case["out_cache_loc"][offset:offset + nxt - cur].int()
        offset += nxt - cur
    assert torch.equal(out["req_to_token"], expected) and out["req_to_token"].dtype == torch.int32


@pytest.mark.parametrize("name", names("fill_bonus_tokens"))
def test_bonus_token_is_the_last_accepted_one(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    width = case["accept_index"].shape[1]
    last = [b * width + n - 1 for b, n in enumerate(case["accept_lens"].tolist())]
    assert torch.equal(out["bonus_tokens"], case["predict"][last]) and out["bonus_tokens"].dtype == torch.int32
    assert bool((out["accept_tokens"][case["accept_index"] == -1] == case["predict"][-1]).all())  # the -1 pads


@pytest.mark.parametrize("name", names("fill_accept_out_cache_loc"))
def test_accepted_slots_are_packed_in_order(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    index = case["accept_index"].flatten()
    accepted = case["out_cache_loc"][index[index != -1].long()]
    expected = torch.cat([accepted, torch.zeros(len(index) - len(accepted), dtype=torch.int64)])
    assert torch.equal(out["accept_out_cache_loc"], expected)


@pytest.mark.parametrize("name", names("fill_front_out_cache_loc"))
def test_window_fronts_are_packed_in_order(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    window = case["out_cache_loc"].view(len(case["num_front"]), -1)
    front = torch.cat([window[b, :n] for b, n in enumerate(case["num_front"].tolist())])
    assert torch.equal(out["front_out_cache_loc"], torch.cat([front, torch.zeros(case["size"] - len(front), dtype=torch.int64)]))


@pytest.mark.parametrize("name", names("assign_draft_cache_locs_contiguous"))
def test_draft_slots_follow_each_sequence(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    assert torch.equal(out["out_cache_loc"], _rows(case, case["num_cols"]))


@pytest.mark.parametrize("name", names("assign_extend_cache_locs") + names("assign_extend_cache_locs_uniform"))
def test_verify_slots_follow_each_sequence(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    assert torch.equal(out["out_cache_loc"], _rows(case, case["draft_token_num"])) and out["out_cache_loc"].dtype == torch.int64


@pytest.mark.parametrize("name", names("build_tree_kernel_efficient"))
def test_chain_tree_is_a_chain(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    seq_lens, width = case["seq_lens"], case["steps"] + 1
    bs = len(seq_lens)
    assert torch.equal(torch.stack([out["retrieve_index"], out["retrieve_next_token"], out["retrieve_next_sibling"]]),
                       probe.chain_retrieve(bs, width))
    assert torch.equal(out["positions"], (seq_lens[:, None] + torch.arange(width)).flatten())
    assert torch.equal(out["draft_tokens"], torch.cat([case["bonus_tokens"][:, None].long(), case["draft_tokens"]], 1).flatten())
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    mask = out["tree_mask"]
    if case["tree_mask_mode"] == 1:  # QLEN_ONLY: one width x width block per request
        assert torch.equal(mask[: bs * width * width], causal.repeat(bs, 1).flatten())
        assert bool(mask[bs * width * width:].all())  # a larger preallocated buffer is filled first
    else:  # FULL_MASK: per request, width rows of (its prefix, all True, then the causal block)
        offset = 0
        for s in seq_lens.tolist():
            rows = mask[offset: offset + width * (s + width)].view(width, s + width)
            assert bool(rows[:, :s].all()) and torch.equal(rows[:, s:], causal)
            offset += width * (s + width)
        assert bool(mask[offset:].all())  # the over-sized tail keeps its fill


@pytest.mark.parametrize("name", names("verify_tree_greedy"))
def test_greedy_verify_accepts_the_agreeing_prefix(results, name):
    case, (out, _) = CASES[name], sides(results, name)
    accept_lens, target = case["expected_accept_lens"], case["target_predict"]
    bs, width = target.shape
    assert torch.equal(out["num_correct_drafts"], accept_lens - 1)
    assert torch.equal(out["accept_index"], probe.chain_accept_index(accept_lens, width))
    expected = torch.zeros(bs * width, dtype=torch.int32)
    for b, n in enumerate(accept_lens.tolist()):  # the target's token at each accepted position, bonus included
        expected[b * width: b * width + n] = target[b, :n].int()
    assert torch.equal(out["predict"], expected)


# ---- the overlap scheduler's row gather (SGLang 0.5.13 to 0.5.15.post1 launch it on a CPU) ---------------
# Held against the release's own `_gather_rows_kernel`, run by Triton's interpreter, in
# tests/test_sglang_cpu_releases.py (it needs a prepared release: the 0.5.23 files here do not carry
# it); here against what its caller, `gather_spec_extras`, replaces: one advanced-index gather per buffer.


@pytest.mark.parametrize("has_hidden", [True, False])
def test_gather_rows_is_one_index_gather_per_buffer(has_hidden):
    sys.path.insert(0, str(STAND_INS_DIR))
    try:
        from sgl_kernel.ops import gather_rows_cpu
    finally:
        sys.path.pop(0)
    g = torch.Generator().manual_seed(0)
    sources = [torch.rand(10, 1, generator=g), torch.randint(0, 99, (10, 1), generator=g),
               torch.randint(0, 99, (10,), generator=g, dtype=torch.int32), torch.rand(10, 3, 4, generator=g)]
    idx = torch.tensor([7, 0, 7, 3, 9])
    outputs = [torch.full((5, *s.shape[1:]), -1, dtype=s.dtype) for s in sources]
    widths = [s[0].numel() if s.dim() > 1 else 1 for s in sources]
    fourth = (sources[3], outputs[3], widths[3]) if has_hidden else (idx, idx.clone(), 1)
    gather_rows_cpu(idx, sources[0], outputs[0], widths[0], sources[1], outputs[1], widths[1],
                    sources[2], outputs[2], widths[2], *fourth, has_hidden)
    for source, output in zip(sources[:3], outputs[:3]):
        assert torch.equal(output, source[idx])
    assert torch.equal(outputs[3], sources[3][idx]) if has_hidden else bool((outputs[3] == -1).all())
