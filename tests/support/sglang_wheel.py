"""SGLang 0.5.23's real source on CPU: the wheel, downloaded once, and the stubs it needs here.

The tests hold the harness's SGLang side (the baseline patch, the micro server's profiling API,
the CPU engine's sgl-kernel stand-ins) against the code of the released wheel, not against a copy
written here. The wheel pins a CUDA torch and ~70 packages, so it is never installed: `pip download
--no-deps` fetches the file once (39 MB, checked against its sha256) and the few source files the
tests read are extracted into a cache. A module is then loaded in one of four ways, chosen per name
by `WheelFinder`:

- real: the wheel's file, executed as is (`REAL_MODULES`);
- lifted: a stand-in module holding functions compiled from the wheel's own source text
  (`LIFTED`: e.g. `fast_topk`, whose real module pulls psutil, transformers, ...; a package that
  re-exports such a module gets them too, `REEXPORTED`);
- stand-in: plumbing that needs a GPU model or a running server, replaced by the smallest
  object with the same interface (`STANDINS`, each with the reason);
- placeholder: every other `sglang.*` module a real one imports. Its names are classes that
  raise `PlaceholderUsed` when instantiated: they only let the real module's imports, base
  classes and annotations resolve; calling one means the code under test left the documented
  path, and the test fails loudly.

Package `__init__` files are never run (sglang/__init__.py imports the whole server). Platform
probes (`is_cuda()`, `is_hip()`, ...) answer for the platform passed to `install()`; `hip` also
sets `torch.version.hip`, which is what the patch reads to decide that it runs on ROCm.
`triton` is the real package from PyPI (a test dependency); with TRITON_INTERPRET=1 its
interpreter runs the real kernels on CPU tensors.

Environment: HARNESS_SGLANG_WHEEL (a wheel file to use instead of downloading),
HARNESS_CACHE_DIR (default $XDG_CACHE_HOME/sglang-spec-harness or ~/.cache/sglang-spec-harness).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any, NoReturn
from collections.abc import Callable

SGLANG_VERSION = "0.5.23"
WHEEL_NAME = "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
# pip picks this one file whatever the local interpreter is (the Python source is the same in all).
PIP_TARGET = ("--only-binary=:all:", "--platform", "manylinux_2_34_x86_64", "--python-version", "3.11",
              "--implementation", "cp", "--abi", "cp311")
WHEEL_ENV = "HARNESS_SGLANG_WHEEL"
CACHE_ENV = "HARNESS_CACHE_DIR"

# The only files taken out of the wheel (paths inside it).
MEMBERS = (
    "sglang/_version.py",
    "sglang/profiler.py",
    "sglang/kernels/ops/speculative/topk1.py",
    "sglang/srt/speculative/eagle_worker_v2.py",
    "sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
    "sglang/srt/speculative/standalone_worker_v2.py",
    "sglang/srt/speculative/spec_info.py",
    "sglang/srt/model_executor/forward_context.py",
    "sglang/srt/speculative/eagle_utils.py",
    "sglang/srt/speculative/spec_utils.py",
    "sglang/srt/utils/common.py",
    "sglang/srt/utils/msgspec_utils.py",
    "sglang/srt/managers/io_struct.py",
    "sglang/srt/entrypoints/http_server.py",
    "sglang/test/server_fixtures/dsa_mtp_fixture.py",
    # the callers of the sgl-kernel CPU ops (tests/test_sglang_cpu_stand_ins.py)
    "sglang/kernels/ops/kvcache/cache_move.py",
    "sglang/kernels/ops/speculative/eagle.py",
    "sglang/kernels/ops/speculative/cache_locs.py",
    "sglang/kernels/ops/speculative/spec_tree.py",
    "sglang/srt/mem_cache/allocation.py",
    "sglang/srt/mem_cache/memory_pool.py",
)

WORKER_MODULE = "sglang.srt.speculative.eagle_worker_v2"
TOPK1_MODULE = "sglang.kernels.ops.speculative.topk1"
MULTI_LAYER_MODULE = "sglang.srt.speculative.multi_layer_eagle_worker_v2"
CACHE_MOVE_MODULE = "sglang.kernels.ops.kvcache.cache_move"
EAGLE_OPS_MODULE = "sglang.kernels.ops.speculative.eagle"
CACHE_LOCS_MODULE = "sglang.kernels.ops.speculative.cache_locs"
SPEC_TREE_MODULE = "sglang.kernels.ops.speculative.spec_tree"
ALLOCATION_MODULE = "sglang.srt.mem_cache.allocation"

# Executed from the wheel's file, unchanged (torch, triton and the standard library only, once
# their sglang imports resolve as below).
REAL_MODULES = (
    TOPK1_MODULE,
    WORKER_MODULE,
    MULTI_LAYER_MODULE,
    "sglang.srt.speculative.standalone_worker_v2",
    "sglang.srt.model_executor.forward_context",
    "sglang.srt.utils.msgspec_utils",
    # Each picks, at import, the sgl-kernel CPU op (`from sgl_kernel import ...`, only on "cpu") or
    # the Triton kernel it launches elsewhere: tests/test_sglang_cpu_stand_ins.py runs both.
    CACHE_MOVE_MODULE,
    EAGLE_OPS_MODULE,
    CACHE_LOCS_MODULE,
    SPEC_TREE_MODULE,
    ALLOCATION_MODULE,
)

# Module -> functions compiled from that module's real source text (the rest of the module is not
# loadable here). Their globals: torch and the standard library.
LIFTED: dict[str, tuple[str, ...]] = {
    "sglang.srt.utils.common": ("fast_topk", "next_power_of_2"),
    "sglang.srt.speculative.eagle_utils": ("per_step_draft_out_cache_loc",),
    # the token chain of draft_forward off CUDA/ROCm (the CPU engine's path)
    "sglang.srt.speculative.spec_utils": ("_select_top_k_tokens_first", "_select_top_k_tokens_later",
                                          "select_top_k_tokens"),
}
# Globals a lifted function needs beyond torch, executed before it is compiled. The later-steps
# selection is wrapped in `torch.compile(disable=_is_npu or _is_xpu)`: the children run with
# TORCHDYNAMO_DISABLE=1, so it runs eagerly (compiling costs seconds and changes no result).
LIFTED_GLOBALS: dict[str, str] = {
    "sglang.srt.speculative.spec_utils": "from sglang.srt.utils.common import fast_topk\n_is_npu = _is_xpu = False",
}
# Package -> the lifted module whose lifted functions it re-exports (sglang/srt/utils/__init__.py:
# `from sglang.srt.utils.common import *`; the kernels' modules import `next_power_of_2` from it).
REEXPORTED: dict[str, str] = {"sglang.srt.utils": "sglang.srt.utils.common"}


class PlaceholderUsed(RuntimeError):
    """Code under test called into a module that is only a placeholder here."""


class WheelUnavailable(RuntimeError):
    """The wheel could not be obtained (no network, no pip): one line saying why."""


# ---- the wheel ------------------------------------------------------------------------------------


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglang-spec-harness")
    return Path(base)


def source_root() -> Path:
    """The directory holding the extracted `sglang/...` files (downloading the wheel if needed)."""
    root = cache_dir() / f"sglang-{SGLANG_VERSION}-src"
    done = root / ".complete"
    # the wheel's digest and the member list: a tree extracted for another list is extracted again
    marker = f"{WHEEL_SHA256} {hashlib.sha256(' '.join(MEMBERS).encode()).hexdigest()[:16]}"
    if done.is_file() and done.read_text().strip() == marker:
        return root
    wheel_env = os.environ.get(WHEEL_ENV)
    with tempfile.TemporaryDirectory(prefix="sglang-wheel-", dir=_mkdir(cache_dir())) as tmp:
        wheel = Path(wheel_env) if wheel_env else _download(Path(tmp))
        try:
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        except OSError as exc:
            raise WheelUnavailable(f"{WHEEL_ENV}={wheel}: cannot read ({exc.strerror or exc})") from None
        if digest != WHEEL_SHA256:
            raise WheelUnavailable(f"{wheel}: sha256 {digest}, expected {WHEEL_SHA256} (sglang {SGLANG_VERSION})")
        staging = Path(tmp) / "src"
        with zipfile.ZipFile(wheel) as archive:
            for member in MEMBERS:
                target = staging / member
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
        (staging / ".complete").write_text(marker + "\n")
        if root.exists():  # an older or half-written tree: replace it
            shutil.rmtree(root, ignore_errors=True)
        try:
            staging.rename(root)
        except OSError:
            if not (done.is_file() and done.read_text().strip() == marker):
                raise  # not a concurrent download that finished first
    return root


def source_root_or_skip(*, need_triton: bool = False) -> Path:
    """`source_root()` for a test fixture: skipped where the wheel (or Triton, for the tests that run
    SGLang's Triton kernels) cannot be had; under CI, which has the registries and the test extras,
    that is a failure instead."""
    import pytest

    def unavailable(why: str) -> NoReturn:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)

    if need_triton:
        try:
            import triton  # noqa: F401  (a test dependency: pyproject.toml, extra `test`)
        except ImportError as exc:
            unavailable(f"triton is not installed ({exc}); `pip install -e '.[test]'`")
    try:
        return source_root()
    except WheelUnavailable as exc:
        unavailable(str(exc))


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _download(into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
               "--timeout", "60", "--retries", "3", *PIP_TARGET, "--dest", str(into), f"sglang=={SGLANG_VERSION}"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelUnavailable(f"pip download sglang=={SGLANG_VERSION} failed: {exc}") from None
    wheel = into / WHEEL_NAME
    if proc.returncode != 0 or not wheel.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise WheelUnavailable(f"pip download sglang=={SGLANG_VERSION} failed (exit {proc.returncode}): {last}")
    return wheel


# ---- lifting functions out of a source file ------------------------------------------------------


def lift(path: Path, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    """Compile the top-level defs/classes `names` of `path` into `namespace` (their real text and
    line numbers; tracebacks point into the wheel's file). A name `Class.method` compiles that
    method as a plain function under its own name (for a class that cannot be built here)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        found.update({f"{cls.name}.{node.name}": node for node in cls.body if isinstance(node, ast.FunctionDef)})
    missing = [n for n in names if n not in found]
    if missing:
        raise LookupError(f"{path}: no top-level {', '.join(missing)}")
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body)
    flags = __import__("__future__").annotations.compiler_flag if future else 0
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    exec(compile(module, str(path), "exec", flags=flags, dont_inherit=True), namespace)


# ---- the stand-ins ----------------------------------------------------------------------------------

_PLATFORMS = ("cuda", "hip", "cpu", "npu", "musa", "xpu")


class _Namespace(types.SimpleNamespace):
    """A data class stand-in: keyword arguments become attributes."""


class _IndexTopKShareState:
    @staticmethod
    def mtp_iteration(*_args: Any, **_kwargs: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


def _no_op(*_args: Any, **_kwargs: Any) -> None:
    return None


class _InTreePlatform:
    """`current_platform` of a platform built into SGLang (no out-of-tree plugin is registered)."""

    @staticmethod
    def is_out_of_tree() -> bool:
        return False


def _standins(platform: str, spec: Any, prepare_for_draft_extend: Callable[..., Any] | None) -> dict[str, dict[str, Any]]:
    """Module -> name -> object, with why each may stand in (it is not what the tests assert)."""
    probes = {f"is_{p}": (lambda p=p: p == platform) for p in _PLATFORMS}
    return {
        # Which branch the worker module takes is decided at import by these probes.
        "sglang.srt.utils.common": {**probes, "get_available_gpu_memory": _no_op, "log_info_on_rank0": _no_op},
        # sglang.srt.utils re-exports common's names; standalone_worker_v2 also reads an environment
        # flag at import through it (unset here: false).
        "sglang.srt.utils": {**probes, "get_bool_env_var": lambda name, default="false": os.getenv(name, default).lower() in ("true", "1")},
        # Debug probes, off by default (SGLANG_ENABLE_NAN_LOGITS_CHECK / SGLANG_ENABLE_ASYNC_ASSERT).
        "sglang.srt.utils.async_probe": {"maybe_detect_nan": _no_op, "maybe_detect_inf": _no_op,
                                         "maybe_detect_oob": _no_op},
        # DSA index sharing across MTP steps: a no-op context unless the model uses it.
        "sglang.srt.layers.attention.index_topk_share": {"IndexTopKShareState": _IndexTopKShareState},
        # The server's resolved speculative settings (greedy, no rejection sampling).
        "sglang.srt.runtime_context": {"get_spec": lambda: spec},
        # Batch assembly for the draft-extend forward: the test gives the forward's logits itself.
        "sglang.srt.speculative.eagle_worker_common": {
            "prepare_for_draft_extend": prepare_for_draft_extend or (lambda *a, **k: _Namespace(args=a, kwargs=k))},
        "sglang.srt.speculative.eagle_info": {"EagleDraftExtendInput": _Namespace},
        # The cache-loc wrappers first ask for an out-of-tree platform's own function: none here.
        "sglang.srt.platforms": {"current_platform": _InTreePlatform()},
    }


# ---- the finder -------------------------------------------------------------------------------------


def _placeholder_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name, f"placeholder for {name} (tests/support/sglang_wheel.py)")
    cache: dict[str, type] = {}

    def __getattr__(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr not in cache:
            qualname = f"{name}.{attr}"

            def __init__(self: Any, *_args: Any, **_kwargs: Any) -> None:
                raise PlaceholderUsed(f"{qualname} is a placeholder in the tests: the code under test "
                                      "took a path the stubs do not cover")

            cache[attr] = type(attr, (), {"__init__": __init__, "__module__": name, "__harness_placeholder__": True})
        return cache[attr]

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__harness_placeholder__ = True  # type: ignore[attr-defined]
    return module


class _ModuleLoader(importlib.abc.Loader):
    def __init__(self, build: Callable[[types.ModuleType], None]):
        self._build = build

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        self._build(module)


class WheelFinder(importlib.abc.MetaPathFinder):
    """Serves every `sglang` module name: real, lifted, stand-in, package or placeholder."""

    def __init__(self, root: Path, platform: str, spec: Any, prepare_for_draft_extend: Callable[..., Any] | None):
        self.root = root
        self.standins = _standins(platform, spec, prepare_for_draft_extend)
        self.loaded: dict[str, str] = {}  # module name -> how it was served (what a test may report)

    def _file(self, name: str) -> Path:
        return self.root / (name.replace(".", "/") + ".py")

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "sglang" and not fullname.startswith("sglang."):
            return None
        if fullname in REAL_MODULES:
            self.loaded[fullname] = "real"
            return importlib.util.spec_from_file_location(fullname, self._file(fullname))
        self.loaded[fullname] = ("lifted" if fullname in LIFTED else "stand-in" if fullname in self.standins
                                 else "placeholder")
        # Every served module is also a package: any of them may be the parent of another.
        spec = importlib.machinery.ModuleSpec(fullname, _ModuleLoader(self._build), is_package=True)
        spec.submodule_search_locations = []
        return spec

    def _build(self, module: types.ModuleType) -> None:
        name = module.__name__
        module.__getattr__ = _placeholder_module(name).__getattr__  # type: ignore[method-assign]
        if name == "sglang":  # what sglang/__init__.py exports for the version, without the rest
            namespace: dict[str, Any] = {}
            version_file = self._file("sglang._version")  # written by the wheel's build (setuptools-scm)
            exec(compile(version_file.read_text(), str(version_file), "exec"), namespace)
            module.__version__ = namespace["__version__"]  # type: ignore[attr-defined]
        if name in LIFTED:
            namespace = {"__name__": name}
            exec("import torch\n" + LIFTED_GLOBALS.get(name, ""), namespace)  # the lifted functions' globals
            lift(self._file(name), LIFTED[name], namespace)
            for attr in LIFTED[name]:
                setattr(module, attr, namespace[attr])
        if name in REEXPORTED:
            source = importlib.import_module(REEXPORTED[name])
            for attr in LIFTED[REEXPORTED[name]]:
                setattr(module, attr, getattr(source, attr))
        for attr, value in self.standins.get(name, {}).items():
            setattr(module, attr, value)
        if self.loaded.get(name) == "placeholder":
            module.__harness_placeholder__ = True  # type: ignore[attr-defined]


def install(root: Path, *, platform: str = "cuda", spec: Any = None,
            prepare_for_draft_extend: Callable[..., Any] | None = None) -> WheelFinder:
    """Serve `sglang` from the extracted wheel in this process (after any import hook already on
    sys.meta_path, such as the harness patch's, so that hook still sees the worker module)."""
    if platform not in _PLATFORMS:
        raise ValueError(f"platform must be one of {_PLATFORMS}")
    if platform == "hip":
        import torch

        torch.version.hip = torch.version.hip or "6.4.0"  # what the patch reads for "on ROCm"
    finder = WheelFinder(Path(root), platform,
                         spec if spec is not None else _Namespace(speculative_use_rejection_sampling=False),
                         prepare_for_draft_extend)
    position = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder), len(sys.meta_path))
    sys.meta_path.insert(position, finder)
    return finder
