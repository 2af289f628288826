"""Child program of tests/test_sglang_real_wheel.py: SGLang 0.5.23's real draft code on CPU.

`python sglang_wheel_probe.py ROOT PLATFORM OUT.pt` serves `sglang` from the extracted wheel
(tests/support/sglang_wheel.py), imports the real worker module (through the harness patch when the
bootstrap installed it, as in a server process), drives the real `EagleDraftWorker.draft_forward`
and `_draft_extend_for_decode` over the cases of `make_cases()`, and saves what they returned,
their side effects and the softmax calls they made. Run with TRITON_INTERPRET=1: the real Triton
kernels then run on CPU tensors.

Only the model is replaced: `FakeDraftRunner.forward` returns the case's logits for each step
(the draft model cannot run here); everything that selects tokens is SGLang's code or the patch's.
"""

from __future__ import annotations

import contextlib
import dis
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/, for `support`
from support import sglang_wheel

BLOCK = 8192  # the kernels' split width (_DRAFT_TOPK1_BLOCK): the vocabulary spans 4 splits, the last partial
VOCAB = 3 * BLOCK + 1000
BATCH = 4
STEPS = 3  # draft steps: draft_forward selects STEPS - 1 times
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _ulp_below(value: torch.Tensor) -> torch.Tensor:
    """The next representable value below, in the tensor's own dtype."""
    return torch.nextafter(value, torch.full_like(value, -float("inf")))


