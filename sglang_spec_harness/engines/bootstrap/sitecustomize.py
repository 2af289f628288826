"""Harness patch bootstrap: imports the modules named in $HARNESS_PATCHES into every Python process.

The harness puts this directory on a server's PYTHONPATH when a variant has `patches:`. Python
imports `sitecustomize` at start-up in every interpreter that inherits that environment, so the
patches also reach processes SGLang spawns (scheduler, TP workers), not only the launcher.

Rules, because a baseline that silently runs the fast path would be a false measurement:
- another `sitecustomize` later on sys.path (a venv's, a distribution's) still runs, first;
- a patch module that cannot be imported ends the process: one line on stderr, exit status 70.

Standard library only: this runs in SGLang's interpreter, which may lack the harness's dependencies.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys

PATCHES_ENV = "HARNESS_PATCHES"
# EX_SOFTWARE from sysexits.h: distinct from SGLang's own failures and from signals.
PATCH_FAILURE_EXIT_CODE = 70

_HERE = os.path.dirname(os.path.realpath(__file__))


def _chain_next_sitecustomize() -> None:
    """Run the `sitecustomize` that this one shadows (the first one after this directory on sys.path)."""
    entries: list[str] = []
    seen_self = False
    for entry in sys.path:
        if os.path.realpath(entry or os.getcwd()) == _HERE:
            seen_self = True
            entries.clear()  # only entries after this directory would have been searched next
            continue
        entries.append(entry)
    if not seen_self:
        entries = [e for e in sys.path if os.path.realpath(e or os.getcwd()) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", entries)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # mirror site.py: a broken sitecustomize warns, never aborts
        sys.stderr.write(
            f"Error in sitecustomize ({spec.origin}, chained by the harness bootstrap); "
            f"set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n"
        )
        if sys.flags.verbose:
            import traceback

            traceback.print_exc()
    globals()["chained_sitecustomize"] = module


def _requested_patches() -> list[str]:
    return [name.strip() for name in os.environ.get(PATCHES_ENV, "").split(",") if name.strip()]


# Written to stderr after the patches imported, so the harness can see in server.log that the
# bootstrap really ran (another sitecustomize earlier on sys.path would shadow it silently).
IMPORTED_MARKER = "harness bootstrap: patches imported:"


def _import_patches() -> None:
    requested = _requested_patches()
    for name in requested:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # any failure must stop the process, loudly
            message = str(exc).splitlines()[0] if str(exc) else ""
            sys.stderr.write(
                f"harness bootstrap: cannot import patch module {name!r} named in ${PATCHES_ENV} "
                f"(pid {os.getpid()}): {type(exc).__name__}: {message}\n"
            )
            sys.stderr.flush()
            # os._exit, not SystemExit: site.py would turn an exception here into a fatal
            # initialisation error with a traceback, or (for Exception) a warning and carry on.
            os._exit(PATCH_FAILURE_EXIT_CODE)
    if requested:
        sys.stderr.write(f"{IMPORTED_MARKER} {','.join(requested)} (pid {os.getpid()})\n")
        sys.stderr.flush()


_chain_next_sitecustomize()
_import_patches()
