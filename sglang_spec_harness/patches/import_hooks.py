"""Run code right after a module is imported, before its importer sees it (patch modules share this).

Standard library only: it runs inside the server's interpreter (SGLang's).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any
from collections.abc import Callable


class PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then `after_exec(module)`."""

    def __init__(self, loader: Any, after_exec: Callable[[types.ModuleType], None], marker: str | None = None):
        self._loader = loader
        self._after_exec = after_exec
        self._marker = marker

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        if self._marker:
            module.__dict__.pop(self._marker, None)  # importlib.reload re-executes into the same dict
        self._loader.exec_module(module)
        self._after_exec(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, resource readers, ...
        return getattr(self._loader, name)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds `module_name` with the other finders and wraps its loader. A loader that cannot be
    wrapped calls `on_error(message)`, which must not return normally for a patch that must apply."""

    def __init__(self, module_name: str, after_exec: Callable[[types.ModuleType], None],
                 on_error: Callable[[str], None], marker: str | None = None):
        self.module_name = module_name
        self.after_exec = after_exec
        self.on_error = on_error
        self.marker = marker

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module_name:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, PatchOnImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            self.on_error(f"cannot hook the import of {fullname}: its loader {spec.loader!r} has no exec_module")
            return spec
        spec.loader = PatchingLoader(spec.loader, self.after_exec, self.marker)
        return spec


class RefuseOnImport(importlib.abc.MetaPathFinder):
    """Calls `on_import(fullname)` when `module_name` is about to be imported (to end the process)."""

    def __init__(self, module_name: str, on_import: Callable[[str], None]):
        self.module_name = module_name
        self.on_import = on_import

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> None:
        if fullname == self.module_name:
            self.on_import(fullname)
        return None


def after_import(module_name: str, callback: Callable[[types.ModuleType], None], on_error: Callable[[str], None],
                 *, marker: str | None = None) -> None:
    """`callback(module)` now if the module is loaded, and whenever it is (re)imported; installed once."""
    if module_name in sys.modules:
        callback(sys.modules[module_name])
    if not any(isinstance(f, PatchOnImport) and f.module_name == module_name for f in sys.meta_path):
        sys.meta_path.insert(0, PatchOnImport(module_name, callback, on_error, marker))


def refuse_import(module_name: str, on_import: Callable[[str], None]) -> None:
    """`on_import(name)` when the module is imported later (installed once)."""
    if not any(isinstance(f, RefuseOnImport) and f.module_name == module_name for f in sys.meta_path):
        sys.meta_path.insert(0, RefuseOnImport(module_name, on_import))
