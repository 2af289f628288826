"""Planted bugs in SGLang 0.5.23's EAGLE path on a CPU: the mutation suite (benchmarks/mutations.py).

Each mutation is a class of bug that speculative decoding really has, planted where SGLang's CPU
engine would have it: the attention metadata the intel_amx backend builds, the EAGLE worker's draft
loop, the scheduler's commit of a verified run, the verify's sampled tokens. A scenario plants one
in a variant by naming this module in its `patches:` and the mutation in the variant's environment:

    patches: [sglang_spec_harness.sglang_cpu.shims, sglang_spec_harness.patches.sglang_mutations]
    env: {HARNESS_MUTATION: verify_prefix_short_1}

(scenarios/sglang_cpu_mutations.yaml). The harness's exact rules must then FAIL: greedy outputs
(a target-side bug changes what is committed), accept length (a draft-side bug changes only how
many draft tokens the target accepts: verification keeps the outputs right), or output validity
(a token id outside the vocabulary). `MUTATIONS` says which rule each one is expected to trip.

Every mutation wraps or recompiles one SGLang function when its module is imported, in every server
process that imports it (the bootstrap imports this module where $HARNESS_PATCHES names it), and prints `harness patch applied: sglang_mutations: NAME: ...`. A name that is not
in `MUTATIONS`, or SGLang code that does not have the expected shape, ends the process with one line
and exit status 70 (as the baseline patch does): a mutation that silently did not apply would score
as missed, or worse, as caught by noise.

Standard library only at import time: this module runs in SGLang's interpreter.
"""

from __future__ import annotations

import __future__
import ast
import inspect
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_spec_harness.patches.import_hooks import after_import

PATCH_NAME = "sglang_mutations"
MUTATION_ENV = "HARNESS_MUTATION"
APPLIED_ENV = "HARNESS_PATCHES_APPLIED"
PATCH_FAILURE_EXIT_CODE = 70
MARKER = "__harness_mutation__"

ATTENTION = "sglang.srt.layers.attention.intel_amx_backend"
WORKER = "sglang.srt.speculative.eagle_worker_v2"
VERIFY = "sglang.srt.speculative.eagle_worker_common"
COMMIT = "sglang.srt.managers.scheduler_components.batch_result_processor"
NUM_DRAFT_TOKENS = 6  # the scenarios' --speculative-num-draft-tokens: "by the number of draft tokens"
PADDING_SPAN = 64  # ids from the top of the lm_head's rows, where a padded vocabulary keeps its padding


class MutationError(RuntimeError):
    """The SGLang code does not have the shape a mutation plants its bug in."""


@dataclass(frozen=True)
class Mutation:
    name: str
    bug_class: str  # the kind of bug (benchmarks/README.md groups the suite by it)
    what: str  # the planted bug, in words
    expected_rule: str  # the rule kind expected to FAIL: output_identity, accept_length, output_validity
    module: str  # the SGLang module it patches
    plant: Callable[[types.ModuleType], str]  # plants it; returns what it replaced


def _replace(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]], where: str) -> str:
    original = owner.__dict__.get(name)
    if not callable(original):
        raise MutationError(f"{where}: no function {name!r}")
    replacement = make(original)
    replacement.__name__ = original.__name__
    replacement.__qualname__ = getattr(original, "__qualname__", name)
    setattr(replacement, MARKER, original)
    setattr(owner, name, replacement)
    return f"{where}.{name}"


def _class(module: types.ModuleType, name: str) -> type:
    cls = module.__dict__.get(name)
    if not isinstance(cls, type):
        raise MutationError(f"{module.__name__} has no class {name!r}")
    return cls


# ---- attention over the wrong prefix ----------------------------------------------------------------


def _verify_prefix(delta: int) -> Callable[[types.ModuleType], str]:
    """TARGET_VERIFY's attention sees `delta` more (or fewer) committed tokens than the request holds."""

    def plant(module: types.ModuleType) -> str:
        cls = _class(module, "IntelAMXAttnBackend")

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def _build_extend_metadata(self, forward_batch):
                seq_lens, extend_seq_lens, extend_start_loc, tree_mask = original(self, forward_batch)
                if forward_batch.forward_mode.is_target_verify():
                    seq_lens = seq_lens + delta
                return seq_lens, extend_seq_lens, extend_start_loc, tree_mask

            return _build_extend_metadata

        return _replace(cls, "_build_extend_metadata", make, f"{module.__name__}.IntelAMXAttnBackend")

    return plant


