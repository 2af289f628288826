"""An environment per SGLang release on this CPU, built once and cached (`prepare`).

Shared, under the prefix (`.sglang-cpu`, where `make sglang-cpu` builds):
- `venv/`: the base, one per torch build. torch 2.13.0+cpu is the only CPU build on this machine's
  disk, so there is one, `make sglang-cpu`'s (with SGLang 0.5.23 and requirements.txt);
- `releases/deps/<set>/`: an overlay per dependency set of `releases.toml` (the release's own
  transformers pin and what that pin needs that the base does not satisfy), installed without
  dependencies, in front of the base's site-packages;
- `releases/sglang/<release>/`: the release's own source (`pip install --no-deps --target`), first
  on PYTHONPATH, so that the server, the shims (`importlib.metadata`) and `sglang.__version__` see it.

Each folder is built in a temporary folder beside it and renamed into place once complete, with
a stamp file (`.harness-release.json`) written last: a half-built folder is never taken for a built
one, and a second `prepare` only reads stamps. The release the base venv holds itself (0.5.23)
resolves to the base venv, with no copy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sglang_spec_harness.import_root import harness_import_root
from sglang_spec_harness.pages.numbers import seconds
from sglang_spec_harness.releases.environments import (
    Progress,
    ReleaseEnvironment,
    ReleaseUnavailable,
    built_folder,
    dist_version,
    release_pins,
)
from sglang_spec_harness.sglang_cpu import port
from sglang_spec_harness.sglang_cpu.base import SMOKE_CODE, is_current, venv_python
from sglang_spec_harness.sglang_cpu.release_table import ReleaseRow, TableError, UnknownRelease, load_table

PACKAGE = "sglang"
RELEASES_DIR = "releases"
# Release pins recorded against what runs: package -> the names a release's METADATA may pin it by.
PINNED = {"torch": ("torch",), "transformers": ("transformers",), "sgl_kernel": ("sglang-kernel", "sgl-kernel")}
SGL_KERNEL_USED = "harness stand-in (sglang_spec_harness/sglang_cpu/stand_ins/sgl_kernel)"


def base_site_packages(prefix: Path) -> Path:
    """The base venv's site-packages (venv/lib/pythonX.Y/site-packages)."""
    found = sorted((prefix / "venv" / "lib").glob("python3*/site-packages"))
    if not found:
        raise ReleaseUnavailable(f"{prefix / 'venv'} has no site-packages: run `make sglang-cpu`")
    return found[0]


# ---- prepare ---------------------------------------------------------------------------------------


def table_row(release: str) -> ReleaseRow:
    try:
        return load_table(known_kinds=port.KNOWN_KINDS).row(release)
    except (TableError, UnknownRelease) as exc:
        raise ReleaseUnavailable(str(exc)) from None


