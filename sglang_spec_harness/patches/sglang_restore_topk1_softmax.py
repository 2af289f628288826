"""Restore the full-vocabulary softmax in SGLang's EAGLE topk==1 draft (a baseline from one install).

SGLang PR #26235 (and its successors #26397, #30947, #35872) replaced, for
`--speculative-eagle-topk 1`, the pre-change draft token selection

    probs = torch.softmax(logits, dim=-1)
    topk_p, topk_index = fast_topk(probs, 1, dim=-1)      # torch.max for k == 1

by an argmax. SGLang has no switch to turn that off, so this module puts the old selection back,
in the server's own processes, before any CUDA graph is captured:

- Where the draft calls a fast-path helper, a worker-module global (`draft_topk1_postprocess`, a
  split-vocabulary Triton argmax that also advances `positions` and writes the chain column, called
  by `draft_forward`, the draft-decode CUDA graph, from 0.5.16 on; `draft_topk1_argmax_only`, called
  by `_draft_extend_for_decode` on ROCm from 0.5.21 on), that global is rebound to a function with
  the same signature and side effects that selects with softmax + `fast_topk`; `topk_p` carries the
  real probabilities again.
- Where the draft selects with an inline `X = torch.argmax(LOGITS, dim=-1, keepdim=True)` followed by
  `P = torch.ones_like(X, dtype=torch.float32)` (`_draft_extend_for_decode` off ROCm; `draft_forward`
  off ROCm before 0.5.16, and since then off CUDA and ROCm: SGLang's CPU engine), the method is
  recompiled from its own source with those two statements replaced by softmax + `fast_topk`.
- A selection that this process never reaches is left as it is: its enclosing `if` tests are false
  for the worker module's boolean globals (`_is_cuda`, `_is_hip`, ...). So on CUDA and ROCm (0.5.21
  on) the GPU path runs SGLang's own `draft_forward` (its fast path is the rebound helper), and on
  ROCm SGLang's own `_draft_extend_for_decode` (it calls the rebound `draft_topk1_argmax_only`). A
  helper is rebound wherever it matches; a mismatch stops the process only where one of its calls
  is reached, and is otherwise reported in the applied line.
- Where none of a method's selections is reached (ROCm before 0.5.21, whose draft already selects
  with softmax + `fast_topk`), there is nothing to restore: the patch refuses (exit 70).

How the code is recognised, by its shape and not by SGLang's version, is
`sglang_spec_harness.patches.draft_shape` (the names it looks for are its `DRAFT_CODE` table).

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

`MultiLayerEagleWorkerV2` (`--enable-multi-layer-eagle`) has no topk==1 fast path (0.5.23): its
draft selects with softmax + `fast_topk` in both variants, so there is nothing to restore and an
A/B would compare identical code. When SGLang imports that worker the patch refuses (exit 70).

The patch is lazy: importing this module (the bootstrap `sitecustomize` does it in every process
when $HARNESS_PATCHES names it) installs an import hook; the rewrite happens when SGLang imports the
worker module. Every assumption is checked first (the worker, its methods and their selections, the
globals, the helpers' signatures and call sites): if one fails the process prints one line naming
what is missing and exits with status 70, because a baseline that silently keeps the fast path
would be a false measurement. On success each process prints `harness patch applied: ...` to
stderr (so it shows in server.log), with the shape it recognised, and appends the patch name to
$HARNESS_PATCHES_APPLIED.

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

from sglang_spec_harness.patches.draft_shape import (
    DRAFT_CODE,
    INLINE,
    DraftShape,
    HarnessPatchError,
    MethodShape,
    Selection,
    find_selections,
    method_for,
    reached,
)
from sglang_spec_harness.patches.import_hooks import after_import, refuse_import

PATCH_NAME = "sglang_restore_topk1_softmax"
APPLIED_ENV = "HARNESS_PATCHES_APPLIED"
PATCH_FAILURE_EXIT_CODE = 70  # the bootstrap's code for "a requested patch could not be applied"
# Marks what this module replaced (on the module, each new function) so a second import is a no-op.
MARKER = "__harness_patch__"


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


def _check_call_site(name: str, params: tuple[str, ...], caller: str, selection: Selection) -> None:
    """The call passes what the replacement takes: no more positional arguments, known keywords."""
    call = selection.call
    starred = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
    unknown = [k.arg for k in call.keywords if k.arg is not None and k.arg not in params]
    if starred or len(call.args) > len(params) or unknown:
        raise HarnessPatchError(f"{caller} line {selection.line}: `{ast.unparse(call)}` does not fit {name}'s "
                                f"parameters ({', '.join(params)})")


def _prepare_helper(module: types.ModuleType, name: str, fast_topk: Callable[..., Any],
                    calls: list[tuple[str, Selection]]) -> tuple[str, Callable[..., Any], str]:
    """Check one worker-module global against the table and its call sites; (name, replacement, description)."""
    spec = DRAFT_CODE["helpers"][name]
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
    for caller, selection in calls:
        _check_call_site(name, params, caller, selection)
    replacement = _REPLACEMENT_FACTORIES[name](fast_topk)
    if _param_names(replacement) != params:  # the table and the factory must agree
        raise HarnessPatchError(f"internal: replacement for {where} has parameters {_param_names(replacement)}")
    setattr(replacement, MARKER, {"patch": PATCH_NAME, "replaces": original})
    callers = sorted({".".join(caller.split(".")[-2:]) for caller, _ in calls})  # Class.method
    return name, replacement, f"{where} -> softmax + fast_topk (called by {', '.join(callers) or 'no draft method'})"


# The nodes that carry source positions (lineno, col_offset, end_lineno, end_col_offset).
_LOCATED = (ast.stmt, ast.expr, ast.excepthandler, ast.arg, ast.keyword, ast.alias, ast.pattern)


def _rewrite_inline_pair(selection: Selection) -> None:
    """Replace the pair `X = torch.argmax(LOGITS, ...)` / `P = torch.ones_like(X, ...)` in its block, in place."""
    block = selection.block
    argmax_stmt, ones_stmt = selection.argmax_stmt, selection.ones_stmt
    assert argmax_stmt is not None and ones_stmt is not None  # an inline pair's
    new_stmts = ast.parse(_INLINE_REPLACEMENT.format(prob=selection.prob_var, index=selection.index_var)).body
    softmax_call = new_stmts[0].value if isinstance(new_stmts[0], ast.Assign) else None
    assert isinstance(softmax_call, ast.Call)  # _INLINE_REPLACEMENT's first line
    # Tracebacks point at the replaced lines: softmax at the argmax's, the rest at the ones_like's.
    # Placed before the logits expression goes in: it keeps its own positions (shifting it along
    # with the new statements moved it twice, e.g. to line 1416 instead of 1263 in 0.5.23).
    for stmt, original in zip(new_stmts, (argmax_stmt, ones_stmt, ones_stmt)):
        for node in ast.walk(stmt):
            if isinstance(node, _LOCATED):
                node.lineno = node.end_lineno = original.lineno
                node.col_offset += original.col_offset
                node.end_col_offset = (node.end_col_offset or 0) + original.col_offset
    softmax_call.args[0] = selection.call.args[0]  # the logits expression, as SGLang wrote it
    rewritten: list[ast.stmt] = []
    for stmt in block:  # by identity: another pair of the same block may have been rewritten already
        if stmt is argmax_stmt:
            rewritten += new_stmts
        elif stmt is not ones_stmt:
            rewritten.append(stmt)
    block[:] = rewritten


def _method_tree(func: types.FunctionType, where: str) -> ast.FunctionDef:
    """The method's own source as an AST, with the file's line numbers."""
    if func.__code__.co_freevars:  # super()/__class__ or a closure would not survive recompilation
        raise HarnessPatchError(f"{where} uses closure variables {func.__code__.co_freevars}; cannot recompile it")
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError) as exc:
        raise HarnessPatchError(f"{where}: source not available ({exc}); install SGLang with its .py files") from None
    # Parse inside a dummy class so the method's indentation needs no dedent (multi-line strings).
    tree = ast.parse("class _HarnessHost:\n" + source)
    ast.increment_lineno(tree, func.__code__.co_firstlineno - 2)  # -1 for the dummy class line
    host = tree.body[0]
    func_def = host.body[0] if isinstance(host, ast.ClassDef) else None
    if not isinstance(func_def, ast.FunctionDef) or func_def.name != func.__name__ or func_def.decorator_list:
        raise HarnessPatchError(f"{where}: unexpected source (decorated, or not a plain def)")
    return func_def


def _recompile_method(module: types.ModuleType, func: types.FunctionType, func_def: ast.FunctionDef,
                      pairs: list[Selection], where: str) -> Callable[..., Any]:
    """The method recompiled from its source with the inline pairs replaced."""
    for node in ast.walk(func_def):
        ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if ident and ident.startswith("__") and not ident.endswith("__"):
            raise HarnessPatchError(f"{where} uses the private name {ident!r}; cannot recompile it outside its class")
    for selection in pairs:
        _rewrite_inline_pair(selection)
    compiled_module = ast.Module(body=[func_def], type_ignores=[])
    ast.fix_missing_locations(compiled_module)
    code = compile(
        compiled_module, func.__code__.co_filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True
    )
    namespace: dict[str, Any] = {}
    exec(code, module.__dict__, namespace)  # the method's own source, the pairs changed
    new_func = namespace[func.__name__]
    new_func.__qualname__ = func.__qualname__
    new_func.__doc__ = func.__doc__
    setattr(new_func, MARKER, {"patch": PATCH_NAME, "replaces": func})
    return new_func


# ---- the whole worker -----------------------------------------------------------------------------


def _worker_class(module: types.ModuleType) -> type:
    """The first worker class of the table that this module defines."""
    names = [w["class"] for w in DRAFT_CODE["workers"] if w["module"] == module.__name__]
    cls = next((module.__dict__[n] for n in names if isinstance(module.__dict__.get(n), type)), None)
    if cls is None:
        raise HarnessPatchError(f"{module.__name__} has no class {' or '.join(names)}")
    return cls


def _recognise(module: types.ModuleType, cls: type) -> tuple[DraftShape, dict[str, tuple[types.FunctionType, ast.FunctionDef]]]:
    """The loaded worker's shape, and each method with its source tree."""
    methods: dict[str, tuple[types.FunctionType, ast.FunctionDef]] = {}
    shapes = []
    for role in DRAFT_CODE["methods"]:
        name = method_for(role, cls.__dict__, f"{module.__name__}.{cls.__name__}")
        where = f"{module.__name__}.{cls.__name__}.{name}"
        func = cls.__dict__[name]
        if not isinstance(func, types.FunctionType):
            raise HarnessPatchError(f"{where} is not a plain function ({type(func).__name__})")
        func_def = _method_tree(func, where)
        methods[name] = (func, func_def)
        shapes.append(MethodShape(role, name, find_selections(func_def, where)))
    return DraftShape(module.__name__, cls.__name__, shapes), methods