def _draft_prefix(delta: int) -> Callable[[types.ModuleType], str]:
    """Every draft step's attention sees `delta` more (or fewer) tokens than prefix + steps so far."""

    def plant(module: types.ModuleType) -> str:
        cls = _class(module, "IntelAMXMultiStepDraftBackend")

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def init_forward_metadata(self, forward_batch):
                original(self, forward_batch)
                for backend in self.attn_backends:
                    req_to_token, seq_lens, req_pool_indices = backend.draft_decode_metadata
                    backend.draft_decode_metadata = (req_to_token, seq_lens + delta, req_pool_indices)

            return init_forward_metadata

        return _replace(cls, "init_forward_metadata", make, f"{module.__name__}.IntelAMXMultiStepDraftBackend")

    return plant


# ---- the draft loop ----------------------------------------------------------------------------------


def _wrap_draft_forward(around: Callable[[Any, Any, Callable[..., Any]], Any]) -> Callable[[types.ModuleType], str]:
    """Plants `around(worker, forward_batch, original)` in place of EagleDraftWorker.draft_forward."""

    def plant(module: types.ModuleType) -> str:
        cls = _class(module, "EagleDraftWorker")

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def draft_forward(self, forward_batch):
                if forward_batch.forward_mode.is_idle():
                    return original(self, forward_batch)
                return around(self, forward_batch, original)

            return draft_forward

        return _replace(cls, "draft_forward", make, f"{module.__name__}.EagleDraftWorker")

    return plant


def _with_draft_runner(worker: Any, forward_batch: Any, original: Callable[..., Any],
                       wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Any:
    """Runs draft_forward with the draft model runner's forward wrapped, for this call only."""
    runner = worker.draft_runner
    runner.forward = wrap(runner.forward)  # an instance attribute shadows the method
    try:
        return original(worker, forward_batch)
    finally:
        del runner.forward


def _positions_off(delta: int) -> Callable[[Any, Any, Callable[..., Any]], Any]:
    def around(worker, forward_batch, original):
        forward_batch.positions.add_(delta)
        return original(worker, forward_batch)

    return around


def _stale_hidden(worker, forward_batch, original):
    first = forward_batch.spec_info.hidden_states  # the draft extend's, right for step 0 only

    def wrap(forward):
        def stale(batch, *args, **kwargs):
            batch.spec_info.hidden_states = first
            return forward(batch, *args, **kwargs)

        return stale

    return _with_draft_runner(worker, forward_batch, original, wrap)


def _other_request_row(worker, forward_batch, original):
    def wrap(forward):
        def shifted(batch, *args, **kwargs):
            result = forward(batch, *args, **kwargs)
            logits = result.logits_output
            logits.next_token_logits = logits.next_token_logits.roll(1, dims=0)
            return result

        return shifted

    return _with_draft_runner(worker, forward_batch, original, wrap)


def _recompile(module: types.ModuleType, cls: type, name: str, transform: Callable[[ast.FunctionDef], int]) -> str:
    """The method recompiled from its own source after `transform` edited its tree (it returns how
    many nodes it changed; exactly one is expected)."""
    func = cls.__dict__.get(name)
    where = f"{module.__name__}.{cls.__name__}.{name}"
    if not isinstance(func, types.FunctionType) or func.__code__.co_freevars:
        raise MutationError(f"{where}: not a plain method")
    tree = ast.parse("class _HarnessHost:\n" + inspect.getsource(func))
    func_def = tree.body[0].body[0]  # type: ignore[attr-defined]
    changed = transform(func_def)
    if changed != 1:
        raise MutationError(f"{where}: expected one site to change, found {changed}")
    compiled = ast.Module(body=[func_def], type_ignores=[])
    ast.increment_lineno(compiled, func.__code__.co_firstlineno - 2)
    ast.fix_missing_locations(compiled)
    namespace: dict[str, Any] = {}
    exec(compile(compiled, func.__code__.co_filename, "exec", flags=__future__.annotations.compiler_flag,
                 dont_inherit=True), module.__dict__, namespace)
    new = namespace[name]
    new.__qualname__ = func.__qualname__
    setattr(new, MARKER, func)
    setattr(cls, name, new)
    return where


def _previous_position_row(module: types.ModuleType) -> str:
    """The draft extend picks each request's logits row at accept_lens - 2 instead of - 1 (the
    position before the last accepted one): the off-by-one in `select_index` on the CPU path."""

    def transform(func_def: ast.FunctionDef) -> int:
        changed = 0
        for node in ast.walk(func_def):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "select_index" and isinstance(node.value, ast.BinOp)
                    and isinstance(node.value.op, ast.Sub) and isinstance(node.value.right, ast.Constant)
                    and node.value.right.value == 1 and "accept_lens" in ast.dump(node.value.left)):
                node.value.right = ast.copy_location(ast.Constant(2), node.value.right)
                changed += 1
        return changed

    return _recompile(module, _class(module, "EagleDraftWorker"), "_draft_extend_for_decode", transform)


