"""SGLang's EAGLE draft code as the baseline patch needs it, recognised by its shape, not its version.

The patch (sglang_restore_topk1_softmax) puts softmax + `fast_topk` back where SGLang's topk==1
draft selects tokens with an argmax. What it needs, and what this module finds in a release's or a
commit's code:
- the draft worker: the first of `DRAFT_CODE["workers"]` (module, class) that exists;
- per role (draft decode, draft extend) the first method of `DRAFT_CODE["methods"]` that the class
  defines, holding at least one topk==1 fast-path *selection*:
  - an inline pair: `X = torch.argmax(LOGITS, dim=-1, keepdim=True)` followed, in the same block,
    by `P = torch.ones_like(X, dtype=torch.float32)` (any variable names), or
  - a call to one of `DRAFT_CODE["helpers"]` (module globals the patch rebinds);
- no other argmax in those methods: an argmax the patch does not recognise may be the fast path in
  a form it would leave in place, so it refuses rather than measure a false baseline.

Each selection keeps the `if` tests that enclose it (`guards`). Given the worker module's boolean
globals (`_is_cuda`, `_is_hip`, ... whatever the module defines), `reached` tells whether this
process can run it (True, False, or None when it depends on run-time values such as `self.topk`).

Two callers: the patch inside SGLang's interpreter (the loaded module: `find_selections` on each
method's own source) and the harness before any server starts (`recognise_source`: the files of the
variant's SGLang, never imported; recorded in environment.json). Standard library only.
"""

from __future__ import annotations

import ast
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The SGLang names the patch depends on. Candidates are tried in order; the first present is used
# (and reported). Read from SGLang's source, releases 0.5.13 to 0.5.23:
# python/sglang/srt/speculative/eagle_worker_v2.py and python/sglang/kernels/ops/speculative/topk1.py.
DRAFT_CODE: dict[str, Any] = {
    "workers": (
        {"module": "sglang.srt.speculative.eagle_worker_v2", "class": "EagleDraftWorker"},
    ),
    # role -> method-name candidates; each role's method must hold a topk==1 selection
    "methods": {
        "draft decode": ("draft_forward",),
        "draft extend": ("_draft_extend_for_decode",),
    },
    # Worker-module globals the restored selection calls (the pre-#26235 code used fast_topk).
    "required_globals": ("torch", "fast_topk"),
    # Fast-path helpers (worker-module globals, from 0.5.16 on) rebound to softmax + fast_topk
    # versions with the same contract.
    "helpers": {
        "draft_topk1_postprocess": {
            "defined_in": "sglang.kernels.ops.speculative.topk1",
            "params": ("next_token_logits", "positions", "draft_tokens", "draft_token_column"),
        },
        "draft_topk1_argmax_only": {
            "defined_in": "sglang.kernels.ops.speculative.topk1",
            "params": ("next_token_logits",),
        },
    },
    # Modules SGLang imports only when it selects a worker this patch cannot make a baseline of.
    "refused_modules": {
        "sglang.srt.speculative.multi_layer_eagle_worker_v2": (
            "SGLang selected MultiLayerEagleWorkerV2 (--enable-multi-layer-eagle), which has no "
            "topk==1 fast path (its draft already selects with softmax + fast_topk): the patch has "
            "nothing to restore and the baseline would run the candidate's code; drop "
            "--enable-multi-layer-eagle or compare two installs"
        ),
    },
}

INLINE = "inline argmax"  # Selection.kind of the inline pair (a helper's kind is its name)
ARGMAX_FORM = "`X = torch.argmax(LOGITS, dim=-1, keepdim=True)`"
ONES_FORM = "`P = torch.ones_like(X, dtype=torch.float32)`"
_ARGMAX_KEYWORDS = {"dim": "-1", "keepdim": "True"}
_ONES_KEYWORDS = {"dtype": "torch.float32"}


class HarnessPatchError(RuntimeError):
    """An assumption about SGLang's code does not hold: the patch cannot be applied."""


Guard = tuple[ast.expr, bool]  # an enclosing `if` test, and whether the selection is in its body (True) or else


@dataclass
class Selection:
    """One topk==1 fast-path selection in a method: an inline pair or a helper call."""

    kind: str  # INLINE or the helper's name
    line: int  # in the file (when parsed with the file's line numbers)
    guards: list[Guard]
    call: ast.Call  # the argmax call, or the helper call
    # the inline pair: its block, its two statements and its variable names
    block: list[ast.stmt] = field(default_factory=list)
    argmax_stmt: ast.stmt | None = None
    ones_stmt: ast.stmt | None = None
    index_var: str = ""
    prob_var: str = ""
    # names the method assigns: a local never stands for the module's flag of the same name
    local_names: frozenset[str] = frozenset()

    def when(self) -> str:
        """The enclosing tests as one condition (`always` when there is none)."""
        parts = []
        for test, body in self.guards:
            text = ast.unparse(test)
            if isinstance(test, ast.BoolOp) and (len(self.guards) > 1 or not body):
                text = f"({text})"
            parts.append(text if body else f"not {text}")
        return " and ".join(parts) or "always"


