"""Where a release's code runs: a `ReleaseEnvironment` (an interpreter, a PYTHONPATH with the
release's own source first, and what the environment adds), built and cached by a provider.

Two providers:
- `TargetInstall` (any machine, the GPU runner's way): `pip install --no-deps --target` of the
  release beside the variant's own interpreter, whose compiled pieces (torch, sgl-kernel,
  flashinfer) stay what that environment has. A release that needs others fails to start, and the
  sweep says so; the facts record each pin against what was used.
- `sglang_spec_harness.sglang_cpu.releases` (this CPU): an environment per dependency set, with the harness's
  CPU stand-ins and the port pieces its release table names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.pages.numbers import megabytes, seconds

Progress = Callable[[str], None]
STAMP = ".harness-release.json"
# The pins a run records against what it used: the packages whose versions decide what runs.
PINNED_PACKAGES = ("torch", "sglang-kernel", "sgl-kernel", "transformers", "flashinfer-python", "triton")
INSTALL_TIMEOUT_S = 1800
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-spec-harness" / "releases"


class ReleaseUnavailable(Exception):
    """One line: which release cannot run here and why (not on the registry, a pin that cannot be
    installed, no adaptations known for it). The sweep prints it and goes on."""


@dataclass(frozen=True)
class ReleaseEnvironment:
    release: str
    python: str  # the interpreter that runs it
    pythonpath: list[str]  # prepended to PYTHONPATH: the release's own source first
    env: dict[str, str] = field(default_factory=dict)  # server environment the provider adds
    args: dict[str, Any] = field(default_factory=dict)  # server flags the provider adds
    facts: dict[str, Any] = field(default_factory=dict)  # JSON-able: what ran (pins vs used, what was not SGLang's)


class EnvironmentProvider(Protocol):
    name: str

    def prepare(self, release: str, progress: Progress) -> ReleaseEnvironment: ...


def read_json_stamp(path: Path) -> dict[str, Any] | None:
    """A build's stamp file as a dict; None when it is missing, unreadable or not a JSON object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_stamp(folder: Path) -> dict[str, Any] | None:
    return read_json_stamp(folder / STAMP)


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def pip_install_target(python: str | Path, requirements: list[str], folder: Path, *, release: str, what: str) -> dict[str, Any]:
    """`pip install --no-deps --target` into a temporary folder beside `folder`, stamped and renamed
    into place at the end, so that a half-built folder is never taken for a built one. The stamp: what
    was asked, seconds, bytes. ReleaseUnavailable (one line, pip's last) when pip fails."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.building.", dir=folder.parent))
    started = time.monotonic()
    try:
        if requirements:
            argv = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-compile", "--target", str(scratch), *requirements]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ReleaseUnavailable(f"{release}: cannot install {what}: {exc}") from None
            if proc.returncode != 0:
                lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines()
                         if line.strip() and not line.lstrip().startswith("WARNING")]
                raise ReleaseUnavailable(f"{release}: cannot install {what}: "
                                         f"{lines[-1] if lines else f'pip exited {proc.returncode}'}")
        stamp = {"requirements": requirements, "seconds": round(time.monotonic() - started, 1),
                 "bytes": directory_bytes(scratch), "built": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (scratch / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        theirs = read_stamp(folder)
        if theirs is not None and theirs.get("requirements") == requirements:
            return theirs  # another process finished it meanwhile: keep that one (a server may be using it)
        if folder.exists():  # a stale or foreign folder (no matching stamp): replaced whole
            shutil.rmtree(folder)
        scratch.rename(folder)
        return stamp
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def built_folder(python: str | Path, requirements: list[str], folder: Path, *, release: str, what: str,
                 progress: Progress) -> tuple[dict[str, Any], bool]:
    """The folder holding `requirements` (installed without dependencies), built unless its stamp
    already names them: (its stamp, whether it was built now)."""
    stamp = read_stamp(folder)
    if stamp is not None and stamp.get("requirements") == requirements:
        return stamp, False
    progress(f"{release}: installing {what} without dependencies into {folder}")
    stamp = pip_install_target(python, requirements, folder, release=release, what=what)
    progress(f"{release}: {what}: {seconds(stamp['seconds'])}, {megabytes(stamp['bytes'])}")
    return stamp, True


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def dist_version(site: Path, package: str) -> str | None:
    """The version of `package` installed in `site`, from its dist-info folder name."""
    for dist_info in site.glob("*.dist-info"):
        name, _, version = dist_info.name[: -len(".dist-info")].rpartition("-")
        if _normalized(name) == _normalized(package):
            return version
    return None


_PIN = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*\(?\s*==\s*([^\s;,)]+)\s*\)?\s*$")


def release_pins(site: Path, package: str = "sglang") -> dict[str, str]:
    """`name -> version` of the exact pins in the release's own METADATA (unconditional requirements:
    an extra's or a platform's carry a `;` and are not what a plain install pulls)."""
    version = dist_version(site, package)
    pins: dict[str, str] = {}
    try:
        lines = (site / f"{package}-{version}.dist-info" / "METADATA").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return pins
    for line in lines:
        match = _PIN.match(line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


_INSTALLED_PROBE = """
import json, sys
from importlib import metadata
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


def installed_versions(python: str, packages: tuple[str, ...] = PINNED_PACKAGES) -> dict[str, str]:
    """What `python` has installed of `packages`, by distribution metadata."""
    env = {**os.environ, "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run([python, "-c", _INSTALLED_PROBE, *packages], capture_output=True, text=True,
                              timeout=120, env=env, check=False)
        return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {}


def pins_against_used(pins: dict[str, str], used: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per pinned package: the release's pin, what ran instead (None: not installed), and whether they agree."""
    out: dict[str, dict[str, Any]] = {}
    for name in PINNED_PACKAGES:
        if name in pins:
            ran = used.get(name)
            out[name] = {"pinned": pins[name], "used": ran,
                         "own_pin": ran is not None and ran.split("+")[0] == pins[name]}
    return out


class TargetInstall:
    """The release's own source beside a given interpreter (`pip install --no-deps --target`), cached
    per release under `cache`."""

    name = "target"

    def __init__(self, python: str, cache: Path = DEFAULT_CACHE, package: str = "sglang"):
        self.python, self.cache, self.package = python, Path(cache), package

    def prepare(self, release: str, progress: Progress = print) -> ReleaseEnvironment:
        # One folder per release: wheels for one Python ABI carry compiled parts, so the folder is
        # only for interpreters of the same Python (the stamp says which installed it).
        folder = self.cache / f"{self.package}-{release}"
        stamp, now = built_folder(self.python, [f"{self.package}=={release}"], folder, release=release,
                                  what=f"{self.package}=={release}", progress=progress)
        if dist_version(folder, self.package) != release:
            raise ReleaseUnavailable(f"{release}: {folder} holds no {self.package}=={release} distribution")
        facts = {"provider": self.name, "sglang": release, "python": self.python, "source_dir": str(folder),
                 "pins": pins_against_used(release_pins(folder, self.package), installed_versions(self.python)),
                 "built": {"seconds": stamp["seconds"], "bytes": stamp["bytes"]} if now else "cached",
                 "not_sglang": "nothing: the interpreter's own packages (compiled pieces included)"}
        return ReleaseEnvironment(release=release, python=self.python, pythonpath=[str(folder)], facts=facts)


def check_provider_name(name: str, choices: tuple[str, ...]) -> str:
    if name not in choices:
        raise HarnessInputError(f"--environments {name}: expected one of {', '.join(choices)}")
    return name
