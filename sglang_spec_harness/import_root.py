"""The folder a server's PYTHONPATH gets so that another interpreter can import the harness: it holds
the `sglang_spec_harness` package and nothing else.

Not the directory the package sits in: after `pip install .` that is the harness environment's whole
site-packages, and a variant with an interpreter of its own (`python:`, an SGLang venv) would then
import this environment's torch and numpy before its own. In a source checkout it would also offer
`tests`, `scripts` and `benchmarks` as top-level modules.

The folder is cached per package location (`$XDG_CACHE_HOME/sglang-spec-harness/import-roots/KEY`)
and holds a symlink `sglang_spec_harness -> the package`, so that an editable install's servers see the source as
it is now. Concurrent runs are safe: the link is made under a unique name and renamed into place
(atomic on POSIX). Where the cache cannot be written or links cannot be made, a folder of this
process's own is used instead (a link, else a copy), removed at exit.

Standard library only: `sglang_spec_harness.sglang_cpu.install` uses it before anything else is set up.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_NAME = PACKAGE_DIR.name
IMPORT_ROOTS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-spec-harness" / "import-roots"


def _link_points_at_package(link: Path) -> bool:
    try:
        return link.is_symlink() and Path(os.readlink(link)) == PACKAGE_DIR
    except OSError:
        return False


def _remove_dangling_roots(cache: Path) -> None:
    """Forget the folders of packages that are gone (a removed venv, a test's temporary install)."""
    try:
        folders = list(cache.iterdir())
    except OSError:
        return
    for folder in folders:
        link = folder / PACKAGE_NAME
        if link.is_symlink() and not link.exists():  # the link is there, its package is not
            shutil.rmtree(folder, ignore_errors=True)


def _cached_import_root(cache: Path) -> Path:
    """cache/KEY with `PACKAGE_NAME -> PACKAGE_DIR`, made or repaired if needed; OSError where it cannot be."""
    # One folder per package location: two installs (a venv and a checkout) never share a link.
    root = cache / hashlib.sha256(str(PACKAGE_DIR).encode()).hexdigest()[:16]
    link = root / PACKAGE_NAME
    if _link_points_at_package(link):
        return root
    _remove_dangling_roots(cache)
    root.mkdir(parents=True, exist_ok=True)
    staged = root / f".{PACKAGE_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    os.symlink(PACKAGE_DIR, staged, target_is_directory=True)
    try:
        # Atomic: a concurrent run sees the old link or the new one, never none (both point here).
        os.replace(staged, link)
    except OSError:
        staged.unlink(missing_ok=True)
        raise
    return root


def _private_import_root() -> Path:
    """A folder of this process's own (removed at exit): a link to the package, else a copy."""
    root = Path(tempfile.mkdtemp(prefix="harness-import-root-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    try:
        os.symlink(PACKAGE_DIR, root / PACKAGE_NAME, target_is_directory=True)
    except OSError:  # no symlinks here (some Windows setups): copy, byte code left out
        shutil.copytree(PACKAGE_DIR, root / PACKAGE_NAME, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@functools.cache
def harness_import_root() -> Path:
    """A folder whose only entry is the harness package: what a server's PYTHONPATH gets."""
    try:
        return _cached_import_root(IMPORT_ROOTS_CACHE)
    except OSError:
        return _private_import_root()
