"""Child program of tests/test_sglang_cpu_stand_ins.py: the sgl-kernel CPU ops' callers in SGLang 0.5.23.

`python sglang_cpu_stand_ins_probe.py ROOT PLATFORM OUT.pt` serves `sglang` from the extracted wheel
(tests/support/sglang_wheel.py) as PLATFORM and calls SGLang's own wrappers (`*_func`, and the few callers
above them lifted from the wheel) on the cases of `make_cases()`, then saves every tensor each call
returned or wrote:

- "cpu": the wrappers take their CPU branch, which calls the harness's `sgl_kernel` stand-ins
  (sglang_spec_harness/sglang_cpu/stand_ins, put first on sys.path as sglang_spec_harness.sglang_cpu.shims does);
- "cuda": the same wrappers launch SGLang's Triton kernels, which TRITON_INTERPRET=1 runs on CPU
  tensors;
- "xpu": the tree ops only. On CUDA, `build_tree_kernel_efficient_func` and `verify_tree_greedy_func`
  call a JIT-compiled CUDA kernel (sglang/kernels/ops/speculative/tree.py); their Triton kernels are
  what the same wrappers launch on an XPU.

The inputs follow the EAGLE topk 1 call sites in the wheel (named at each case builder): chain
drafts, req_to_token int32, lengths and pool indices int64, verify outputs int32 with -1 padding.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/, for `support`
from support import sglang_wheel

TREE_OPS = ("build_tree_kernel_efficient", "verify_tree_greedy")
OPS = ("copy_all_layer_kv_cache", "move_accept_tokens", "assign_req_to_token_pool", "fill_bonus_tokens",
       "fill_accept_out_cache_loc", "fill_front_out_cache_loc", "assign_draft_cache_locs_contiguous",
       "assign_extend_cache_locs", "assign_extend_cache_locs_uniform", *TREE_OPS)
# The platform whose branch of the same wrapper launches the op's Triton kernel.
TRITON_PLATFORM = {op: "xpu" if op in TREE_OPS else "cuda" for op in OPS}
PLATFORMS = ("cpu", "cuda", "xpu")

VOCAB = 32000
POOL_ROWS = 10  # req_to_token rows (requests)
MAX_CONTEXT = 96  # req_to_token row width
SLOTS = 512  # KV slots; slot 0 is the pool's padding slot, never handed to a request
# (batch size, speculative_num_steps, first accept length - 1): draft_token_num = steps + 1, and the
# rows' accept lengths run through 1..draft_token_num from that offset (max and min for batch 1).
CHAINS = ((1, 3, 3), (1, 2, 0), (4, 3, 0), (3, 1, 0), (6, 5, 2))


# ---- inputs ---------------------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _chain_name(bs: int, steps: int) -> str:
    return f"bs{bs}-steps{steps}"


def _accept_lens(bs: int, steps: int, offset: int) -> torch.Tensor:
    """Accepted tokens per request, bonus included (eagle_utils.eagle_sample: num_correct_drafts + 1)."""
    return ((torch.arange(bs) + offset) % (steps + 1) + 1).to(torch.int32)


def chain_accept_index(accept_lens: torch.Tensor, width: int) -> torch.Tensor:
    """verify_tree_greedy's accept_index for chain drafts: request b's window b*width + 0..n-1, then -1."""
    bs = accept_lens.numel()
    index = torch.full((bs, width), -1, dtype=torch.int32)
    for b, n in enumerate(accept_lens.tolist()):
        index[b, :n] = b * width + torch.arange(n, dtype=torch.int32)
    return index


def _req_table(g: torch.Generator, bs: int, room: int) -> dict:
    """A ReqToTokenPool's table (int32 slots), distinct request rows (int64) and committed lengths
    (int64) that leave `room` columns free in each row; different lengths per request."""
    return {"req_to_token": torch.randint(1, SLOTS, (POOL_ROWS, MAX_CONTEXT), generator=g, dtype=torch.int32),
            "req_pool_indices": torch.randperm(POOL_ROWS, generator=g)[:bs],
            "seq_lens": torch.randint(1, MAX_CONTEXT - room, (bs,), generator=g)}


def _window(g: torch.Generator, n: int) -> torch.Tensor:
    """n distinct allocated KV slots (int64, never the padding slot 0)."""
    return torch.randperm(SLOTS - 1, generator=g)[:n] + 1


def _kv_layout(layers: int, heads: int, head_dim: int, v_head_dim: int, dtype: torch.dtype, size: int) -> dict:
    return {"layer_num": layers, "head_num": heads, "head_dim": head_dim, "v_head_dim": v_head_dim,
            "dtype": dtype, "size": size, "page_size": 1}


def make_cases() -> list[dict]:
    cases: list[dict] = []

    def add(op: str, name: str, **inputs) -> None:
        cases.append({"op": op, "name": f"{op}/{name}", "seed": len(cases), **inputs})

    for i, (bs, steps, offset) in enumerate(CHAINS):
        g, chain = _gen(100 + i), _chain_name(bs, steps)
        width = steps + 1  # draft_token_num == max_tree_depth == accept_index width for topk 1
        accept_lens = _accept_lens(bs, steps, offset)
        accept_index = chain_accept_index(accept_lens, width)
        verify_window = _window(g, bs * width)  # the verify batch's out_cache_loc
        table = _req_table(g, bs, 2 * width)

        # spec_utils.move_accept_tokens_to_target_kvcache: the accepted tokens' KV to the window's front
        add("move_accept_tokens", chain, kv=_kv_layout(2, 2, 16, 16, torch.bfloat16, SLOTS),
            accept_index=accept_index, num_correct_drafts=accept_lens - 1, out_cache_loc=verify_window,
            seq_lens=table["seq_lens"])
        # eagle_worker_common (CPU engine: no fused commit): bonus = accept_tokens[b, accept_lens[b] - 1]
        add("fill_bonus_tokens", chain, predict=torch.randint(0, VOCAB, (bs * width,), generator=g, dtype=torch.int32),
            accept_index=accept_index, accept_lens=accept_lens)
        add("fill_accept_out_cache_loc", chain, accept_index=accept_index, out_cache_loc=verify_window)
        add("fill_front_out_cache_loc", chain, num_front=accept_lens, out_cache_loc=verify_window, size=bs * width)
        # eagle_worker_common.prepare_for_draft: num_steps columns (CPU), num_draft_tokens (a GPU's planned window)
        for cols in sorted({steps, width}):
            add("assign_draft_cache_locs_contiguous", f"{chain}-cols{cols}", **table, topk=1, num_cols=cols)
        # eagle_utils.eagle_prepare_for_verify: draft_token_num slots from seq_lens on
        add("assign_extend_cache_locs", chain, **table, draft_token_num=width)
        add("assign_extend_cache_locs_uniform", chain, **table, draft_token_num=width)
        # eagle_worker_common.build_eagle_verify_input -> eagle_utils.build_tree_kernel_efficient
        for mode in (0, 1):  # TreeMaskMode.FULL_MASK (a GPU's default), QLEN_ONLY (the CPU's)
            for exact_sum in (True, False):  # seq_lens_sum, or the over-sized bs * max_context_len
                if mode == 1 and not exact_sum:
                    continue  # QLEN_ONLY does not read seq_lens_sum
                add("build_tree_kernel_efficient", f"{chain}-mode{mode}{'' if exact_sum else '-oversized'}",
                    bonus_tokens=torch.randint(0, VOCAB, (bs,), generator=g, dtype=torch.int32),
                    draft_tokens=torch.randint(0, VOCAB, (bs, steps), generator=g), seq_lens=table["seq_lens"],
                    steps=steps, tree_mask_mode=mode, exact_sum=exact_sum, tree_mask_buf=None)
        # eagle_utils.eagle_sample: greedy verify of the chain
        candidates = torch.randint(0, VOCAB, (bs, width), generator=g)  # bonus token, then the drafts
        target = torch.randint(0, VOCAB, (bs, width), generator=g)
        for b, n in enumerate(accept_lens.tolist()):
            target[b, : n - 1] = candidates[b, 1:n]  # the target agrees with the first n - 1 drafts
            if n < width:
                target[b, n - 1] = (candidates[b, n] + 1) % VOCAB  # and not with the next one
        add("verify_tree_greedy", chain, candidates=candidates, target_predict=target, steps=steps,
            expected_accept_lens=accept_lens)

    # A preallocated QLEN_ONLY mask (the attention backend's verify_mask buffer, sized for a larger batch).
    g = _gen(300)
    add("build_tree_kernel_efficient", "bs3-steps4-mode1-prealloc",
        bonus_tokens=torch.randint(0, VOCAB, (3,), generator=g, dtype=torch.int32),
        draft_tokens=torch.randint(0, VOCAB, (3, 4), generator=g), seq_lens=torch.tensor([7, 40, 1]),
        steps=4, tree_mask_mode=1, exact_sum=True, tree_mask_buf=torch.zeros(8 * 5 * 5, dtype=torch.bool))

    # accept_index rows that are not a chain prefix (any tree's), -1 padded
    g = _gen(301)
    scattered = torch.full((4, 5), -1, dtype=torch.int32)
    for b, n in enumerate((5, 1, 3, 2)):
        scattered[b, :n] = b * 5 + torch.cat([torch.zeros(1, dtype=torch.long), torch.randperm(4, generator=g)[: n - 1] + 1])
    add("fill_accept_out_cache_loc", "bs4-scattered", accept_index=scattered, out_cache_loc=_window(g, 20))

    # MHATokenToKVPool.move_kv_cache, direct: KV layouts and move lists beyond the chain's identity moves
    def moves(g: torch.Generator, n: int, size: int, shift: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(tgt_loc, src_loc): n distinct targets, each a slot other than its source."""
        slots = torch.randperm(size, generator=g)[: 2 * n] + 1
        if shift:  # each target is another move's source: the copy must read every row before writing
            return torch.roll(slots[:n], -1), slots[:n]
        return slots[n:], slots[:n]

    for name, kv, n, shift in (
        ("bf16-fused-shifted", _kv_layout(2, 2, 16, 16, torch.bfloat16, 64), 9, True),
        ("fp16-v-head-dim-differs", _kv_layout(3, 3, 40, 24, torch.float16, 64), 17, False),
        ("fp8-uint8-one-move", _kv_layout(1, 4, 32, 32, torch.uint8, 64), 1, False),
        ("bf16-chunked-300", _kv_layout(1, 2, 32, 32, torch.bfloat16, 320), 300, True),  # > 256 moves: chunks
        ("fp32-large-rows-chunked", _kv_layout(1, 16, 128, 128, torch.float32, 200), 150, True),  # 8 KiB rows
        ("fp32-medium-rows", _kv_layout(2, 8, 128, 128, torch.float32, 64), 30, False),  # 4 KiB rows
    ):
        g = _gen(400 + len(cases))
        tgt, src = moves(g, n, kv["size"], shift)
        add("copy_all_layer_kv_cache", name, kv=kv, tgt_loc=tgt, src_loc=src)

    # allocation.alloc_for_spec_decode: req_to_token[r, cur:nxt] <- the new slots (0 to > 32 per request)
    for bs, extends in ((1, (5,)), (4, (8, 0, 70, 33)), (7, (1, 2, 0, 31, 32, 40, 6))):
        g = _gen(500 + bs)
        table = _req_table(g, bs, max(extends))
        cur = table["seq_lens"].to(torch.int32)
        nxt = cur + torch.tensor(extends, dtype=torch.int32)
        add("assign_req_to_token_pool", f"bs{bs}", req_to_token=table["req_to_token"],
            req_pool_indices=table["req_pool_indices"], cur_kv_lens=cur, nxt_kv_lens=nxt,
            out_cache_loc=_window(g, sum(extends)))
    return cases


