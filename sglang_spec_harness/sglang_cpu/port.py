"""What older SGLang releases lack on a CPU, ported (sglang_spec_harness.sglang_cpu only; applied by `shims`).

Each function of `ADAPTATION_KINDS` is one named piece; `releases.toml` says which releases get
which, with the release-specific names (module paths, op signatures, kernel names) as arguments.
A piece hooks the import of the module it changes (`after_import`), checks that the module looks as
the table says, and writes one `harness sglang_cpu port: NAME (KIND): ...` line to stderr when it
takes effect, so a server log says what ran that was not SGLang's. A module that does not look as
expected ends the process through `fail` (exit 70): a port that silently did nothing would measure
something else under the release's name.

Rule: only what SGLang lacks on a CPU (Triton launches with no CPU branch, CUDA-only calls, cache
helpers, backends, metadata). The draft's token selection (`draft_forward`,
`_draft_extend_for_decode`) is never touched, and no piece mends a bug in SGLang's own CPU code.

Standard library only at import time: this runs inside SGLang's interpreter; torch is imported
inside the hooks, once SGLang has imported it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from sglang_spec_harness.patches.import_hooks import after_import
from sglang_spec_harness.sglang_cpu.release_table import Adaptation

PORT_MARKER = "harness sglang_cpu port:"
Fail = Callable[[str], None]


def announce(adaptation: Adaptation, detail: str = "") -> None:
    sys.stderr.write(f"{PORT_MARKER} {adaptation.name} ({adaptation.kind}): {detail or adaptation.what} (pid {os.getpid()})\n")
    sys.stderr.flush()


def _stand_in_ops() -> Any:
    return importlib.import_module("sgl_kernel.ops")  # the stand-in package (shims put it first on sys.path)


def _param(adaptation: Adaptation, key: str, fail: Fail) -> Any:
    if key not in adaptation.params:
        fail(f"releases.toml: adaptation {adaptation.name} ({adaptation.kind}) needs `{key}`")
    return adaptation.params[key]


def _need(module: types.ModuleType, names: tuple[str, ...], adaptation: Adaptation, fail: Fail) -> bool:
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        fail(f"{adaptation.name}: {module.__name__} has no {', '.join(missing)} (this release's layout is not what "
             f"releases.toml says)")
        return False
    return True


@contextlib.contextmanager
def _fields(obj: Any, **values: Any) -> Iterator[None]:
    """Set attributes for the duration of a call, then put the old values back."""
    old = {name: getattr(obj, name) for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(obj, name, value)


# ---- the intel_amx backend choice -----------------------------------------------------------------


def platform_has_amx(adaptation: Adaptation, fail: Fail) -> None:
    """SGLang >= 0.5.19 reads the platform fact `has_amx` from `runtime_context._PLATFORM`."""

    def patch(module: Any) -> None:
        platform = getattr(module, "_PLATFORM", None)
        if platform is None or not hasattr(platform, "_install"):
            fail(f"{module.__name__} has no _PLATFORM._install (SGLang layout changed): cannot keep the intel_amx backend")
            return
        platform._install(has_amx=True)
        announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


def module_has_amx(adaptation: Adaptation, fail: Fail) -> None:
    """Older releases call `cpu_has_amx_support()` in the module that picks the backend: only that
    module's name is rebound, the layers keep their own (false) answer and their torch paths."""

    def patch(module: Any) -> None:
        if _need(module, ("cpu_has_amx_support",), adaptation, fail):
            module.cpu_has_amx_support = lambda: True
            announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


# ---- sgl_kernel: submodules and attention-op signatures -------------------------------------------


class _NamesThatRaise(importlib.abc.Loader):
    """A `sgl_kernel.<sub>` module whose every name is a function that raises when called."""

    def __init__(self, adaptation: Adaptation):
        self.adaptation = adaptation

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)

        def __getattr__(name: str, _module: str = spec.name) -> Callable[..., NoReturn]:
            if name.startswith("__"):
                raise AttributeError(name)

            def not_implemented(*_args: Any, **_kwargs: Any) -> NoReturn:
                raise NotImplementedError(f"sgl_kernel stand-in (sglang_spec_harness.sglang_cpu): {_module}.{name} is not implemented; "
                                          "only SGLang's EAGLE topk 1 CPU path is")

            not_implemented.__name__ = name
            return not_implemented

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        announce(self.adaptation, f"{module.__name__}: names that raise when called (imported, never called on this path)")


