"""Platform shims for SGLang 0.5.23's CPU engine on a plain x86 CPU (a patch module: `patches:`).

Imported by the harness bootstrap into every process of the server (launcher, scheduler,
detokenizer) before SGLang loads. Three shims, each for one thing that stops the real server here:

1. `torchvision._meta_registrations` is skipped. PyPI's torchvision 0.28.0 is a CUDA build whose
   `_C` cannot load beside torch 2.13.0+cpu; its meta registrations then fail on the missing
   `torchvision::nms` op. SGLang imports only the pure-Python `torchvision.transforms` (at config
   import time), which works without them.
2. The platform fact `has_amx` is set. On a CPU without AMX, SGLang turns `--attention-backend
   intel_amx` into `torch_native` (`srt/arg_groups/overrides.py`), and EAGLE has no torch_native
   draft-decode backend (`srt/speculative/draft_utils.py`: "EAGLE is not supported in decode
   attention backend torch_native"). Only that fact changes: the layers' own
   `cpu_has_amx_support()` stays false, so RMSNorm, SiLU, linear and rotary keep their torch paths.
3. `sgl_kernel` resolves to the torch stand-ins in `stand_ins/` (no CPU build of sgl-kernel is on
   PyPI; SGLang's CPU paths import it at module level).

A machine where torch sees a GPU is refused: these stand-ins must never be measured there.

Which SGLang release is on the path is read from its distribution metadata (`importlib.metadata`,
without importing sglang), and the adaptations `releases.toml` names for it are applied
(`port.py`: how the backend choice is kept in that release, and for releases before 0.5.16 the CPU
plumbing SGLang lacks). A release the table does not name stops the process (exit 70) with one line
saying how to add it. Without any sglang distribution (a unit test) the table's row for the
release `make sglang-cpu` installs is used.
Standard library only at import time, like every patch module.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

from sglang_spec_harness.sglang_cpu import SGLANG_VERSION, STAND_INS_DIR, port, skip_torchvision_meta_registrations
from sglang_spec_harness.sglang_cpu.release_table import ReleaseRow, TableError, UnknownRelease, load_table

SHIM_NAME = "sglang_cpu_shims"
PATCH_FAILURE_EXIT_CODE = 70  # the bootstrap's code for "a requested patch could not be applied"
APPLIED_MARKER = "harness sglang_cpu shims:"


def _fail(message: str) -> None:
    sys.stderr.write(f"harness patch failed: {SHIM_NAME}: {message} (pid {os.getpid()})\n")
    sys.stderr.flush()
    os._exit(PATCH_FAILURE_EXIT_CODE)


def _refuse_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        _fail("torch sees a GPU here: the CPU stand-ins of sglang_spec_harness.sglang_cpu are for CPU-only machines; "
              "use a GPU scenario (docs/gpu.md)")


def installed_release() -> str | None:
    """The version of the first sglang distribution on sys.path (the release's own source comes first
    on PYTHONPATH), or None when there is none. SGLang itself is not imported."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def release_row(release: str | None) -> ReleaseRow:
    """The table's row for `release` (None: the release `make sglang-cpu` installs); ends the process
    with one line when the table is broken or does not name the release."""
    try:
        return load_table(known_kinds=port.KNOWN_KINDS).row(release or SGLANG_VERSION)
    except (TableError, UnknownRelease) as exc:
        _fail(str(exc))
        raise  # not reached: _fail ends the process


def _put_stand_ins_first() -> None:
    path = str(STAND_INS_DIR)
    if path not in sys.path:
        sys.path.insert(0, path)
    loaded = sys.modules.get("sgl_kernel")
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(path):
        _fail(f"a real sgl_kernel was imported before the stand-ins ({loaded.__file__})")


def install() -> None:
    _refuse_a_gpu()
    skip_torchvision_meta_registrations()
    _put_stand_ins_first()
    release = installed_release()
    row = release_row(release)
    port.apply(row.adaptations, _fail)
    sys.stderr.write(f"{APPLIED_MARKER} sgl_kernel stand-ins from {STAND_INS_DIR}; has_amx set for the attention "
                     f"backend choice; torchvision meta registrations skipped (pid {os.getpid()})\n")
    found = f"SGLang {release}" if release else f"no sglang distribution on the path: the row of {SGLANG_VERSION}"
    sys.stderr.write(f"{APPLIED_MARKER} {found}: adaptations {', '.join(a.name for a in row.adaptations) or 'none'} "
                     f"(releases.toml) (pid {os.getpid()})\n")
    sys.stderr.flush()


install()