# ---- the callers ------------------------------------------------------------------------------------


class KVPool:
    """The state of an MHATokenToKVPool that its slot moves read (its __init__ allocates through the
    server's memory saver). The methods are the wheel's own, lifted in `load()`."""

    def __init__(self, layer_num, head_num, head_dim, v_head_dim, dtype, size, page_size, seed):
        self.layer_num, self.size, self.page_size, self.device = layer_num, size, page_size, "cpu"
        self.use_hnd = False  # NHD slot rows: the tiled byte copy
        self.use_native_move_kv_cache = False  # SGLANG_NATIVE_MOVE_KV_CACHE's default
        self.native_k_scale_buffer = None
        # as MHATokenToKVPool._create_buffers_normal lays them out: equal K and V shapes are the two
        # halves of one allocation per layer, else one allocation each
        rows = size + page_size
        k_shape, v_shape = (rows, head_num, head_dim), (rows, head_num, v_head_dim)
        if k_shape == v_shape:
            fused = [torch.zeros((2, *k_shape), dtype=dtype) for _ in range(layer_num)]
            self.k_buffer, self.v_buffer = [b[0, :rows] for b in fused], [b[1, :rows] for b in fused]
        else:
            self.k_buffer = [torch.zeros(k_shape, dtype=dtype) for _ in range(layer_num)]
            self.v_buffer = [torch.zeros(v_shape, dtype=dtype) for _ in range(layer_num)]
        g = _gen(seed)
        for buf in self.k_buffer + self.v_buffer:  # random bytes: the copy moves bytes, NaN patterns included
            raw = buf.view(torch.uint8)
            raw.copy_(torch.randint(0, 256, raw.shape, generator=g, dtype=torch.uint8))

    def state(self) -> dict:
        return {"k": [b.view(torch.uint8).clone() for b in self.k_buffer],
                "v": [b.view(torch.uint8).clone() for b in self.v_buffer]}


