"""The real SGLang server on a CPU: SGLang 0.5.23 (`scenarios/sglang_cpu_tiny_eagle_topk1.yaml`) and
older releases back to 0.5.10 (`scenarios/sglang_cpu_release_sweep.yaml`).

Nothing here is part of the GPU path. SGLang's CPU engine needs a few things that PyPI does not
provide for a plain x86 CPU; this package supplies them, and a scenario opts in by naming
`sglang_spec_harness.sglang_cpu.shims` in its variants' `patches:` (the bootstrap then imports it into every
server process):

- `shims`: the platform shims (torchvision's CUDA-only registrations skipped, the `intel_amx`
  attention backend kept on a CPU without AMX) and the `sgl_kernel` stand-ins put on `sys.path`;
  then the adaptations `releases.toml` names for the SGLang release on the path;
- `releases.toml` and `release_table`: per release, its dependency set and its adaptations (with
  the release-specific module paths, op signatures and kernel names);
- `port`: the adaptations, one named function per kind (for releases before 0.5.16, the CPU
  plumbing around the draft that SGLang lacks; never the draft's token selection);
- `stand_ins/sgl_kernel`: the CPU ops SGLang's EAGLE path calls, in torch (no CPU build of
  sgl-kernel is on PyPI), and the Triton kernels older releases launch on every platform;
- `tiny_models`: a tiny Llama target and an EAGLE draft head built locally (no hub);
- `base`: the base environment under the prefix: its python, the stamp that says it is built and
  current, the import check;
- `install`: builds it (sglang 0.5.23 without its dependencies, plus the pinned ones in
  `requirements.txt`, and the models), once, by `make sglang-cpu`; `--release X` also prepares a
  release;
- `releases`: an environment per release (`prepare`), cached under `.sglang-cpu/releases/`:
  the release's own source and its dependency set's overlay in front of the base venv.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

SGLANG_VERSION = "0.5.23"
PACKAGE_DIR = Path(__file__).resolve().parent
# Put on sys.path by `shims`: holds the `sgl_kernel` stand-in package.
STAND_INS_DIR = PACKAGE_DIR / "stand_ins"


def skip_torchvision_meta_registrations() -> None:
    """PyPI's torchvision 0.28.0 is a CUDA build: beside torch 2.13.0+cpu its `_C` cannot load and its
    meta registrations fail on the missing `torchvision::nms`. SGLang and transformers import only
    pure-Python parts of torchvision, which work without them."""
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