# ---- the verified run --------------------------------------------------------------------------------


def _committed_runs(change: Callable[[list[int], int, list[int], int, int, Any], list[int]]) -> Callable[[types.ModuleType], str]:
    """Plants `change(run, i, row_ids, accept_len, stride, batch)` on each request's committed run,
    where the scheduler resolves a verify's tokens (after its KV bookkeeping: the server keeps going)."""

    def plant(module: types.ModuleType) -> str:
        cls = _class(module, "SchedulerBatchResultProcessor")
        stride_of = module.__dict__.get("_get_speculative_output_stride")
        if not callable(stride_of):
            raise MutationError(f"{module.__name__} has no _get_speculative_output_stride")

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def _resolve_spec_v2_tokens(self, result, batch):
                runs = original(self, result, batch)
                ids, lens, stride = result.next_token_ids.tolist(), result.accept_lens.tolist(), stride_of(result)
                return [change(list(run), i, ids, lens[i], stride, batch) if not (req.finished() or req.is_retracted)
                        else run for i, (run, req) in enumerate(zip(runs, batch.reqs))]

            return _resolve_spec_v2_tokens

        return _replace(cls, "_resolve_spec_v2_tokens", make, f"{module.__name__}.SchedulerBatchResultProcessor")

    return plant


def _one_too_many(run, i, ids, accept_len, stride, batch):
    # the slice's end one past the accepted length: the next cell of the padded row comes along
    cell = i * stride + accept_len
    return run + [ids[cell] if cell < len(ids) else ids[-1]]


def _one_too_few(run, i, ids, accept_len, stride, batch):
    return run[:-1]


def _vocab_size_id(run, i, ids, accept_len, stride, batch):
    # a cycle that accepted no draft token reports the vocabulary size (a kernel's "none" sentinel)
    if accept_len == 1:
        run[-1] = batch.model_config.vocab_size
    return run


def _padding_id(module: types.ModuleType) -> str:
    """The verify's bonus token, in a cycle that accepted no draft token, becomes an id from the top
    of the lm_head's rows (where a padded vocabulary keeps its padding), as when padded logits are not
    masked: the target is then fed that id, as SGLang would feed it."""
    sample = module.__dict__.get("eagle_sample")
    if not callable(sample):
        raise MutationError(f"{module.__name__} has no eagle_sample (the verify's sampling)")

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def eagle_sample(verify_input, batch, logits_output, *args, **kwargs):
            predict, accept_lens, accept_index = original(verify_input, batch, logits_output, *args, **kwargs)
            vocab = logits_output.next_token_logits.shape[-1]
            for i, length in enumerate(accept_lens.tolist()):
                if length == 1:
                    at = int(accept_index[i, 0])
                    predict[at] = vocab - 1 - int(predict[at]) % PADDING_SPAN
            return predict, accept_lens, accept_index

        return eagle_sample

    return _replace(module, "eagle_sample", make, module.__name__)


# ---- the suite -----------------------------------------------------------------------------------------


