"""Restore the full-vocabulary softmax in SGLang's EAGLE topk==1 draft (a baseline from one install).

SGLang PR #26235 (and its successors #26397, #30947, #35872) replaced, for
`--speculative-eagle-topk 1`, the pre-change draft token selection

    probs = torch.softmax(logits, dim=-1)
    topk_p, topk_index = fast_topk(probs, 1, dim=-1)      # torch.max for k == 1

by an argmax. SGLang has no switch to turn that off, so this module puts the old selection back,
in the server's own processes, before any CUDA graph is captured:

- `draft_forward` (the draft-decode CUDA graph) calls the worker module's global
  `draft_topk1_postprocess` (a split-vocabulary Triton argmax that also advances `positions` and
  writes the chain column). That global is rebound to a function with the same signature and side
  effects that selects with softmax + `fast_topk`; `topk_p` carries the real probabilities again.
- `_draft_extend_for_decode` (eager, after the draft-extend graph) selects with an inline
  `torch.argmax` + `torch.ones_like` on CUDA: the method is recompiled from its own source with those
  two statements replaced by softmax + `fast_topk`. On ROCm it calls `draft_topk1_argmax_only`, a
  global rebound like the one above (off ROCm, where it is never called, a mismatch there is only
  reported in the applied line).
- Off CUDA and ROCm (SGLang's CPU engine), `draft_forward` selects with an inline `torch.argmax` +
  `torch.ones_like` instead of calling `draft_topk1_postprocess`: recompiled the same way. Where the
  worker module says CUDA or ROCm (`_is_cuda`, `_is_hip`) that branch is never reached and the
  method is left as it is, so the GPU path runs SGLang's own `draft_forward`.

The draft-extend graph itself selects no tokens in 0.5.23 (row selection moved before lm_head),
so nothing inside it needs restoring.

Where the restored selection and the fast kernels can choose differently (both checked against
the real 0.5.23 kernels in tests/test_sglang_real_wheel.py):
- Rows with NaN or +inf logits. The Triton kernels map NaN to -1e30 before their argmax (#30947),
  so they pick the best finite logit (or the +inf one); softmax turns such a row into NaN and
  `torch.max` then returns a NaN's index (0 on CPU). This is not matched on purpose: the pre-#26235
  code had no NaN mapping, and matching it costs one more full-vocabulary pass per call
  (`nan_to_num`) that the code this baseline stands for never ran, so the baseline would be slower
  than the real old code and the measured gain inflated. Such rows are a model fault that SGLang
  itself flags (SGLANG_ENABLE_NAN_LOGITS_CHECK); the output-identity rule shows them.
- Logits closer than the softmax output can resolve (e.g. float32 logits below ~1.0 one ulp apart,
  bf16 below ~1.0): their probabilities round equal and `torch.max` takes the lower index, where
  the argmax takes the larger logit. That is the pre-#26235 behaviour, which the baseline restores.

`MultiLayerEagleWorkerV2` (`--enable-multi-layer-eagle`) has no topk==1 fast path in 0.5.23: its
draft selects with softmax + `fast_topk` in both variants, so there is nothing to restore and an
A/B would compare identical code. When SGLang imports that worker the patch refuses (exit 70).

The patch is lazy: importing this module (the bootstrap `sitecustomize` does it in every process
when $HARNESS_PATCHES names it) installs an import hook; the rewrite happens when SGLang imports the
worker module. Every assumption is checked first (attributes exist, signatures and the call sites
are as expected): if one fails the process prints one line and exits with status 70, because a
baseline that silently keeps the fast path would be a false measurement. On success each process
prints `harness patch applied: ...` to stderr (so it shows in server.log) and appends the patch name
to $HARNESS_PATCHES_APPLIED.

Version-dependent names live in `SGLANG_LAYOUTS` below; $HARNESS_SGLANG_LAYOUT picks one.
Standard library only at import time: this module runs in SGLang's interpreter.
"""

from __future__ import annotations

import __future__
import ast
import inspect
import os
import sys
import types
from typing import Any
from collections.abc import Callable

from sglang_spec_harness.patches.import_hooks import after_import, refuse_import

