"""The built-in micro engine: `python -m sglang_spec_harness.micro.server` with the scenario's flags.

The harness never imports the micro engine; it starts it as a server process like SGLang.
"""

from __future__ import annotations

from pathlib import Path

from sglang_spec_harness.engines.command import ServerCommand, server_python, variant_environment
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.scenario import Scenario, render_args

SERVER_MODULE = "sglang_spec_harness.micro.server"
# Flags the harness sets: a server binds loopback only, on a port the harness picked.
OWNED_FLAGS = {"--host": "the harness (loopback)", "--port": "the harness (a free port per trial)"}


def build_command(scenario: Scenario, variant: str, *, host: str, port: int, profile_dir: Path) -> ServerCommand:
    for flag in scenario.server_args(variant):
        if flag in OWNED_FLAGS:
            where = "server.args" if flag in scenario.server.args else f"variants.{variant}.args"
            raise HarnessInputError(
                f"scenario {scenario.name}: {where}: {flag} is set by {OWNED_FLAGS[flag]}; remove it from args"
            )
    argv = [
        server_python(scenario, variant),
        "-m",
        SERVER_MODULE,
        "--host",
        host,
        "--port",
        str(port),
        *render_args(scenario.server_args(variant)),
    ]
    return ServerCommand(argv=argv, env=variant_environment(scenario, variant, profile_dir=profile_dir))