def _require_reached(shape: DraftShape, flags: dict[str, bool]) -> None:
    """Each method has a selection this process may run; else the fast path does not run here."""
    for method in shape.methods:
        why = [reached(s, flags)[1] for s in method.selections]
        if all(why):
            listed = "; ".join(f"{s.kind} at line {s.line}, excluded by {w}" for s, w in zip(method.selections, why))
            raise HarnessPatchError(
                f"{shape.module}.{shape.cls}.{method.name}: none of its topk==1 selections runs here ({listed}): "
                "it selects either without the fast path (nothing to restore) or in a form the patch does not know")


def _prepare_helpers(module: types.ModuleType, shape: DraftShape, flags: dict[str, bool]) -> tuple[list[tuple[str, Callable[..., Any], str]], list[str]]:
    """The helpers to rebind, and the notes on those left as they are."""
    fast_topk = module.__dict__["fast_topk"]
    helpers, notes = [], []
    for name in DRAFT_CODE["helpers"]:
        calls = [(f"{shape.module}.{shape.cls}.{m.name}", s) for m in shape.methods for s in m.selections if s.kind == name]
        needed = [s for _, s in calls if reached(s, flags)[0] is not False]
        if name not in module.__dict__ and not needed:
            continue  # not part of this release's draft code (or called only where it never runs)
        try:
            helpers.append(_prepare_helper(module, name, fast_topk, calls))
        except HarnessPatchError as exc:
            if needed:
                raise
            why = " / ".join(sorted({reached(s, flags)[1] for _, s in calls})) or "not called by the draft methods"
            notes.append(f"{module.__name__}.{name} left as is (not reached here: {why}; {exc})")
    return helpers, notes