PATCH_NAME = "sglang_restore_topk1_softmax"
APPLIED_ENV = "HARNESS_PATCHES_APPLIED"
LAYOUT_ENV = "HARNESS_SGLANG_LAYOUT"
DEFAULT_LAYOUT = "0.5.23"
PATCH_FAILURE_EXIT_CODE = 70  # the bootstrap's code for "a requested patch could not be applied"
# Marks what this module replaced (on the module, each new function) so a second import is a no-op.
MARKER = "__harness_patch__"

# The SGLang names this patch depends on, per code layout. Read from SGLang's source:
# python/sglang/srt/speculative/eagle_worker_v2.py and python/sglang/kernels/ops/speculative/topk1.py.
SGLANG_LAYOUTS: dict[str, dict[str, Any]] = {
    "0.5.23": {
        "worker_module": "sglang.srt.speculative.eagle_worker_v2",
        "worker_class": "EagleDraftWorker",
        # Worker-module globals the restored code calls: the pre-#26235 selection used fast_topk.
        "required_globals": ("torch", "fast_topk"),
        "fast_topk": "fast_topk",
        # Worker-module globals rebound to softmax + fast_topk versions with the same contract.
        "helpers": {
            "draft_topk1_postprocess": {
                "defined_in": "sglang.kernels.ops.speculative.topk1",
                "params": ("next_token_logits", "positions", "draft_tokens", "draft_token_column"),
                "called_by": "draft_forward",
            },
            "draft_topk1_argmax_only": {
                "defined_in": "sglang.kernels.ops.speculative.topk1",
                "params": ("next_token_logits",),
                "called_by": "_draft_extend_for_decode",
                # called only under `_is_hip`: a mismatch is fatal on ROCm, reported elsewhere
                "only_on_rocm": True,
            },
        },
        # Methods whose inline `INDEX = torch.argmax(LOGITS, ...)` / `PROB = torch.ones_like(...)`
        # pair is recompiled as softmax + fast_topk. `unused_when`: worker-module flags under which
        # SGLang never reaches the site; then the method is left as it is (nothing to restore there).
        "inline_argmax": (
            {"method": "_draft_extend_for_decode", "index_var": "ret_topk_index", "prob_var": "ret_topk_p"},
            # draft_forward off CUDA and ROCm (the CPU engine): `torch.argmax` instead of the
            # Triton `draft_topk1_postprocess`, then positions + 1 as before
            {"method": "draft_forward", "index_var": "topk_index", "prob_var": "topk_p",
             "unused_when": ("_is_cuda", "_is_hip")},
        ),
        # Modules SGLang imports only when it selects a worker this patch cannot make a baseline of.
        "refused_modules": {
            "sglang.srt.speculative.multi_layer_eagle_worker_v2": (
                "SGLang selected MultiLayerEagleWorkerV2 (--enable-multi-layer-eagle), which has no "
                "topk==1 fast path in this layout (its draft already selects with softmax + fast_topk): "
                "the patch has nothing to restore and the baseline would run the candidate's code; "
                "drop --enable-multi-layer-eagle or compare two installs"
            ),
        },
    },
}


class HarnessPatchError(RuntimeError):
    """An assumption about SGLang's code does not hold: the patch cannot be applied."""


# ---- the restored selection ---------------------------------------------------------------------