def _mutations() -> dict[str, Mutation]:
    n = NUM_DRAFT_TOKENS
    table = [
        Mutation("verify_prefix_short_1", "attention prefix", "the verify attends to one committed token fewer",
                 "output_identity", ATTENTION, _verify_prefix(-1)),
        Mutation("verify_prefix_short_draft", "attention prefix",
                 f"the verify attends to {n} committed tokens fewer (the number of draft tokens)",
                 "output_identity", ATTENTION, _verify_prefix(-n)),
        Mutation("verify_prefix_long_1", "attention prefix", "the verify attends to one slot past the committed tokens",
                 "output_identity", ATTENTION, _verify_prefix(1)),
        Mutation("verify_prefix_long_draft", "attention prefix",
                 f"the verify attends to {n} slots past the committed tokens (its own draft tokens again)",
                 "output_identity", ATTENTION, _verify_prefix(n)),
        Mutation("draft_prefix_short_1", "attention prefix", "each draft step attends to one token fewer",
                 "accept_length", ATTENTION, _draft_prefix(-1)),
        Mutation("draft_prefix_short_draft", "attention prefix", f"each draft step attends to {n} tokens fewer",
                 "accept_length", ATTENTION, _draft_prefix(-n)),
        Mutation("draft_prefix_long_1", "attention prefix", "each draft step attends to one slot too many",
                 "accept_length", ATTENTION, _draft_prefix(1)),
        Mutation("draft_prefix_long_draft", "attention prefix", f"each draft step attends to {n} slots too many",
                 "accept_length", ATTENTION, _draft_prefix(n)),
        Mutation("draft_positions_plus_1", "draft positions", "the draft steps run at positions one too far",
                 "accept_length", WORKER, _wrap_draft_forward(_positions_off(1))),
        Mutation("draft_positions_minus_1", "draft positions", "the draft steps run at positions one too near",
                 "accept_length", WORKER, _wrap_draft_forward(_positions_off(-1))),
        Mutation("draft_stale_hidden", "stale hidden state",
                 "every draft step after the first reads the hidden state the first one read",
                 "accept_length", WORKER, _wrap_draft_forward(_stale_hidden)),
        Mutation("accepted_one_too_many", "accepted length", "a verified run is committed with one token too many",
                 "output_identity", COMMIT, _committed_runs(_one_too_many)),
        Mutation("accepted_one_too_few", "accepted length", "a verified run is committed with one token too few",
                 "output_identity", COMMIT, _committed_runs(_one_too_few)),
        # SGLang guards this one itself (Req._check_vocab_boundary_finish): an id >= vocab_size becomes
        # EOS and ends the request ("NaN happened"), so the API never returns it; what shows is every
        # request cut short at the first such cycle
        Mutation("token_id_vocab_size", "invalid token id",
                 "a cycle that accepts no draft token returns the vocabulary size as its token",
                 "output_identity", COMMIT, _committed_runs(_vocab_size_id)),
        Mutation("token_id_padding", "invalid token id",
                 "a cycle that accepts no draft token samples a padded-vocabulary id",
                 "output_validity", VERIFY, _padding_id),
        Mutation("draft_row_other_request", "wrong logits row", "each draft step selects from the next request's logits row",
                 "accept_length", WORKER, _wrap_draft_forward(_other_request_row)),
        Mutation("draft_extend_row_previous", "wrong logits row",
                 "the draft extend selects the logits row one position before the last accepted one",
                 "accept_length", WORKER, _previous_position_row),
    ]
    return {m.name: m for m in table}


MUTATIONS = _mutations()


def _fail(message: str) -> None:
    sys.stderr.write(" ".join(f"harness patch failed: {PATCH_NAME}: {message} (pid {os.getpid()})".split()) + "\n")
    sys.stderr.flush()
    os._exit(PATCH_FAILURE_EXIT_CODE)


def _plant(mutation: Mutation, module: types.ModuleType) -> None:
    if getattr(module, MARKER, None):
        return
    try:
        replaced = mutation.plant(module)
    except Exception as exc:  # a mutation that did not plant is a failed patch, whatever the reason
        _fail(f"{mutation.name}: {exc}")
        return
    setattr(module, MARKER, mutation.name)
    sys.stderr.write(f"harness patch applied: {PATCH_NAME}: {mutation.name}: {replaced} ({mutation.what}; pid {os.getpid()})\n")
    sys.stderr.flush()
    done = [n for n in os.environ.get(APPLIED_ENV, "").split(",") if n]
    if PATCH_NAME not in done:
        os.environ[APPLIED_ENV] = ",".join([*done, PATCH_NAME])


def install(name: str | None = None) -> None:
    name = name if name is not None else os.environ.get(MUTATION_ENV, "")
    mutation = MUTATIONS.get(name)
    if mutation is None:
        _fail(f"${MUTATION_ENV}={name!r} names no mutation (known: {', '.join(MUTATIONS)})")
        return
    after_import(mutation.module, lambda module: _plant(mutation, module), _fail, marker=MARKER)


# Planted only in a process the bootstrap imports it into (a server's): the harness and the mutation
# suite import this module for MUTATIONS alone.
if __name__ in os.environ.get("HARNESS_PATCHES", "").split(","):
    install()
