"""What every engine's server command shares: `ServerCommand` (argv, environment, CPUs), the
variant's environment (patches, PYTHONPATH, the profiler's directory) and its interpreter. A leaf of
the engines package: `micro.py` and `sglang.py` build on it, and `__init__.py` picks between them."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

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