def _make_draft_topk1_postprocess(fast_topk: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    def draft_topk1_postprocess(next_token_logits, positions, draft_tokens=None, draft_token_column=0):
        """Harness replacement: softmax + top-1 (pre-#26235), with the fast kernel's side effects."""
        probs = torch.softmax(next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, 1, dim=-1)
        positions.add_(1)
        if draft_tokens is not None:
            draft_tokens[:, draft_token_column].copy_(topk_index[:, 0])
        return topk_p.float(), topk_index  # float(): the replaced kernel returns float32 topk_p

    return draft_topk1_postprocess


def _make_draft_topk1_argmax_only(fast_topk: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    def draft_topk1_argmax_only(next_token_logits):
        """Harness replacement: softmax + top-1 (pre-#26235) instead of the Triton argmax."""
        probs = torch.softmax(next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, 1, dim=-1)
        return topk_p.float(), topk_index

    return draft_topk1_argmax_only


_REPLACEMENT_FACTORIES: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "draft_topk1_postprocess": _make_draft_topk1_postprocess,
    "draft_topk1_argmax_only": _make_draft_topk1_argmax_only,
}

# Three statements: softmax (placed on the argmax's line), top-1 and the float32 cast of topk_p
# (on the ones_like line; the fast path's topk_p is float32, `.float()` of float32 is a no-op).
_INLINE_REPLACEMENT = (
    "_harness_probs = torch.softmax(LOGITS, dim=-1)\n"
    "{prob}, {index} = fast_topk(_harness_probs, 1, dim=-1)\n"
    "{prob} = {prob}.float()\n"
)


# ---- checks and rewrites --------------------------------------------------------------------------


def _sglang_version() -> str:
    version = getattr(sys.modules.get("sglang"), "__version__", None)
    if version:
        return str(version)
    try:
        from importlib.metadata import version as dist_version

        return dist_version("sglang")
    except Exception:  # only used in messages
        return "unknown"


def _param_names(func: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(inspect.signature(func).parameters)


def _prepare_helper(
    module: types.ModuleType, name: str, spec: dict[str, Any], fast_topk: Callable[..., Any], worker_class: type
) -> tuple[str, Callable[..., Any], str]:
    """Check one worker-module global against the layout; return (name, replacement, description)."""
    where = f"{module.__name__}.{name}"
    if name not in module.__dict__:
        raise HarnessPatchError(f"{module.__name__} has no attribute {name!r} (expected it imported from {spec['defined_in']})")
    original = module.__dict__[name]
    if not callable(original):
        raise HarnessPatchError(f"{where} is not callable ({type(original).__name__})")
    defined_in = getattr(original, "__module__", None)
    if defined_in != spec["defined_in"]:
        raise HarnessPatchError(f"{where} comes from {defined_in!r}, expected {spec['defined_in']!r}")
    try:
        params = _param_names(original)
    except (TypeError, ValueError) as exc:
        raise HarnessPatchError(f"{where}: cannot read its signature ({exc})") from None
    if params != tuple(spec["params"]):
        raise HarnessPatchError(f"{where} has parameters ({', '.join(params)}), expected ({', '.join(spec['params'])})")
    caller = getattr(worker_class, spec["called_by"], None)
    if name not in getattr(getattr(caller, "__code__", None), "co_names", ()):
        raise HarnessPatchError(f"{worker_class.__name__}.{spec['called_by']} does not call {name}: the call site moved")
    replacement = _REPLACEMENT_FACTORIES[name](fast_topk)
    if _param_names(replacement) != params:  # the table and the factory must agree
        raise HarnessPatchError(f"internal: replacement for {where} has parameters {_param_names(replacement)}")
    setattr(replacement, MARKER, {"patch": PATCH_NAME, "replaces": original})
    return name, replacement, f"{where} -> softmax + fast_topk (called by {worker_class.__name__}.{spec['called_by']})"


def _is_assign_of_call(stmt: ast.stmt, target: str, owner: str, attr: str) -> bool:
    """`target = owner.attr(...)`"""
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == target
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == attr
        and isinstance(stmt.value.func.value, ast.Name)
        and stmt.value.func.value.id == owner
    )


# The nodes that carry source positions (lineno, col_offset, end_lineno, end_col_offset).
_LOCATED = (ast.stmt, ast.expr, ast.excepthandler, ast.arg, ast.keyword, ast.alias, ast.pattern)


def _rewrite_inline_argmax(func_def: ast.FunctionDef, index_var: str, prob_var: str, where: str) -> None:
    """Replace `index = torch.argmax(LOGITS, ...)` and `prob = torch.ones_like(...)` (one block) in place."""
    found: list[tuple[list[ast.stmt], int]] = []
    for node in ast.walk(func_def):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                found += [(block, i) for i, stmt in enumerate(block) if _is_assign_of_call(stmt, index_var, "torch", "argmax")]
    if len(found) != 1:
        raise HarnessPatchError(f"{where}: expected one `{index_var} = torch.argmax(...)`, found {len(found)}")
    block, argmax_at = found[0]
    argmax_stmt = block[argmax_at]
    ones_at = [i for i, stmt in enumerate(block) if _is_assign_of_call(stmt, prob_var, "torch", "ones_like")]
    if len(ones_at) != 1:
        raise HarnessPatchError(f"{where}: expected `{prob_var} = torch.ones_like(...)` beside the argmax, found {len(ones_at)}")
    argmax_call = argmax_stmt.value if isinstance(argmax_stmt, ast.Assign) else None  # it is: _is_assign_of_call
    if not isinstance(argmax_call, ast.Call) or not argmax_call.args:
        raise HarnessPatchError(f"{where}: torch.argmax is not called with the logits as first argument")
    logits_expr = argmax_call.args[0]
    new_stmts = ast.parse(_INLINE_REPLACEMENT.format(prob=prob_var, index=index_var)).body
    softmax_call = new_stmts[0].value if isinstance(new_stmts[0], ast.Assign) else None
    assert isinstance(softmax_call, ast.Call)  # _INLINE_REPLACEMENT's first line
    # Tracebacks point at the replaced lines: softmax at the argmax's, the rest at the ones_like's.
    # Placed before the logits expression goes in: it keeps its own positions (shifting it along
    # with the new statements moved it twice, e.g. to line 1416 instead of 1263 in 0.5.23).
    ones_stmt = block[ones_at[0]]
    for stmt, original in zip(new_stmts, (argmax_stmt, ones_stmt, ones_stmt)):
        for node in ast.walk(stmt):
            if isinstance(node, _LOCATED):
                node.lineno = node.end_lineno = original.lineno
                node.col_offset += original.col_offset
                node.end_col_offset = (node.end_col_offset or 0) + original.col_offset
    softmax_call.args[0] = logits_expr
    rewritten: list[ast.stmt] = []
    for i, stmt in enumerate(block):
        if i == argmax_at:
            rewritten += new_stmts
        elif i != ones_at[0]:
            rewritten.append(stmt)
    block[:] = rewritten


def _recompile_method(module: types.ModuleType, cls: type, spec: dict[str, str]) -> tuple[str, Callable[..., Any], str]:
    """The method recompiled from its source with the inline argmax replaced; (name, function, description)."""
    name = spec["method"]
    where = f"{module.__name__}.{cls.__name__}.{name}"
    func = cls.__dict__.get(name)
    if not isinstance(func, types.FunctionType):
        raise HarnessPatchError(f"{module.__name__}.{cls.__name__} has no method {name!r}")
    if func.__code__.co_freevars:  # super()/__class__ or a closure would not survive recompilation
        raise HarnessPatchError(f"{where} uses closure variables {func.__code__.co_freevars}; cannot recompile it")
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError) as exc:
        raise HarnessPatchError(f"{where}: source not available ({exc}); install SGLang with its .py files") from None
    # Parse inside a dummy class so the method's indentation needs no dedent (multi-line strings).
    tree = ast.parse("class _HarnessHost:\n" + source)
    host = tree.body[0]
    func_def = host.body[0] if isinstance(host, ast.ClassDef) else None
    if not isinstance(func_def, ast.FunctionDef) or func_def.name != name or func_def.decorator_list:
        raise HarnessPatchError(f"{where}: unexpected source (decorated, or not a plain def)")
    for node in ast.walk(func_def):
        ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if ident and ident.startswith("__") and not ident.endswith("__"):
            raise HarnessPatchError(f"{where} uses the private name {ident!r}; cannot recompile it outside its class")
    _rewrite_inline_argmax(func_def, spec["index_var"], spec["prob_var"], where)
    compiled_module = ast.Module(body=[func_def], type_ignores=[])
    ast.increment_lineno(compiled_module, func.__code__.co_firstlineno - 2)  # -1 for the dummy class line
    ast.fix_missing_locations(compiled_module)
    code = compile(
        compiled_module, func.__code__.co_filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True
    )
    namespace: dict[str, Any] = {}
    exec(code, module.__dict__, namespace)  # the method's own source, two statements changed
    new_func = namespace[name]
    new_func.__qualname__ = func.__qualname__
    new_func.__doc__ = func.__doc__
    setattr(new_func, MARKER, {"patch": PATCH_NAME, "replaces": func})
    return name, new_func, f"{where}: inline torch.argmax -> softmax + fast_topk"