def apply_to_worker_module(module: types.ModuleType) -> tuple[str, list[str]]:
    """Rewrite the loaded worker module; returns (the shape recognised, what was replaced or left).
    Raises HarnessPatchError."""
    if getattr(module, MARKER, None):
        return "", []
    for name in DRAFT_CODE["required_globals"]:
        if name not in module.__dict__:
            raise HarnessPatchError(f"{module.__name__} has no attribute {name!r}")
    cls = _worker_class(module)
    shape, sources = _recognise(module, cls)
    flags = {k: v for k, v in module.__dict__.items() if isinstance(v, bool)}  # _is_cuda, _is_hip, ...
    _require_reached(shape, flags)
    # Build every replacement before installing any: a half-applied patch is the worst outcome.
    helpers, notes = _prepare_helpers(module, shape, flags)
    methods = []
    for method in shape.methods:
        where = f"{module.__name__}.{cls.__name__}.{method.name}"
        pairs = [s for s in method.selections if s.kind == INLINE]
        run_here = [s for s in pairs if reached(s, flags)[0] is not False]
        if run_here:
            func, func_def = sources[method.name]
            methods.append((method.name, _recompile_method(module, func, func_def, run_here, where),
                            f"{where}: inline torch.argmax -> softmax + fast_topk"))
        elif pairs:
            why = " / ".join(sorted({reached(s, flags)[1] for s in pairs}))
            notes.append(f"{where} left as is (its inline argmax is not reached here: {why})")
    for name, replacement, _ in helpers:
        module.__dict__[name] = replacement
    for name, new_func, _ in methods:
        setattr(cls, name, new_func)
    setattr(module, MARKER, PATCH_NAME)
    return shape.summary(), [description for _, _, description in (*helpers, *methods)] + notes


