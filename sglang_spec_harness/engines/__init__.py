"""Engines: how to start a variant's server. The harness talks to every engine only over HTTP.

`build_server_command(scenario, variant, ...)` returns the argv and environment of the server
process, placed on the scenario's CPUs; the engine-specific part (which module, which flags) lives in
`micro.py` and `sglang.py`, and what every engine's command shares (`ServerCommand`, the variant's
environment, its interpreter) in `command.py`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from sglang_spec_harness.engines.command import (
    HARNESS_SOURCE_ROOT,
    PATCH_BOOTSTRAP_DIR,
    PATCHES_ENV,
    ServerCommand,
    server_python,
    variant_environment,
)
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.scenario import Scenario

# the package's face: what every engine's command shares is command.py's
__all__ = [
    "HARNESS_SOURCE_ROOT",
    "PATCHES_ENV",
    "PATCH_BOOTSTRAP_DIR",
    "ServerCommand",
    "available_cpus",
    "build_server_command",
    "keep_off_cpus",
    "server_cpus",
    "server_python",
    "variant_environment",
]

# While a run keeps the harness off its servers' CPUs (`keep_off_cpus`), the CPUs it had before:
# a server started meanwhile is placed against those, not against the harness's narrowed set.
_CPUS_BEFORE_KEEPING_OFF: list[int] | None = None


def available_cpus() -> list[int]:
    """The CPUs the harness may run on (all of them where affinity is not supported)."""
    if _CPUS_BEFORE_KEEPING_OFF is not None:
        return list(_CPUS_BEFORE_KEEPING_OFF)
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def server_cpus(scenario: Scenario) -> tuple[int, ...] | None:
    """`server.cpus` resolved on this machine (negative entries count from the last available CPU)."""
    wanted = scenario.server.cpus
    if not wanted:
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise HarnessInputError("server.cpus: CPU affinity is not supported on this platform; remove it")
    available = available_cpus()
    out = []
    for cpu in wanted:
        if cpu < 0 and -cpu <= len(available):
            out.append(available[cpu])
        elif cpu >= 0 and cpu in available:
            out.append(cpu)
        else:
            raise HarnessInputError(f"server.cpus: CPU {cpu} is not available here (available: "
                                    f"{', '.join(map(str, available))}; -1 is the last of them)")
    return tuple(sorted(set(out)))


@contextlib.contextmanager
def keep_off_cpus(cpus: tuple[int, ...] | None) -> Iterator[None]:
    """While a run lasts, the harness (its client, its threads started meanwhile) keeps off the CPUs
    its servers are pinned to (`server.cpus`), so that streaming the answers does not compete with
    the server being measured; with no other CPU left it shares them."""
    global _CPUS_BEFORE_KEEPING_OFF
    before = sorted(os.sched_getaffinity(0)) if cpus else []
    rest = set(before) - set(cpus or ())
    if not rest or _CPUS_BEFORE_KEEPING_OFF is not None:
        yield
        return
    _CPUS_BEFORE_KEEPING_OFF = before
    os.sched_setaffinity(0, rest)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        _CPUS_BEFORE_KEEPING_OFF = None


def build_server_command(
    scenario: Scenario, variant: str, *, host: str, port: int, profile_dir: Path
) -> ServerCommand:
    if scenario.engine == "micro":
        from sglang_spec_harness.engines.micro import build_command
    else:
        from sglang_spec_harness.engines.sglang import build_command
    command = build_command(scenario, variant, host=host, port=port, profile_dir=profile_dir)
    cpus = server_cpus(scenario)
    return command if cpus is None else ServerCommand(command.argv, command.env, cpus)