def apply_to_worker_module(module: types.ModuleType, layout_name: str) -> list[str]:
    """Rewrite the loaded worker module; returns what was replaced. Raises HarnessPatchError."""
    if getattr(module, MARKER, None):
        return []
    layout = SGLANG_LAYOUTS[layout_name]
    for name in layout["required_globals"]:
        if name not in module.__dict__:
            raise HarnessPatchError(f"{module.__name__} has no attribute {name!r}")
    fast_topk = module.__dict__[layout["fast_topk"]]
    cls = module.__dict__.get(layout["worker_class"])
    if not isinstance(cls, type):
        raise HarnessPatchError(f"{module.__name__} has no class {layout['worker_class']!r}")
    on_rocm = bool(getattr(getattr(module.__dict__["torch"], "version", None), "hip", None))
    # Build every replacement before installing any: a half-applied patch is the worst outcome.
    helpers: list[tuple[str, Callable[..., Any], str]] = []
    not_used_here: list[str] = []
    for name, spec in layout["helpers"].items():
        try:
            helpers.append(_prepare_helper(module, name, spec, fast_topk, cls))
        except HarnessPatchError as exc:
            if on_rocm or not spec.get("only_on_rocm"):
                raise
            not_used_here.append(f"{module.__name__}.{name} left as is (ROCm only, not called here: {exc})")
    methods = []
    for spec in layout["inline_argmax"]:
        flags = [flag for flag in spec.get("unused_when", ()) if module.__dict__.get(flag)]
        if flags:
            not_used_here.append(f"{module.__name__}.{cls.__name__}.{spec['method']} left as is (its inline "
                                 f"argmax is not reached here: {' or '.join(flags)})")
        else:
            methods.append(_recompile_method(module, cls, spec))
    for name, replacement, _ in helpers:
        module.__dict__[name] = replacement
    for name, new_func, _ in methods:
        setattr(cls, name, new_func)
    setattr(module, MARKER, PATCH_NAME)
    return [description for _, _, description in (*helpers, *methods)] + not_used_here