def load(root: Path, platform: str) -> SimpleNamespace:
    """Import the wheel's callers as PLATFORM and lift the few functions above them."""
    if platform == "cpu":
        from sglang_spec_harness.sglang_cpu import STAND_INS_DIR

        sys.path.insert(0, str(STAND_INS_DIR))  # `from sgl_kernel import ...` -> the stand-ins
    finder = sglang_wheel.install(root, platform=platform)
    import sglang.kernels.ops.kvcache.cache_move as cache_move
    import sglang.kernels.ops.speculative.cache_locs as cache_locs
    import sglang.kernels.ops.speculative.eagle as eagle
    import sglang.kernels.ops.speculative.spec_tree as spec_tree
    import sglang.srt.mem_cache.allocation as allocation
    from sglang.srt.utils import next_power_of_2
    from sglang.srt.utils.async_probe import maybe_detect_oob

    lifted: dict = {"torch": torch, "math": __import__("math"), "next_power_of_2": next_power_of_2,
                    "maybe_detect_oob": maybe_detect_oob, "TreeMaskMode": spec_tree.TreeMaskMode,
                    "build_tree_kernel_efficient_func": spec_tree.build_tree_kernel_efficient_func,
                    "copy_all_layer_kv_cache_func": cache_move.copy_all_layer_kv_cache_func,
                    "fill_front_out_cache_loc_func": cache_locs.fill_front_out_cache_loc_func,
                    "fill_accept_out_cache_loc_func": eagle.fill_accept_out_cache_loc_func}
    src = root / "sglang" / "srt"
    sglang_wheel.lift(src / "mem_cache/memory_pool.py", tuple(f"MHATokenToKVPool.{m}" for m in (
        "_slot_move_pointer_buffers", "_init_data_ptrs_and_strides", "_init_kv_copy_and_warmup", "move_kv_cache",
        "_move_kv_cache_impl", "_move_native_fp4_scales")), lifted)
    for method in ("_slot_move_pointer_buffers", "_init_data_ptrs_and_strides", "_init_kv_copy_and_warmup",
                   "move_kv_cache", "_move_kv_cache_impl", "_move_native_fp4_scales"):
        setattr(KVPool, method, lifted[method])
    sglang_wheel.lift(src / "speculative/eagle_utils.py", ("build_tree_kernel_efficient",), lifted)
    sglang_wheel.lift(src / "speculative/spec_utils.py", ("move_accept_tokens_to_target_kvcache",), lifted)
    return SimpleNamespace(finder=finder, cache_move=cache_move, cache_locs=cache_locs, eagle=eagle,
                           spec_tree=spec_tree, allocation=allocation, lifted=lifted)


