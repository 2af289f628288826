"""Engines: how to start a variant's server. The harness talks to every engine only over HTTP.

`build_server_command(scenario, variant, ...)` returns the argv and environment of the server
process; the engine-specific part (which module, which flags) lives in `micro.py` and `sglang.py`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.import_root import harness_import_root
from sglang_spec_harness.scenario import Scenario

# The directory that holds the `sglang_spec_harness` package: a source checkout, or site-packages after
# `pip install .`. Never a server's PYTHONPATH (see sglang_spec_harness.import_root); environment.json asks git here.
HARNESS_SOURCE_ROOT = Path(__file__).resolve().parents[2]
# A directory with a `sitecustomize.py` that imports the modules named in $HARNESS_PATCHES in
# every Python process of the server, spawned workers included (SGLang's scheduler runs in a
# child process, where a patch applied in the launcher alone would be lost).
PATCH_BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
PATCHES_ENV = "HARNESS_PATCHES"


@dataclass(frozen=True)
class ServerCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to (and overriding) os.environ
    cpus: tuple[int, ...] | None = None  # CPU affinity of the server's processes once it is healthy

    def shell(self) -> str:
        """The command as one copy-pasteable line, environment first (for --dry-run and logs)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        pin = f"taskset -c {','.join(map(str, self.cpus))} " if self.cpus else ""
        return (env + " " if env else "") + pin + shlex.join(self.argv)


def variant_environment(scenario: Scenario, variant: str, *, profile_dir: Path) -> dict[str, str]:
    """Environment additions shared by all engines: server env, variant env, PYTHONPATH, patches."""
    spec = scenario.variants[variant]
    env: dict[str, str] = {}
    env.update(scenario.server.env)
    env.update(spec.env)
    pythonpath = [*spec.pythonpath]
    if spec.patches:
        pythonpath.append(str(PATCH_BOOTSTRAP_DIR))
        env[PATCHES_ENV] = ",".join(spec.patches)
    # the harness alone, so that another interpreter (an SGLang venv) can import the micro engine and
    # the patches without this environment's site-packages
    pythonpath.append(str(harness_import_root()))
    inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *([inherited] if inherited else [])])
    env["SGLANG_TORCH_PROFILER_DIR"] = str(profile_dir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def server_python(scenario: Scenario, variant: str) -> str:
    return scenario.variants[variant].python or sys.executable


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