@dataclass
class MethodShape:
    role: str
    name: str
    selections: list[Selection]

    def summary(self) -> str:
        return f"{self.name}: {' + '.join(s.kind for s in self.selections)}"


@dataclass
class DraftShape:
    """What was recognised: the worker, and each role's method with its selections."""

    module: str
    cls: str
    methods: list[MethodShape]

    def summary(self) -> str:
        """One line: `draft_forward: draft_topk1_postprocess + inline argmax | _draft_extend_for_decode: ...`"""
        return " | ".join(m.summary() for m in self.methods)

    def facts(self) -> dict[str, Any]:
        """For environment.json."""
        return {
            "worker": f"{self.module}.{self.cls}",
            "shape": self.summary(),
            "selections": {m.name: [{"kind": s.kind, "line": s.line, "when": s.when()} for s in m.selections]
                           for m in self.methods},
        }


# ---- finding the selections in a method ---------------------------------------------------------


def _is_call_of(node: ast.AST | None, owner: str, attr: str) -> bool:
    """`owner.attr(...)`"""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr
            and isinstance(node.func.value, ast.Name) and node.func.value.id == owner)


def _single_name_target(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _keywords_say(call: ast.Call, wanted: dict[str, str]) -> bool:
    given = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}
    return all(given.get(name) == value for name, value in wanted.items())


@dataclass
class _Found:
    """What one walk over a method collects: calls of interest with their guards and statement."""

    helpers: set[str]
    argmax: list[tuple[ast.Call, list[Guard], list[ast.stmt], int]] = field(default_factory=list)
    helper_calls: list[tuple[ast.Call, list[Guard]]] = field(default_factory=list)


def _walk(node: ast.AST, guards: list[Guard], found: _Found, block: list[ast.stmt], at: int) -> None:
    """Every node under `node`, with the `if` tests that enclose it and its statement's block."""
    if isinstance(node, ast.If):
        _walk(node.test, guards, found, block, at)
        _walk_block(node.body, [*guards, (node.test, True)], found)
        _walk_block(node.orelse, [*guards, (node.test, False)], found)
        return
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name == "argmax":
            found.argmax.append((node, guards, block, at))
        elif isinstance(func, ast.Name) and name in found.helpers:
            found.helper_calls.append((node, guards))
    for _, value in ast.iter_fields(node):
        items = value if isinstance(value, list) else [value]
        if items and all(isinstance(item, ast.stmt) for item in items):
            _walk_block(items, guards, found)
            continue
        for item in items:
            if isinstance(item, ast.AST):
                _walk(item, guards, found, block, at)


def _walk_block(block: list[ast.stmt], guards: list[Guard], found: _Found) -> None:
    for at, stmt in enumerate(block):
        _walk(stmt, guards, found, block, at)


def _inline_pair(call: ast.Call, guards: list[Guard], block: list[ast.stmt], at: int, where: str) -> Selection:
    """The argmax `call` as the first statement of an inline pair, or HarnessPatchError naming what differs."""
    stmt = block[at] if 0 <= at < len(block) else None
    index_var = _single_name_target(stmt) if stmt is not None else None
    is_form = (index_var is not None and getattr(stmt, "value", None) is call and _is_call_of(call, "torch", "argmax")
               and len(call.args) == 1 and _keywords_say(call, _ARGMAX_KEYWORDS))
    if not is_form:
        raise HarnessPatchError(f"{where} line {call.lineno}: `{ast.unparse(call)}` is an argmax the patch does not "
                                f"recognise (expected {ARGMAX_FORM} followed by {ONES_FORM})")
    assert stmt is not None  # is_form
    for later in block[at + 1:]:
        value = getattr(later, "value", None)
        if not (_single_name_target(later) and _is_call_of(value, "torch", "ones_like")):
            continue
        assert isinstance(value, ast.Call)  # _is_call_of
        if not (value.args and isinstance(value.args[0], ast.Name) and value.args[0].id == index_var):
            continue
        if not _keywords_say(value, _ONES_KEYWORDS):
            raise HarnessPatchError(f"{where} line {later.lineno}: `{ast.unparse(later)}` is not {ONES_FORM}")
        return Selection(INLINE, call.lineno, guards, call, block, stmt, later, index_var, _single_name_target(later) or "")
    raise HarnessPatchError(f"{where}: no {ARGMAX_FORM} followed by {ONES_FORM}: `{ast.unparse(stmt)}` "
                            f"(line {call.lineno}) has no `P = torch.ones_like({index_var}, ...)` after it in its block")