def prepare(release: str, prefix: Path = Path(".sglang-cpu"), progress: Progress = print) -> ReleaseEnvironment:
    """The environment that runs `release` here: built on first use, then read from its stamps.
    ReleaseUnavailable (one line) for a release the table does not name, a missing base venv, or an
    install that fails."""
    release = release.strip()
    row = table_row(release)
    prefix = Path(os.path.abspath(prefix))
    if not is_current(prefix):
        raise ReleaseUnavailable(f"{release}: the base environment {prefix / 'venv'} is missing or out of date: "
                                 f"run `make sglang-cpu` (or python -m sglang_spec_harness.sglang_cpu.install --prefix {prefix})")
    python = venv_python(prefix)
    base_site = base_site_packages(prefix)
    base_release = dist_version(base_site, PACKAGE)
    built: dict[str, Any] = {}
    pythonpath: list[str] = []
    if release == base_release:
        source_dir, source_site = None, base_site
    else:
        source_dir = prefix / RELEASES_DIR / PACKAGE / release
        stamp, now = built_folder(python, [f"{PACKAGE}=={release}"], source_dir, release=release,
                                   what=f"{PACKAGE}=={release}", progress=progress)
        if now:
            built["source"] = {"seconds": stamp["seconds"], "bytes": stamp["bytes"]}
        if dist_version(source_dir, PACKAGE) != release:
            raise ReleaseUnavailable(f"{release}: {source_dir} holds no {PACKAGE}=={release} distribution")
        pythonpath.append(str(source_dir))
        source_site = source_dir
    deps = row.dependency_set
    deps_dir = None
    if deps.packages:
        deps_dir = prefix / RELEASES_DIR / "deps" / deps.name
        stamp, now = built_folder(python, list(deps.packages), deps_dir, release=release,
                                   what=f"dependency set {deps.name} ({' '.join(deps.packages)})", progress=progress)
        if now:
            built["dependency_set"] = {"seconds": stamp["seconds"], "bytes": stamp["bytes"]}
        pythonpath.append(str(deps_dir))
    pins = release_pins(source_site)
    used_site = {"torch": base_site, "transformers": deps_dir if deps_dir and dist_version(deps_dir, "transformers") else base_site}
    facts: dict[str, Any] = {"sglang": release, "python": str(python)}
    for key, names in PINNED.items():
        pinned = next((pins[n] for n in names if n in pins), None)
        if key == "sgl_kernel":
            facts[key] = {"pinned": pinned, "used": SGL_KERNEL_USED}
            continue
        used = dist_version(used_site[key], key)
        facts[key] = {"pinned": pinned, "used": used,
                      "own_pin": pinned is not None and used is not None and used.split("+")[0] == pinned}
    facts.update({
        "adaptations": [a.name for a in row.adaptations],
        "dependency_set": deps.name,
        "source_dir": str(source_dir) if source_dir else f"{base_site} (the base venv's own)",
        "built": ({"seconds": round(sum(p["seconds"] for p in built.values()), 1),
                   "bytes": sum(p["bytes"] for p in built.values()), "parts": built} if built else "cached"),
        "note": row.note,
    })
    return ReleaseEnvironment(release=release, python=str(python), pythonpath=pythonpath, env=dict(row.env),
                              args=dict(row.args), facts=facts)


class SglangCpuReleases:
    """The release environments of this CPU (an `EnvironmentProvider`), under the prefix of the
    variant's interpreter (`<prefix>/venv/bin/python`, e.g. `.sglang-cpu`): where `make sglang-cpu`
    built the 0.5.23 environment that the CPU scenarios name."""

    name = "sglang-cpu"

    def __init__(self, python: str):
        self.prefix = Path(os.path.abspath(python)).parents[2]  # not resolved: venv/bin/python is a link

    def prepare(self, release: str, progress: Progress = print) -> ReleaseEnvironment:
        return prepare(release, prefix=self.prefix, progress=progress)


def import_check(environment: ReleaseEnvironment, timeout: float = 600) -> None:
    """The release's EAGLE worker and HTTP server import with the shims in its environment, or one
    ReleaseUnavailable line with the last error line."""
    pythonpath = [*environment.pythonpath, str(harness_import_root())]
    env = {**os.environ, **environment.env, "PYTHONPATH": os.pathsep.join(pythonpath), "PYTHONNOUSERSITE": "1"}
    try:
        proc = subprocess.run([environment.python, "-c", SMOKE_CODE], capture_output=True, text=True, env=env,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseUnavailable(f"{environment.release}: import check: {exc}") from None
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        raise ReleaseUnavailable(f"{environment.release}: import check failed (exit {proc.returncode}): "
                                 f"{lines[-1] if lines else 'no output'}")


def main_release(releases: list[str], prefix: Path) -> int:
    """`install --release X ...`: prepare each, then the import check; one line and exit 1 on failure."""
    for release in releases:
        started = time.monotonic()
        try:
            environment = prepare(release, prefix)
            print(f"sglang-cpu {release}: import check (the EAGLE worker and the HTTP server, with the shims) ...", flush=True)
            import_check(environment)
        except ReleaseUnavailable as exc:
            print(f"sglang-cpu: {exc}", file=sys.stderr)
            return 1
        facts = environment.facts
        print(f"sglang-cpu {release}: ready in {seconds(time.monotonic() - started)}: {environment.python} with "
              f"PYTHONPATH {os.pathsep.join(environment.pythonpath) or '(the base venv)'}; torch {facts['torch']['used']} "
              f"(pin {facts['torch']['pinned']}), transformers {facts['transformers']['used']} (pin "
              f"{facts['transformers']['pinned']}); adaptations: {', '.join(facts['adaptations'])}", flush=True)
    return 0
