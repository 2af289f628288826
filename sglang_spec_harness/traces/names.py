"""Names of profiler categories and GPU runtime calls, per trace writer: data, not logic.

Kineto writers renamed their categories over time (`Kernel` -> `kernel`, `Runtime` ->
`cuda_runtime`); ROCm writes HIP calls under `cuda_runtime`; Nsight Systems keeps the `_vNNNNN`
suffix on runtime names. Matching is case-sensitive unless a pattern says otherwise.
"""

from __future__ import annotations

import re

# Kineto event category -> what the harness keeps it as.
GPU_OP_KIND_OF_CATEGORY: dict[str, str] = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}
RUNTIME_CATEGORIES: frozenset[str] = frozenset({"cuda_runtime", "Runtime", "cuda_driver", "Driver"})
# CPU-side spans that can label a launch; the value is the annotation kind kept in the model.
ANNOTATION_KIND_OF_CATEGORY: dict[str, str] = {
    "user_annotation": "user_annotation",
    "python_function": "python_function",
}
PYTHON_FRAME_CATEGORY = "python_function"  # with_stack frames: the bulk of a large trace
# A with_stack frame of Python source: `path/file.py(123): name` (the line is the code object's first
# line: the `def`, or its first decorator). Builtins (`<built-in method ...>`) and code without a file
# (`<string>(2): __init__`) do not match.
SOURCE_FRAME = re.compile(r"^(?P<file>[^<].*?)\((?P<line>\d+)\): (?P<function>.+)$")
# Where a frame's file lies under a folder of installed or checked-out packages, the path from the
# package on: PyTorch already writes paths relative to the sys.path entry they were imported from,
# but an editable install (`/sgl-workspace/sglang/python/sglang/srt/...`) or a file outside sys.path
# keeps its absolute path. The first match is cut off.
SOURCE_ROOTS: tuple[re.Pattern[str], ...] = (
    re.compile(r"^.*/(?:site|dist)-packages/"),
    re.compile(r"^.*/python/(?=sglang/)"),  # an SGLang checkout: python/sglang/...
)
CPU_OP_CATEGORIES: frozenset[str] = frozenset({"cpu_op", "Operator"})

# A runtime/driver call that replays a whole CUDA/HIP graph. Nsight keeps the version suffix
# (`cudaGraphLaunch_v10000`) and per-thread-stream variants (`_ptsz`, `_spt`).
GRAPH_LAUNCH_NAME = re.compile(r"^(?:cuda|hip|cu)GraphLaunch(?:_ptsz|_spt)?(?:_v\d+)?$")

# A runtime/driver call that launches one kernel (used only to notice capture traces, where
# launches are recorded but captured kernels never execute).
KERNEL_LAUNCH_NAME = re.compile(r"Launch(?:Cooperative)?Kernel")

# Kineto top-level keys that say which GPU runtime wrote the trace.
ROCM_METADATA_KEYS = ("hip_runtime_version", "roctracer_version")
CUDA_METADATA_KEYS = ("cuda_runtime_version", "cupti_version", "cuda_driver_version")

# SGLang's per-rank file names: `{prefix-}{profile_id}-TP-{rank}[...].trace.json.gz`.
RANK_IN_FILE_NAME = re.compile(r"-TP-(\d+)(?:\D|$)")