class _SubmoduleFinder(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str], adaptation: Adaptation):
        self.names, self.adaptation = names, adaptation

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.names:
            return importlib.machinery.ModuleSpec(fullname, _NamesThatRaise(self.adaptation))
        return None


def sgl_kernel_submodules(adaptation: Adaptation, fail: Fail) -> None:
    """Releases that import `sgl_kernel.<sub>` at module level on every platform but never call it here."""
    names = {f"sgl_kernel.{sub}" for sub in _param(adaptation, "submodules", fail)}
    sys.meta_path.append(_SubmoduleFinder(names, adaptation))


def attention_call_signature(adaptation: Adaptation, fail: Fail) -> None:
    """The intel_amx backend of older releases calls the attention ops with fewer positional
    arguments; the table names them by the stand-in's parameters, the rest take OMITTED_DEFAULTS."""
    signatures = {"decode_attention_cpu": _param(adaptation, "decode", fail),
                  "extend_attention_cpu": _param(adaptation, "extend", fail)}

    def patch(module: Any) -> None:
        import torch

        attention = importlib.import_module("sgl_kernel.attention")
        for op_name, names in signatures.items():
            op = getattr(attention, op_name)
            params = list(inspect.signature(op).parameters)
            unknown = [n for n in names if n not in params]
            uncovered = [p for p in params if p not in names and p not in attention.OMITTED_DEFAULTS]
            if unknown or uncovered:
                fail(f"{adaptation.name}: {op_name}: the table's signature names {unknown or 'nothing'} that the stand-in "
                     f"lacks and leaves {uncovered or 'nothing'} without a default")
                return
            setattr(torch.ops.sgl_kernel, op_name, _positional_adapter(op, list(names), adaptation.name))
        announce(adaptation)

    after_import("sgl_kernel", patch, fail)


def _positional_adapter(op: Callable[..., Any], names: list[str], table_entry: str) -> Callable[..., Any]:
    from torch.profiler import record_function

    params = inspect.signature(op).parameters
    omitted_defaults = {k: v for k, v in importlib.import_module("sgl_kernel.attention").OMITTED_DEFAULTS.items()
                        if k in params and k not in names}
    label = f"sgl_kernel::{op.__name__}[stand-in]"

    def call(*args: Any) -> Any:
        if len(args) != len(names):
            raise TypeError(f"{op.__name__}: SGLang passed {len(args)} arguments, releases.toml's {table_entry} "
                            f"expects {len(names)}")
        kwargs = {**omitted_defaults, **dict(zip(names, args))}
        with record_function(label):
            return op(**kwargs)

    call.__name__ = op.__name__
    return call


# ---- Triton launches with no CPU branch -----------------------------------------------------------
# kernel name -> the stand-in call, given the launch's arguments in the kernel's own parameter
# order (positions are the same in every release; some parameters were renamed) and the grid.

def _route_copy_kv(a: list[Any], grid: Any) -> None:
    n = int(a[4])  # num_locs: the kernel masks the locations past it
    _stand_in_ops().copy_all_layer_kv_cache_cpu(a[0], a[1], a[2][:n], a[3][:n])


TRITON_ROUTES: dict[str, Callable[[list[Any], Any], None]] = {
    "copy_all_layer_kv_cache_tiled": _route_copy_kv,
    "assign_req_to_token_pool": lambda a, grid: _stand_in_ops().assign_req_to_token_pool_cpu(*a[:6]),
    "assign_extend_cache_locs": lambda a, grid: _stand_in_ops().assign_extend_cache_locs_cpu(*a[:6]),
    # (req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk, speculative_num_steps)
    "assign_draft_cache_locs_page_size_1": lambda a, grid: _stand_in_ops().assign_draft_cache_locs_contiguous_cpu(*a[:7]),
    "assign_draft_cache_locs_contiguous": lambda a, grid: _stand_in_ops().assign_draft_cache_locs_contiguous_cpu(*a[:7]),
    # (accept tokens or verified ids, accept_lens, output, row stride): the last accepted token per request
    "fill_new_verified_id": lambda a, grid: _stand_in_ops().fill_bonus_tokens_cpu(*a[:4]),
    "fill_bonus_tokens": lambda a, grid: _stand_in_ops().fill_bonus_tokens_cpu(*a[:4]),
    "fill_accepted_out_cache_loc": lambda a, grid: _stand_in_ops().fill_accept_out_cache_loc_cpu(*a[:3]),
    "fill_accept_out_cache_loc": lambda a, grid: _stand_in_ops().fill_accept_out_cache_loc_cpu(*a[:3]),
    # (idx, s0, d0, n0, ..., s3, d3, n3, HAS3, BLOCK)
    "_gather_rows_kernel": lambda a, grid: _stand_in_ops().gather_rows_cpu(*a[:14]),
}
_ROUTED: dict[str, str] = {}  # kernel name -> the adaptation that routes it
_ROUTE_SEEN: set[str] = set()


