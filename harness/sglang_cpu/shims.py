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
Standard library only at import time, like every patch module.
"""

from __future__ import annotations

import os
import sys
import types

from harness.patches.import_hooks import after_import
from harness.sglang_cpu import STAND_INS_DIR, skip_torchvision_meta_registrations

SHIM_NAME = "sglang_cpu_shims"
PATCH_FAILURE_EXIT_CODE = 70  # the bootstrap's code for "a requested patch could not be applied"
RUNTIME_CONTEXT_MODULE = "sglang.srt.runtime_context"
APPLIED_MARKER = "harness sglang_cpu shims:"


def _fail(message: str) -> None:
    sys.stderr.write(f"harness patch failed: {SHIM_NAME}: {message} (pid {os.getpid()})\n")
    sys.stderr.flush()
    os._exit(PATCH_FAILURE_EXIT_CODE)


def _refuse_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        _fail("torch sees a GPU here: the CPU stand-ins of harness.sglang_cpu are for CPU-only machines; "
              "use a GPU scenario (docs/gpu.md)")


def _set_has_amx(module: types.ModuleType) -> None:
    platform = getattr(module, "_PLATFORM", None)
    if platform is None or not hasattr(platform, "_install"):
        _fail(f"{module.__name__} has no _PLATFORM._install (SGLang layout changed): cannot keep the intel_amx backend")
        return
    platform._install(has_amx=True)


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
    after_import(RUNTIME_CONTEXT_MODULE, _set_has_amx, _fail)
    sys.stderr.write(f"{APPLIED_MARKER} sgl_kernel stand-ins from {STAND_INS_DIR}; has_amx set for the attention "
                     f"backend choice; torchvision meta registrations skipped (pid {os.getpid()})\n")
    sys.stderr.flush()


install()