def _pool(kv: dict, seed: int) -> KVPool:
    pool = KVPool(**kv, seed=seed)
    pool._init_data_ptrs_and_strides()
    pool._init_kv_copy_and_warmup()  # the tiling config, and the warm-up copy of slot 0 onto itself
    return pool


def run_copy_all_layer_kv_cache(m, case: dict) -> dict:
    pool = _pool(case["kv"], case["seed"])
    before = pool.state()
    pool.move_kv_cache(case["tgt_loc"].clone(), case["src_loc"].clone())
    return {**pool.state(), "before": before, "data_strides": pool.data_strides.clone(),
            "kv_copy_config": dict(pool._kv_copy_config)}


def run_move_accept_tokens(m, case: dict) -> dict:
    pool = _pool(case["kv"], case["seed"])
    before = pool.state()
    batch = SimpleNamespace(seq_lens=case["seq_lens"].clone(), out_cache_loc=case["out_cache_loc"].clone())
    allocator = SimpleNamespace(get_kvcache=lambda: pool)
    m.lifted["move_accept_tokens_to_target_kvcache"](batch, case["accept_index"].clone(),
                                                     case["num_correct_drafts"].clone(), allocator)
    return {**pool.state(), "before": before}


def run_assign_req_to_token_pool(m, case: dict) -> dict:
    req_to_token = case["req_to_token"].clone()
    m.allocation.assign_req_to_token_pool_func(case["req_pool_indices"].clone(), req_to_token,
                                               case["cur_kv_lens"].clone(), case["nxt_kv_lens"].clone(),
                                               case["out_cache_loc"].clone(), len(case["cur_kv_lens"]))
    return {"req_to_token": req_to_token}