def _kernel_function(kernel: Any) -> Any:
    fn: Any = getattr(kernel, "fn", None)
    while hasattr(fn, "fn"):  # Autotuner / Heuristics wrap a JITFunction
        fn = fn.fn
    return fn


def _route_launch(kernel: Any, grid: Any) -> Callable[..., None]:
    fn = _kernel_function(kernel)
    name = getattr(fn, "__name__", None) or "?"
    if name not in _ROUTED:
        def unrouted(*_args: Any, **_kwargs: Any) -> NoReturn:
            raise NotImplementedError(f"harness sglang_cpu port: Triton kernel {name!r} was launched on this CPU and "
                                      "releases.toml routes no stand-in for it in this release")
        return unrouted
    params = list(inspect.signature(fn).parameters)

    def launch(*args: Any, **kwargs: Any) -> None:
        values = dict(zip(params, args))
        values.update((k, v) for k, v in kwargs.items() if k in params)  # num_warps, num_stages: launch options
        if name not in _ROUTE_SEEN:
            _ROUTE_SEEN.add(name)
            sys.stderr.write(f"{PORT_MARKER} {_ROUTED[name]} (triton_routes): first launch of {name} ran its torch "
                             f"stand-in (pid {os.getpid()})\n")
        TRITON_ROUTES[name]([values.get(p) for p in params], grid)

    return launch


def triton_routes(adaptation: Adaptation, fail: Fail) -> None:
    """Releases before 0.5.16 launch these kernels on every platform: each launch runs the torch
    stand-in of the same kernel instead; any other Triton launch raises, naming the kernel."""
    kernels = list(_param(adaptation, "kernels", fail))
    unknown = [k for k in kernels if k not in TRITON_ROUTES]
    if unknown:
        fail(f"{adaptation.name}: no route for Triton kernel(s) {', '.join(unknown)} (port.TRITON_ROUTES)")
        return
    for kernel in kernels:
        _ROUTED[kernel] = adaptation.name

    def patch(module: Any) -> None:
        interface = module.KernelInterface
        if getattr(interface, "_harness_routed", False):
            return
        interface.__getitem__ = lambda self, grid: _route_launch(self, grid)
        interface._harness_routed = True
        announce(adaptation, f"Triton launches go to the torch stand-ins of {', '.join(kernels)}; any other raises")

    after_import("triton.runtime.jit", patch, fail)


# ---- EAGLE helpers with no CPU branch -------------------------------------------------------------


def tree_ops(adaptation: Adaptation, fail: Fail) -> None:
    """`build_tree_kernel_efficient` calls `sgl_build_tree_kernel_efficient`, imported on CUDA only
    (a NameError here); `verify_tree_greedy_func` returns its inputs untouched off CUDA."""

    def patch(module: Any) -> None:
        if not _need(module, ("build_tree_kernel_efficient", "verify_tree_greedy_func"), adaptation, fail):
            return
        ops = _stand_in_ops()
        module.sgl_build_tree_kernel_efficient = ops.build_tree_kernel_efficient_cpu
        signature = inspect.signature(module.verify_tree_greedy_func)

        def verify_tree_greedy_func(*args: Any, **kwargs: Any) -> tuple[Any, Any, Any]:
            # the release's own parameter order: predicts, accept_index, accept_token_num, candidates,
            # retrieve index / next token / next sibling, target_predict[, topk]
            bound = signature.bind(*args, **kwargs)
            values = list(bound.arguments.values())
            ops.verify_tree_greedy_cpu(*values[:8])
            return values[0], values[1], values[2]

        module.verify_tree_greedy_func = verify_tree_greedy_func
        announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


EXTEND_CACHE_LOCS_PARAMS = ("req_pool_indices", "req_to_token", "start_offset", "end_offset", "batch_size",
                            "draft_token_num", "device")


