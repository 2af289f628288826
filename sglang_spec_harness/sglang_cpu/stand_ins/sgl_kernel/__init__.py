"""Stand-in for sgl-kernel's CPU build, for SGLang 0.5.23's CPU engine (sglang_spec_harness.sglang_cpu only).

No CPU build of sgl-kernel is on PyPI (the `sglang-kernel` wheel is CUDA only). The ops SGLang's
EAGLE topk 1 path calls on a CPU are written in torch: `ops` (KV-cache moves, cache locations, the
tree and greedy verify, each mirroring the Triton kernel of the same name that SGLang runs on a
GPU) and `attention` (the `intel_amx` backend's decode and extend attention, fused SDPA).

Any other name resolves to a function that raises when called, naming the op: SGLang imports
many names at module level that this path never calls. Slow (Python loops); for tiny models.
"""

from __future__ import annotations

from typing import Any, NoReturn
from collections.abc import Callable

from .attention import build_draft_decode_metadata_cpu, register_attention_ops
from .ops import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    build_tree_kernel_efficient_cpu,
    copy_all_layer_kv_cache_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    gather_rows_cpu,
    verify_tree_greedy_cpu,
)

__version__ = "0.0.0+harness.stand-in"

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu", "assign_extend_cache_locs_cpu", "assign_req_to_token_pool_cpu",
    "build_draft_decode_metadata_cpu", "build_tree_kernel_efficient_cpu", "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu", "fill_bonus_tokens_cpu", "gather_rows_cpu", "verify_tree_greedy_cpu",
]

register_attention_ops()  # torch.ops.sgl_kernel.{decode,extend}_attention_cpu


def __getattr__(name: str) -> Callable[..., NoReturn]:
    if name.startswith("__"):
        raise AttributeError(name)

    def not_implemented(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"sgl_kernel stand-in (sglang_spec_harness.sglang_cpu): op {name!r} is not implemented; "
                                  "only SGLang's EAGLE topk 1 CPU path is")

    not_implemented.__name__ = name
    return not_implemented