def run_fill_bonus_tokens(m, case: dict) -> dict:
    accept_index, accept_lens = case["accept_index"].clone(), case["accept_lens"].clone()
    accept_tokens = case["predict"].clone()[accept_index]  # -1 pads read predict's last token, as in SGLang
    bonus_tokens = torch.empty_like(accept_lens, dtype=torch.int32)
    m.eagle.fill_bonus_tokens_func(accept_tokens, accept_lens, bonus_tokens, accept_index.shape[1], len(accept_lens))
    return {"bonus_tokens": bonus_tokens, "accept_tokens": accept_tokens, "accept_lens": accept_lens}


def run_fill_accept_out_cache_loc(m, case: dict) -> dict:
    accept_index = case["accept_index"].clone()
    size = accept_index.numel()
    out = torch.zeros(size, dtype=torch.int64)
    m.eagle.fill_accept_out_cache_loc_func(accept_index, case["out_cache_loc"].clone(), out, size)
    return {"accept_out_cache_loc": out, "accept_index": accept_index}


def run_fill_front_out_cache_loc(m, case: dict) -> dict:
    num_front = case["num_front"].clone()
    out = torch.zeros(case["size"], dtype=torch.int64)  # bs * accept_index.shape[1], as move_accept_tokens sizes it
    m.cache_locs.fill_front_out_cache_loc_func(num_front, case["out_cache_loc"].clone(), out)
    return {"front_out_cache_loc": out}