def extend_cache_locs_helper(adaptation: Adaptation, fail: Fail) -> None:
    """`assign_extend_cache_locs_func` has branches for CUDA/HIP/MUSA and NPU only: None here."""

    def patch(module: Any) -> None:
        if not _need(module, ("assign_extend_cache_locs_func",), adaptation, fail):
            return
        params = tuple(inspect.signature(module.assign_extend_cache_locs_func).parameters)
        if params != EXTEND_CACHE_LOCS_PARAMS:
            fail(f"{adaptation.name}: {module.__name__}.assign_extend_cache_locs_func{params} is not the expected "
                 f"{EXTEND_CACHE_LOCS_PARAMS}")
            return

        def assign_extend_cache_locs_func(req_pool_indices: Any, req_to_token: Any, start_offset: Any, end_offset: Any,
                                          batch_size: int, draft_token_num: int, device: Any) -> Any:
            import torch

            out = torch.empty((batch_size * draft_token_num,), dtype=torch.int64, device=device)  # as the CUDA branch
            _stand_in_ops().assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out,
                                                         req_to_token.shape[1])
            return out

        module.assign_extend_cache_locs_func = assign_extend_cache_locs_func
        announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


# ---- intel_amx: draft backends and verify metadata ------------------------------------------------


def _multi_step_draft_backend(backend_class: type, draft_model_runner: Any, topk: int, num_steps: int) -> Any:
    """The draft-decode steps on intel_amx for topk 1, as SGLang 0.5.16+'s
    IntelAMXMultiStepDraftBackend: step i writes draft slot seq_len + i and attends to the prefix
    and drafts 0..i (with topk 1 the draft slots follow the prefix in req_to_token)."""
    if topk != 1:
        raise ValueError("harness sglang_cpu port: the intel_amx multi-step draft backend ported to this release is "
                         "for --speculative-eagle-topk 1 only")

    class DraftStepBackend(backend_class):
        def __init__(self, runner: Any, step: int):
            super().__init__(runner)
            self.step = step

        def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
            with _fields(forward_batch, seq_lens=forward_batch.seq_lens + self.step + 1):
                return super().forward_decode(q, k, v, layer, forward_batch, *args, **kwargs)

    class MultiStepDraftBackend:
        def __init__(self) -> None:
            self.topk, self.speculative_num_steps = topk, num_steps
            self.attn_backends = [DraftStepBackend(draft_model_runner, step) for step in range(num_steps - 1)]

        def init_forward_metadata(self, forward_batch: Any) -> None:
            for backend in self.attn_backends:
                backend.init_forward_metadata(forward_batch)

    return MultiStepDraftBackend()


def draft_backends(adaptation: Adaptation, fail: Fail) -> None:
    """`DraftBackendFactory` has no intel_amx entry before 0.5.16 ("EAGLE is not supported in
    attention backend intel_amx"): add one to the map SGLang's own `_create_backend` resolves from."""
    backend_module = _param(adaptation, "backend_module", fail)

    def patch(module: Any) -> None:
        if not _need(module, ("DraftBackendFactory",), adaptation, fail):
            return
        factory = module.DraftBackendFactory
        if not all(hasattr(factory, n) for n in ("_create_backend", "create_decode_backend", "create_draft_extend_backend")):
            fail(f"{adaptation.name}: DraftBackendFactory lacks _create_backend / create_decode_backend / "
                 "create_draft_extend_backend")
            return
        create_backend, create_decode, create_extend = (factory._create_backend, factory.create_decode_backend,
                                                        factory.create_draft_extend_backend)

        def backend_class() -> type:
            return importlib.import_module(backend_module).IntelAMXAttnBackend

        def _create_backend(self: Any, backend_name: str, backend_map: dict, error_template: str) -> Any:
            extra = getattr(self, "_harness_intel_amx", None)
            if extra is not None and "intel_amx" not in backend_map:
                backend_map = {**backend_map, "intel_amx": extra}
            return create_backend(self, backend_name, backend_map, error_template)

        def create_decode_backend(self: Any) -> Any:
            self._harness_intel_amx = lambda: _multi_step_draft_backend(
                backend_class(), self.draft_model_runner, self.topk, self.speculative_num_steps)
            try:
                return create_decode(self)
            finally:
                del self._harness_intel_amx

        def create_draft_extend_backend(self: Any) -> Any:
            self._harness_intel_amx = lambda: backend_class()(self.draft_model_runner)
            try:
                return create_extend(self)
            finally:
                del self._harness_intel_amx

        factory._create_backend = _create_backend
        factory.create_decode_backend = create_decode_backend
        factory.create_draft_extend_backend = create_draft_extend_backend
        announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


