"""The SGLang engine: `python -m sglang.launch_server` with the scenario's flags.

SGLang has no switch for the topk==1 fast path, so a variant differs by its interpreter
(`python:`), its source tree (`pythonpath:`), its environment, or patch modules (`patches:`) that
the bootstrap `sitecustomize` imports into every process of the server.
"""

from __future__ import annotations

from pathlib import Path

from sglang_spec_harness.engines.command import ServerCommand, server_python, variant_environment
from sglang_spec_harness.engines.sglang_versions import ENGINE_OWNED_FLAGS, LAUNCH_MODULE, PATCH_INCOMPATIBLE_FLAGS
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.scenario import Scenario, render_args


def build_command(scenario: Scenario, variant: str, *, host: str, port: int, profile_dir: Path) -> ServerCommand:
    server = scenario.server
    if not server.model_path:
        raise HarnessInputError(
            f"scenario {scenario.name}: server.model_path: required for engine 'sglang' "
            "(the target model: a Hugging Face repo id or a local directory, passed as --model-path)"
        )
    args = scenario.server_args(variant)
    for flag in args:
        if flag in ENGINE_OWNED_FLAGS:
            where = "server.args" if flag in server.args else f"variants.{variant}.args"
            raise HarnessInputError(
                f"scenario {scenario.name}: {where}: {flag} is set by {ENGINE_OWNED_FLAGS[flag]}; remove it from args"
            )
    for patch in scenario.variants[variant].patches:
        for flag, why in PATCH_INCOMPATIBLE_FLAGS.get(patch, {}).items():
            if args.get(flag) not in (None, False):
                raise HarnessInputError(
                    f"scenario {scenario.name}: variants.{variant}: patch {patch} cannot be combined with {flag}: {why}"
                )
    argv = [server_python(scenario, variant), "-m", LAUNCH_MODULE, "--model-path", server.model_path]
    if server.draft_model_path:
        argv += ["--speculative-draft-model-path", server.draft_model_path]
    argv += ["--host", host, "--port", str(port), *render_args(args)]
    return ServerCommand(argv=argv, env=variant_environment(scenario, variant, profile_dir=profile_dir))