def logits(kind: str, dtype: torch.dtype, rows: int, seed: int) -> torch.Tensor:
    """Seeded logits of one kind (the same in every process).

    random: N(0, 3). exact_tie: the maximum appears twice (tie-break: lowest index in both paths).
    near_tie: the best logit one ulp (of its dtype) above the runner-up, at magnitudes 2..30, where
    softmax resolves the gap. The winners sit in every split of the vocabulary, tail included.
    """
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, VOCAB, generator=g) * 3).to(dtype)
    if kind == "random":
        return x
    winners = torch.randint(0, VOCAB, (rows,), generator=g)
    winners[: min(rows, 4)] = torch.tensor([5, BLOCK + 7, 2 * BLOCK + 11, VOCAB - 3])[: min(rows, 4)]
    others = (winners + 1 + torch.randint(0, VOCAB - 1, (rows,), generator=g)) % VOCAB
    row = torch.arange(rows)
    if kind == "exact_tie":
        top = x.max(dim=-1).values + 1
        x[row, winners] = top
        x[row, others] = top
        return x
    if kind == "near_tie":
        magnitude = torch.tensor([2.0, 5.0, 11.0, 30.0]).repeat(rows // 4 + 1)[:rows].to(dtype)
        x = x.clamp(max=-1.0)  # below both contenders
        x[row, winners] = magnitude
        x[row, others] = _ulp_below(magnitude)
        return x
    raise ValueError(kind)


def make_cases() -> list[dict]:
    cases = []
    seed = 0
    for dtype_name, dtype in DTYPES.items():
        for kind in ("random", "near_tie", "exact_tie"):
            seed += 1
            cases.append({
                "name": f"{kind}-{dtype_name}",
                # draft_forward: the draft model's logits for steps 1..STEPS-1
                "step_logits": [logits(kind, dtype, BATCH, 100 * seed + i) for i in range(STEPS - 1)],
                # _draft_extend_for_decode: one row per draft token, of which select_index picks one per request
                "extend_logits": logits(kind, dtype, BATCH * (STEPS + 1), 100 * seed + 50),
                "select_index": torch.arange(BATCH) * (STEPS + 1) + torch.tensor([0, 3, 1, 2]),
            })
    return cases


class FakeDraftRunner:
    """The draft model: returns the case's logits, one tensor per forward (nothing else is modelled)."""

    def __init__(self, outputs: list[torch.Tensor]):
        self.outputs = list(outputs)
        self.canary_manager = None
        self.model_config = SimpleNamespace(hf_config=SimpleNamespace(architectures=["LlamaForCausalLMEagle3"]),
                                            model_is_mrope=False)

    def forward(self, forward_batch):
        logits = self.outputs.pop(0)
        return SimpleNamespace(logits_output=SimpleNamespace(
            next_token_logits=logits, hidden_states=torch.zeros(logits.shape[0], 8)))


def make_worker(module, runner: FakeDraftRunner):
    """An EagleDraftWorker with the attributes the two methods read (its __init__ loads models)."""
    worker = object.__new__(module.EagleDraftWorker)
    worker.topk = 1
    worker.speculative_num_steps = STEPS
    worker.speculative_num_draft_tokens = STEPS + 1
    worker.hot_token_id = None
    worker.index_share_for_mtp_iteration = False
    worker.seed_dsa_topk_from_draft_extend = False
    worker.draft_runner = runner
    worker.draft_attn_backend = SimpleNamespace(attn_backends=[None] * STEPS)
    # as EagleDraftWorker.__init__ builds them for chain (topk 1) drafting
    worker._topk1_parents_prealloc = torch.arange(-1, STEPS - 1).repeat(16, 1)
    worker._topk1_score_indices_prealloc = torch.arange(STEPS).repeat(16, 1)
    worker.plan_stream = None
    worker.plan_stream_ctx = contextlib.nullcontext()
    worker.cuda_graph_runner_for_draft_extend = None
    worker.device = "cpu"
    return worker


def softmax_calls(fn):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, sum(e.count for e in prof.key_averages() if e.key == "aten::_softmax")


def run_draft_forward(module, case: dict) -> dict:
    runner = FakeDraftRunner(case["step_logits"])
    worker = make_worker(module, runner)
    first = torch.tensor([[11], [12], [13], [14]])
    positions = torch.arange(BATCH, dtype=torch.long) + 100
    batch = SimpleNamespace(
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        spec_info=SimpleNamespace(topk_p=torch.ones(BATCH, 1), topk_index=first, hidden_states=torch.zeros(BATCH, 8),
                                  draft_probs=None),
        out_cache_loc=torch.arange(BATCH * STEPS), batch_size=BATCH, positions=positions,
        sampling_info=SimpleNamespace(is_all_greedy=True), mrope_positions=None, input_ids=None,
        moe_num_token_non_padded=None,
    )
    (parents, score_index, draft_tokens, draft_probs), calls = softmax_calls(lambda: worker.draft_forward(batch))
    return {"parents": parents.clone(), "score_index": score_index.clone(), "draft_tokens": draft_tokens.clone(),
            "draft_probs": draft_probs, "positions": positions.clone(), "softmax_calls": calls}


def run_draft_extend_for_decode(module, case: dict) -> dict:
    runner = FakeDraftRunner([case["extend_logits"]])
    worker = make_worker(module, runner)
    next_input = SimpleNamespace()
    batch_result = SimpleNamespace(
        prepared_draft_extend_inputs=(torch.zeros(BATCH, dtype=torch.long), case["select_index"],
                                      torch.zeros(BATCH, dtype=torch.long)),
        logits_output=SimpleNamespace(hidden_states=None), accept_lens=torch.ones(BATCH, dtype=torch.long),
        next_draft_input=next_input,
    )
    batch = SimpleNamespace(sampling_info=None)
    _, calls = softmax_calls(lambda: worker._draft_extend_for_decode(batch, batch_result))
    return {"topk_p": next_input.topk_p, "topk_index": next_input.topk_index, "softmax_calls": calls,
            "cuda_graph_compatible": next_input.cuda_graph_compatible}


def contract_cases(worker_module, topk1) -> dict:
    """The rebound helpers against the real kernels, called directly with the same inputs (only
    where the patch is applied): returns both sides' outputs and side effects."""
    out: dict = {}
    seed = 1000
    for dtype_name, dtype in DTYPES.items():
        for kind in ("random", "near_tie", "exact_tie"):
            seed += 1
            x = logits(kind, dtype, BATCH, seed)
            sides = {}
            for side, module in (("real", topk1), ("patched", worker_module)):
                positions = torch.arange(BATCH, dtype=torch.long) * 10
                tokens = torch.full((BATCH, STEPS + 1), -1, dtype=torch.long)
                p, i = module.draft_topk1_postprocess(x, positions, tokens, 2)
                bare_positions = torch.zeros(BATCH, dtype=torch.long)
                bare_p, bare_i = module.draft_topk1_postprocess(x, bare_positions)  # the default arguments
                only_p, only_i = module.draft_topk1_argmax_only(x)
                sides[side] = {"topk_p": p, "topk_index": i, "positions": positions, "draft_tokens": tokens,
                               "bare_topk_p": bare_p, "bare_topk_index": bare_i, "bare_positions": bare_positions,
                               "only_topk_p": only_p, "only_topk_index": only_i}
            out[f"{kind}-{dtype_name}"] = {"logits": x, **sides}
    # Rows the two selections treat differently by design (see the patch's docstring).
    special = torch.randn(6, VOCAB, generator=torch.Generator().manual_seed(7))
    special[0, BLOCK + 5] = float("nan")       # one NaN in a finite row
    special[1] = float("nan")                  # all NaN
    special[2, 2 * BLOCK + 9] = float("inf")   # one +inf
    special[3] = -float("inf")                 # all -inf
    special[4, 17] = -float("inf")             # a -inf in a finite row (no difference expected)
    # special[5]: an ordinary row
    rows = 16
    magnitude = torch.full((rows,), 0.5)
    below = logits("random", torch.float32, rows, 8).clamp(max=-1.0)
    winners = torch.randint(0, VOCAB, (rows,), generator=torch.Generator().manual_seed(9))
    runners_up = (winners + 1 + torch.randint(0, VOCAB - 1, (rows,), generator=torch.Generator().manual_seed(10))) % VOCAB
    below[torch.arange(rows), winners] = magnitude
    below[torch.arange(rows), runners_up] = _ulp_below(magnitude)
    for name, x in (("special_rows", special), ("sub_resolution_ties", below)):
        out[name] = {"logits": x}
        for side, module in (("real", topk1), ("patched", worker_module)):
            p, i = module.draft_topk1_argmax_only(x)
            out[name][side] = {"topk_p": p, "topk_index": i}
    return out


def instruction_lines(func) -> dict[str, list[int]]:
    """Name -> source lines of the instructions that load it (globals, attributes, methods)."""
    lines: dict[str, list[int]] = {}
    for ins in dis.get_instructions(func):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD") and ins.positions and ins.positions.lineno:
            lines.setdefault(str(ins.argval), []).append(ins.positions.lineno)
    return lines


def all_lines(func) -> list[int]:
    return sorted({line for _, _, line in func.__code__.co_lines() if line is not None})


def main() -> int:
    root, platform, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    finder = sglang_wheel.install(root, platform=platform)
    import sglang.kernels.ops.speculative.topk1 as topk1
    import sglang.srt.speculative.eagle_worker_v2 as worker_module
    import sglang.srt.speculative.standalone_worker_v2 as standalone

    method = worker_module.EagleDraftWorker._draft_extend_for_decode
    marker = getattr(method, "__harness_patch__", None)
    original = marker["replaces"] if marker else method
    results = {
        "platform": platform,
        "pid": os.getpid(),
        "is_cuda": worker_module._is_cuda, "is_hip": worker_module._is_hip,
        "applied_env": os.environ.get("HARNESS_PATCHES_APPLIED"),
        "postprocess_is_real": worker_module.draft_topk1_postprocess is topk1.draft_topk1_postprocess,
        "argmax_only_is_real": worker_module.draft_topk1_argmax_only is topk1.draft_topk1_argmax_only,
        "method_patched": marker is not None,
        # draft_forward is recompiled only where its inline (CPU) argmax is reached
        "forward_patched": getattr(worker_module.EagleDraftWorker.draft_forward, "__harness_patch__", None) is not None,
        "standalone_shares_method": standalone.StandaloneDraftWorker._draft_extend_for_decode is method,
        "method_file": method.__code__.co_filename, "original_file": original.__code__.co_filename,
        "method_firstlineno": method.__code__.co_firstlineno, "original_firstlineno": original.__code__.co_firstlineno,
        "method_lines": all_lines(method), "original_lines": all_lines(original),
        "method_names": instruction_lines(method),
        "loaded": finder.loaded,
        "cases": {},
    }
    if getattr(worker_module, "__harness_patch__", None):  # the patch applied (the module's marker)
        results["contract"] = contract_cases(worker_module, topk1)
    for case in make_cases():
        results["cases"][case["name"]] = {
            "draft_forward": run_draft_forward(worker_module, case),
            "draft_extend_for_decode": run_draft_extend_for_decode(worker_module, case),
        }
    torch.save(results, out)
    print(json.dumps({"ok": True, "cases": len(results["cases"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