def verify_metadata(adaptation: Adaptation, fail: Fail) -> None:
    """TARGET_VERIFY batches carry no extend_* fields and the backend before 0.5.19 derives none:
    each request extends by the draft tokens, and the attention op's seq_lens include them (the
    prefix is seq_lens - extend), as 0.5.19+'s `_build_extend_metadata` passes. Set on the batch
    for the metadata and the attention call only, then put back."""

    def patch(module: Any) -> None:
        if not _need(module, ("IntelAMXAttnBackend",), adaptation, fail):
            return
        backend = module.IntelAMXAttnBackend
        init_metadata, forward_extend = backend.init_forward_metadata, backend.forward_extend

        def init_forward_metadata(self: Any, forward_batch: Any) -> Any:
            self._harness_verify = None
            if not (forward_batch.forward_mode.is_target_verify() and forward_batch.extend_seq_lens is None):
                return init_metadata(self, forward_batch)
            import torch

            draft, bs = forward_batch.spec_info.draft_token_num, forward_batch.batch_size
            device = forward_batch.seq_lens.device
            extend_lens = torch.full((bs,), draft, dtype=torch.int32, device=device)
            starts = torch.arange(0, bs * draft, draft, dtype=torch.int32, device=device)
            self._harness_verify = {"seq_lens": forward_batch.seq_lens + draft, "extend_seq_lens": extend_lens,
                                    "extend_start_loc": starts}
            with _fields(forward_batch, extend_seq_lens=extend_lens):
                return init_metadata(self, forward_batch)

        def forward_extend_verified(self: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *args: Any,
                                    **kwargs: Any) -> Any:
            verify = getattr(self, "_harness_verify", None)
            if verify is None or not forward_batch.forward_mode.is_target_verify():
                return forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs)
            with _fields(forward_batch, **verify):
                return forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs)

        backend.init_forward_metadata = init_forward_metadata
        backend.forward_extend = forward_extend_verified
        announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


# ---- CUDA-only calls ------------------------------------------------------------------------------


def cuda_synchronize_noop(adaptation: Adaptation, fail: Fail) -> None:
    """`set_embed_and_head` calls torch.cuda.synchronize() unconditionally before 0.5.16."""

    def patch(module: Any) -> None:
        import torch

        if torch.cuda.is_available():  # the shims refuse a GPU first; never silence a real one
            fail(f"{adaptation.name}: torch sees a GPU")
            return
        torch.cuda.synchronize = lambda *args, **kwargs: None
        announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


def record_stream_noop(adaptation: Adaptation, fail: Fail) -> None:
    """The overlap scheduler calls `Tensor.record_stream`, which rejects torch.cpu streams."""

    def patch(module: Any) -> None:
        import torch

        record_stream = torch.Tensor.record_stream
        if getattr(record_stream, "_harness_cpu_noop", False):
            return

        def record_stream_off_cpu(self: Any, stream: Any) -> Any:
            return None if self.device.type == "cpu" else record_stream(self, stream)

        record_stream_off_cpu._harness_cpu_noop = True  # type: ignore[attr-defined]
        torch.Tensor.record_stream = record_stream_off_cpu  # type: ignore[method-assign,assignment]
        announce(adaptation)

    after_import(_param(adaptation, "module", fail), patch, fail)


ADAPTATION_KINDS: dict[str, Callable[[Adaptation, Fail], None]] = {
    "platform_has_amx": platform_has_amx,
    "module_has_amx": module_has_amx,
    "sgl_kernel_submodules": sgl_kernel_submodules,
    "attention_call_signature": attention_call_signature,
    "triton_routes": triton_routes,
    "tree_ops": tree_ops,
    "extend_cache_locs_helper": extend_cache_locs_helper,
    "draft_backends": draft_backends,
    "verify_metadata": verify_metadata,
    "cuda_synchronize_noop": cuda_synchronize_noop,
    "record_stream_noop": record_stream_noop,
}
KNOWN_KINDS = frozenset(ADAPTATION_KINDS)


def apply(adaptations: tuple[Adaptation, ...], fail: Fail) -> None:
    for adaptation in adaptations:
        ADAPTATION_KINDS[adaptation.kind](adaptation, fail)
