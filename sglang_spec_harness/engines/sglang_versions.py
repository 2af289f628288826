"""SGLang names that change between releases, as data (the engine and the tests read them here).

The names the restore-softmax patch looks for live beside the patch
(`sglang_spec_harness.patches.draft_shape.DRAFT_CODE`): that module runs inside SGLang's
interpreter, where importing `sglang_spec_harness.engines` (pydantic, yaml) is not guaranteed to work.
"""

from __future__ import annotations

# The server entry point; 0.5.23 also has `sglang serve`, but `-m sglang.launch_server` works in
# every release the harness targets and needs no console script on PATH.
LAUNCH_MODULE = "sglang.launch_server"

# Flags the engine adds itself, from `server.model_path`, `server.draft_model_path` and the trial's
# host and port; a scenario must not repeat them (or their aliases) in `args`.
ENGINE_OWNED_FLAGS: dict[str, str] = {
    "--model-path": "server.model_path",
    "--model": "server.model_path",
    "--speculative-draft-model-path": "server.draft_model_path",
    "--speculative-draft-model": "server.draft_model_path",
    "--host": "the harness (loopback)",
    "--port": "the harness (a free port per trial)",
}

# Flags renamed or deprecated by a release: old name -> what to write instead. In 0.5.23 an old
# CUDA-graph name is not merely deprecated but ambiguous to argparse (`--cuda-graph-max-bs` is a
# prefix of both `...-decode` and `...-prefill`), so the server refuses to start.
RENAMED_FLAGS: dict[str, dict[str, str]] = {
    "0.5.23": {
        "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
        "--cuda-graph-bs": "--cuda-graph-bs-decode",
        "--disable-cuda-graph": "--cuda-graph-backend-decode disabled",
    },
}

# The patch module that gives a baseline without a second install (see the SGLang scenarios).
RESTORE_TOPK1_SOFTMAX_PATCH = "sglang_spec_harness.patches.sglang_restore_topk1_softmax"

# Server flags with which a patch cannot make a baseline: patch -> flag -> why. The engine refuses
# the combination before starting anything (the patch itself also refuses at run time, exit 70).
PATCH_INCOMPATIBLE_FLAGS: dict[str, dict[str, str]] = {
    RESTORE_TOPK1_SOFTMAX_PATCH: {
        "--enable-multi-layer-eagle": (
            "SGLang 0.5.23 then runs MultiLayerEagleWorkerV2, whose draft has no topk==1 fast path (it "
            "already selects with softmax + fast_topk): the patch has nothing to restore and the A/B "
            "would compare identical code"
        ),
    },
}