def find_selections(func_def: ast.FunctionDef, where: str) -> list[Selection]:
    """The method's topk==1 selections in source order; HarnessPatchError when there is none or an
    argmax is not in the recognised form. Lines are `func_def`'s own (parse with the file's)."""
    found = _Found(helpers=set(DRAFT_CODE["helpers"]))
    _walk_block(func_def.body, [], found)
    selections = [_inline_pair(call, guards, block, at, where) for call, guards, block, at in found.argmax]
    selections += [Selection(call.func.id, call.lineno, guards, call)  # type: ignore[attr-defined]
                   for call, guards in found.helper_calls]
    assigned = frozenset(n.id for n in ast.walk(func_def) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    assigned |= {a.arg for a in ast.walk(func_def.args) if isinstance(a, ast.arg)}
    for selection in selections:
        selection.local_names = assigned
    if not selections:
        helpers = " or ".join(DRAFT_CODE["helpers"])
        raise HarnessPatchError(f"{where}: no topk==1 selection: no {ARGMAX_FORM} followed by {ONES_FORM}, "
                                f"and no call to {helpers}")
    return sorted(selections, key=lambda s: s.line)


# ---- which selections this process reaches --------------------------------------------------------


def _truth(expr: ast.expr, flags: dict[str, bool]) -> bool | None:
    """The value of a guard where only `flags` are known (Kleene logic; None: unknown)."""
    if isinstance(expr, ast.Name):
        return flags.get(expr.id)
    if isinstance(expr, ast.Constant) and isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        inner = _truth(expr.operand, flags)
        return None if inner is None else not inner
    if isinstance(expr, ast.BoolOp):
        values = [_truth(v, flags) for v in expr.values]
        decisive = isinstance(expr.op, ast.Or)  # True decides an `or`, False an `and`
        if decisive in values:
            return decisive
        return None if None in values else not decisive
    return None


def _deciding_flags(expr: ast.expr, flags: dict[str, bool]) -> list[str]:
    """The flags that give a known guard its value: `_is_cuda` (true) or `not _is_hip` (false)."""
    value = _truth(expr, flags)
    if isinstance(expr, ast.Name):
        return [expr.id if value else f"not {expr.id}"]
    if isinstance(expr, ast.UnaryOp):
        return _deciding_flags(expr.operand, flags)
    if isinstance(expr, ast.BoolOp):
        return [f for v in expr.values if _truth(v, flags) is value for f in _deciding_flags(v, flags)]
    return []


def reached(selection: Selection, flags: dict[str, bool]) -> tuple[bool | None, str]:
    """Whether a process with these module flags runs the selection: (False, the deciding flags)
    when one of its guards is known to exclude it; (None, "") when it depends on run-time values."""
    flags = {name: value for name, value in flags.items() if name not in selection.local_names}
    verdict: bool | None = True
    for test, body in selection.guards:
        value = _truth(test, flags)
        if value is None:
            verdict = None
        elif value != body:
            return False, " and ".join(_deciding_flags(test, flags))
    return verdict, ""


# ---- the worker, from source files (the harness, before any server starts) ------------------------


def _method_defs(cls_def: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in cls_def.body if isinstance(node, ast.FunctionDef)}


def method_for(role: str, defined: Container[str], where: str) -> str:
    """The first method-name candidate of `role` that the class defines, or HarnessPatchError."""
    candidates = DRAFT_CODE["methods"][role]
    name = next((n for n in candidates if n in defined), None)
    if name is None:
        raise HarnessPatchError(f"{where} has no method {' or '.join(candidates)} (the {role}'s token selection)")
    return name


def recognise_source(sglang_dir: Path) -> DraftShape:
    """The draft code's shape in the `sglang` package folder `sglang_dir` (its files, not imported):
    the checks that need no running SGLang. HarnessPatchError names what is missing."""
    tried = []
    for worker in DRAFT_CODE["workers"]:
        module, cls = worker["module"], worker["class"]
        path = sglang_dir.parent.joinpath(*module.split(".")).with_suffix(".py")
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            tried.append(f"{module} ({path}: {getattr(exc, 'strerror', None) or exc})")
            continue
        cls_def = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if cls_def is None:
            tried.append(f"{module} has no class {cls}")
            continue
        methods = _method_defs(cls_def)
        shapes = []
        for role in DRAFT_CODE["methods"]:
            name = method_for(role, methods, f"{module}.{cls}")
            shapes.append(MethodShape(role, name, find_selections(methods[name], f"{module}.{cls}.{name}")))
        return DraftShape(module, cls, shapes)
    raise HarnessPatchError(f"no EAGLE draft worker the patch knows: {'; '.join(tried)}")