def run_assign_draft_cache_locs_contiguous(m, case: dict) -> dict:
    bs = len(case["seq_lens"])
    out = torch.full((bs * case["topk"] * case["num_cols"],), -7, dtype=torch.int64)  # SGLang: torch.empty
    m.cache_locs.assign_draft_cache_locs_contiguous_func(case["req_pool_indices"].clone(), case["req_to_token"].clone(),
                                                         case["seq_lens"].clone(), out, case["topk"], case["num_cols"])
    return {"out_cache_loc": out}


def run_assign_extend_cache_locs(m, case: dict) -> dict:
    seq_lens, bs = case["seq_lens"].clone(), len(case["seq_lens"])
    out = m.cache_locs.assign_extend_cache_locs_func(case["req_pool_indices"].clone(), case["req_to_token"].clone(),
                                                     seq_lens, seq_lens + case["draft_token_num"], bs,
                                                     case["draft_token_num"], "cpu")
    return {"out_cache_loc": out}


def run_assign_extend_cache_locs_uniform(m, case: dict) -> dict:
    out = m.cache_locs.assign_extend_cache_locs_uniform_func(
        req_pool_indices=case["req_pool_indices"].clone(), req_to_token=case["req_to_token"].clone(),
        start_offset=case["seq_lens"].clone(), batch_size=len(case["seq_lens"]),
        draft_token_num=case["draft_token_num"], device="cpu")
    return {"out_cache_loc": out}


