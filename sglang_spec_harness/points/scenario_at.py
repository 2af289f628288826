"""The scenario at a point: one variant moved to a commit (its `pythonpath` entries inside the
repository moved into that commit's worktree) or to a release (its environment, from a provider).
"""

from __future__ import annotations

import os
from pathlib import Path

from sglang_spec_harness.releases.environments import EnvironmentProvider, ReleaseEnvironment, TargetInstall, check_provider_name
from sglang_spec_harness.scenario import Scenario

PROVIDERS = ("auto", "sglang-cpu", "target")
CPU_PATCH_PREFIX = "sglang_spec_harness.sglang_cpu"


def _absolute(entry: str) -> Path:
    return Path(os.path.realpath(Path(entry).expanduser()))


def paths_inside(scenario: Scenario, variant: str, repo_root: Path) -> list[str]:
    """The variant's `pythonpath` entries that lie inside the repository."""
    return [entry for entry in scenario.variants[variant].pythonpath if _absolute(entry).is_relative_to(repo_root)]


def at_commit(scenario: Scenario, variant: str, repo_root: Path, worktree: Path, label: str) -> Scenario:
    """The scenario with the variant's `pythonpath` entries inside the repository moved into the
    worktree (its `patches:` are imported from there too), its description naming the commit."""
    spec = scenario.variants[variant]
    moved = [str(worktree / _absolute(entry).relative_to(repo_root)) if _absolute(entry).is_relative_to(repo_root)
             else entry for entry in spec.pythonpath]
    description = f"{spec.description} [{label}]".strip()
    variants = {**scenario.variants, variant: spec.model_copy(update={"pythonpath": moved, "description": description})}
    return scenario.model_copy(update={"variants": variants})


def provider_for(name: str, python: str, patches: list[str]) -> EnvironmentProvider:
    """Where a release point runs, as `--environments NAME` asks: `sglang-cpu`, this CPU's
    environments (`sglang_spec_harness.sglang_cpu.releases`); `target`, the release installed
    beside the variant's interpreter; `auto`, this CPU's when the variant runs the CPU shims (a CPU
    scenario), else the target's."""
    check_provider_name(name, PROVIDERS)
    if name == "auto":
        name = "sglang-cpu" if any(p.startswith(CPU_PATCH_PREFIX) for p in patches) else "target"
    if name == "sglang-cpu":
        from sglang_spec_harness.sglang_cpu.releases import SglangCpuReleases  # only for CPU scenarios

        return SglangCpuReleases(python)
    return TargetInstall(python)


def at_release(scenario: Scenario, variant: str, environment: ReleaseEnvironment) -> Scenario:
    """The scenario with `variant` running the release: its interpreter and source first on
    PYTHONPATH, the flags and environment the release needs here, and `server.sglang_version` set, so
    that the run checks the release on the path before any server starts."""
    spec = scenario.variants[variant]
    update = {
        "python": environment.python,
        "pythonpath": [*environment.pythonpath, *spec.pythonpath],
        "env": {**spec.env, **environment.env},
        "args": {**spec.args, **environment.args},
        "description": f"{spec.description} [SGLang {environment.release}]".strip(),
    }
    variants = {**scenario.variants, variant: spec.model_copy(update=update)}
    server = scenario.server.model_copy(update={"sglang_version": environment.release})
    return scenario.model_copy(update={"variants": variants, "server": server})