# ---- applying it in the process -----------------------------------------------------------------


def _fail(message: str, layout_name: str) -> None:
    line = " ".join(f"harness patch failed: {PATCH_NAME}: {message} (SGLang {_sglang_version()}, layout {layout_name}, pid {os.getpid()})".split())
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os._exit(PATCH_FAILURE_EXIT_CODE)  # never let the server run the fast path under the baseline's name


def _apply_and_report(module: types.ModuleType, layout_name: str) -> None:
    try:
        applied = apply_to_worker_module(module, layout_name)
    except HarnessPatchError as exc:
        _fail(str(exc), layout_name)
        return
    except Exception as exc:  # an unexpected failure is still a failed patch
        _fail(f"{type(exc).__name__}: {exc}", layout_name)
        return
    if not applied:
        return
    sys.stderr.write(
        f"harness patch applied: {PATCH_NAME}: {'; '.join(applied)} "
        f"(SGLang {_sglang_version()}, layout {layout_name}, pid {os.getpid()})\n"
    )
    sys.stderr.flush()
    done = [n for n in os.environ.get(APPLIED_ENV, "").split(",") if n]
    if PATCH_NAME not in done:
        os.environ[APPLIED_ENV] = ",".join([*done, PATCH_NAME])


def install(layout_name: str | None = None) -> None:
    """Patch the worker module now if it is loaded, else when it is imported."""
    layout_name = layout_name or os.environ.get(LAYOUT_ENV) or DEFAULT_LAYOUT
    if layout_name not in SGLANG_LAYOUTS:
        raise HarnessPatchError(f"${LAYOUT_ENV}={layout_name!r} is not a known SGLang layout (known: {', '.join(SGLANG_LAYOUTS)})")
    layout = SGLANG_LAYOUTS[layout_name]
    for refused, reason in layout.get("refused_modules", {}).items():
        if refused in sys.modules:
            _fail(f"{reason} ({refused} already imported)", layout_name)
        def on_import(name: str, reason: str = reason) -> None:
            _fail(f"{reason} (import of {name})", layout_name)

        refuse_import(refused, on_import)
    after_import(layout["worker_module"], lambda module: _apply_and_report(module, layout_name),
                 lambda message: _fail(message, layout_name), marker=MARKER)

install()