def topk1_chain_topology(bs: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """draft_forward's (parent_list, top_scores_index) for topk 1: EagleDraftWorkerBase.
    _rebuild_topk1_chain_buffers' preallocated rows (for a larger max batch), sliced to the batch."""
    max_bs = bs + 3
    parent_width = steps if steps > 1 else 0
    parents = torch.arange(-1, parent_width - 1, dtype=torch.long).repeat(max_bs, 1)
    scores = torch.arange(steps, dtype=torch.long).repeat(max_bs, 1)
    return parents[:bs], scores[:bs]


def run_build_tree_kernel_efficient(m, case: dict) -> dict:
    seq_lens, steps = case["seq_lens"].clone(), case["steps"]
    bs = len(seq_lens)
    parent_list, top_scores_index = topk1_chain_topology(bs, steps)
    seq_lens_sum = int(seq_lens.sum()) if case["exact_sum"] else bs * MAX_CONTEXT
    buf = case["tree_mask_buf"]
    out = m.lifted["build_tree_kernel_efficient"](
        case["bonus_tokens"].clone(), parent_list, top_scores_index, case["draft_tokens"].clone(), seq_lens,
        seq_lens_sum, 1, steps, steps + 1, m.spec_tree.TreeMaskMode(case["tree_mask_mode"]),
        None if buf is None else buf.clone())
    names = ("tree_mask", "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling", "draft_tokens")
    return dict(zip(names, out))


def chain_retrieve(bs: int, width: int) -> torch.Tensor:
    """build_tree_kernel_efficient's (3, bs, width) retrieve buffer for chain drafts (index, next
    token, next sibling); the test holds the built one to this."""
    index = torch.arange(bs * width).view(bs, width)
    next_token = torch.arange(1, width + 1).repeat(bs, 1)
    next_token[:, -1] = -1
    return torch.stack([index, next_token, torch.full((bs, width), -1)])


def run_verify_tree_greedy(m, case: dict) -> dict:
    candidates, target = case["candidates"].clone(), case["target_predict"].clone()
    bs, width = candidates.shape
    retrieve_index, retrieve_next_token, retrieve_next_sibling = chain_retrieve(bs, width)
    # as eagle_utils.eagle_sample allocates them (max_tree_depth = spec_steps + 1)
    predict = torch.zeros(bs * width, dtype=torch.int32)
    accept_index = torch.full((bs, case["steps"] + 1), -1, dtype=torch.int32)
    num_correct_drafts = torch.full((bs,), -7, dtype=torch.int32)  # SGLang: torch.empty
    returned = m.spec_tree.verify_tree_greedy_func(
        predicts=predict, accept_index=accept_index, accept_token_num=num_correct_drafts, candidates=candidates,
        retrieve_index=retrieve_index, retrieve_next_token=retrieve_next_token,
        retrieve_next_sibling=retrieve_next_sibling, target_predict=target, topk=1)
    assert returned[0] is predict and returned[1] is accept_index and returned[2] is num_correct_drafts
    return {"predict": predict, "accept_index": accept_index, "num_correct_drafts": num_correct_drafts}


RUNNERS = {op: globals()[f"run_{op}"] for op in OPS}


def bindings(m, platform: str) -> dict:
    """Which implementation each wrapper's module bound: the stand-ins (cpu) or Triton kernels run
    by the interpreter (elsewhere)."""
    if platform == "cpu":
        import sgl_kernel
        from sgl_kernel import ops

        bound = {"cache_move.copy_all_layer_kv_cache_cpu": m.cache_move.copy_all_layer_kv_cache_cpu,
                 "allocation.assign_req_to_token_pool_cpu": m.allocation.assign_req_to_token_pool_cpu,
                 "eagle.fill_bonus_tokens_cpu": m.eagle.fill_bonus_tokens_cpu,
                 "eagle.fill_accept_out_cache_loc_cpu": m.eagle.fill_accept_out_cache_loc_cpu,
                 "cache_locs.assign_draft_cache_locs_contiguous_cpu": m.cache_locs.assign_draft_cache_locs_contiguous_cpu,
                 "cache_locs.assign_extend_cache_locs_cpu": m.cache_locs.assign_extend_cache_locs_cpu,
                 "spec_tree.sgl_build_tree_kernel_efficient_cpu": m.spec_tree.sgl_build_tree_kernel_efficient_cpu,
                 "spec_tree.sgl_verify_tree_greedy_cpu": m.spec_tree.sgl_verify_tree_greedy_cpu}
        return {"sgl_kernel_file": sgl_kernel.__file__,
                "stand_ins": {k: f.__module__ == ops.__name__ and getattr(ops, f.__name__) is f for k, f in bound.items()}}
    kernels = {"cache_move.copy_all_layer_kv_cache_tiled": m.cache_move.copy_all_layer_kv_cache_tiled,
               "allocation.assign_req_to_token_pool": m.allocation.assign_req_to_token_pool,
               "eagle.fill_bonus_tokens": m.eagle.fill_bonus_tokens,
               "eagle.fill_accept_out_cache_loc": m.eagle.fill_accept_out_cache_loc,
               "cache_locs.assign_draft_cache_locs_contiguous": m.cache_locs.assign_draft_cache_locs_contiguous,
               "cache_locs.assign_extend_cache_locs": m.cache_locs.assign_extend_cache_locs,
               "cache_locs.assign_extend_cache_locs_uniform": m.cache_locs.assign_extend_cache_locs_uniform,
               "spec_tree.sgl_build_tree_kernel_efficient_triton": m.spec_tree.sgl_build_tree_kernel_efficient_triton,
               "spec_tree.verify_tree_greedy_kernel_triton": m.spec_tree.verify_tree_greedy_kernel_triton}
    return {"kernels": {k: type(f).__name__ for k, f in kernels.items()},
            "sgl_kernel_imported": "sgl_kernel" in sys.modules}


def main() -> int:
    root, platform, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    m = load(root, platform)
    results: dict = {"platform": platform, "cases": {}}
    for case in make_cases():
        if platform == "cpu" or TRITON_PLATFORM[case["op"]] == platform:
            results["cases"][case["name"]] = RUNNERS[case["op"]](m, case)
    results["bindings"] = bindings(m, platform)
    results["is_cpu"] = {name: getattr(m, name)._is_cpu for name in ("cache_move", "allocation", "eagle", "cache_locs",
                                                                      "spec_tree")}
    results["loaded"] = dict(m.finder.loaded)
    torch.save(results, out)
    print(json.dumps({"ok": True, "platform": platform, "cases": len(results["cases"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