# ---- applying it in the process -----------------------------------------------------------------


def _fail(message: str) -> None:
    line = " ".join(f"harness patch failed: {PATCH_NAME}: {message} (SGLang {_sglang_version()}, pid {os.getpid()})".split())
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os._exit(PATCH_FAILURE_EXIT_CODE)  # never let the server run the fast path under the baseline's name


def _apply_and_report(module: types.ModuleType) -> None:
    try:
        shape, applied = apply_to_worker_module(module)
    except HarnessPatchError as exc:
        _fail(str(exc))
        return
    except Exception as exc:  # an unexpected failure is still a failed patch
        _fail(f"{type(exc).__name__}: {exc}")
        return
    if not applied:
        return
    sys.stderr.write(
        f"harness patch applied: {PATCH_NAME}: shape [{shape}]: {'; '.join(applied)} "
        f"(SGLang {_sglang_version()}, pid {os.getpid()})\n"
    )
    sys.stderr.flush()
    done = [n for n in os.environ.get(APPLIED_ENV, "").split(",") if n]
    if PATCH_NAME not in done:
        os.environ[APPLIED_ENV] = ",".join([*done, PATCH_NAME])


def install() -> None:
    """Patch the worker module now if it is loaded, else when it is imported."""
    for refused, reason in DRAFT_CODE["refused_modules"].items():
        if refused in sys.modules:
            _fail(f"{reason} ({refused} already imported)")

        def on_import(name: str, reason: str = reason) -> None:
            _fail(f"{reason} (import of {name})")

        refuse_import(refused, on_import)
    for module_name in dict.fromkeys(w["module"] for w in DRAFT_CODE["workers"]):
        after_import(module_name, _apply_and_report, _fail, marker=MARKER)


install()
