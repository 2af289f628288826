"""Release ranges: `A..B` names every final release and .postN of the package from A to B inclusive,
in version order (PEP 440, so 0.5.10.post1 sits between 0.5.10 and 0.5.11). Pre-releases and dev
releases are left out: a sweep replays what users installed."""

from __future__ import annotations

import bisect
import re
import subprocess
import sys
from collections.abc import Iterable

from packaging.version import InvalidVersion, Version

from sglang_spec_harness.errors import HarnessInputError

PACKAGE = "sglang"
RANGE_SEPARATOR = ".."
REGISTRY_TIMEOUT_S = 120


def parse_version(text: str, where: str) -> Version:
    try:
        version = Version(text)
    except InvalidVersion:
        raise HarnessInputError(f"{where}: {text!r} is not a release version (expected e.g. 0.5.13 or 0.5.12.post1)") from None
    if not is_release(version):
        raise HarnessInputError(f"{where}: {text} is a pre-, dev or local release: a range names final releases and .postN")
    return version


def is_release(version: Version) -> bool:
    """A final release or a post-release of one: what `pip install sglang==X` users ran."""
    return not version.is_prerelease and not version.is_devrelease and version.local is None


def sort_releases(names: Iterable[str]) -> list[str]:
    """The release names in version order, duplicates and non-releases dropped."""
    out: dict[Version, str] = {}
    for name in names:
        try:
            version = Version(name)
        except InvalidVersion:
            continue
        if is_release(version):
            out.setdefault(version, name)
    return [out[v] for v in sorted(out)]


def parse_range(spec: str, where: str = "--sglang-releases") -> tuple[Version, Version]:
    if RANGE_SEPARATOR not in spec:
        version = parse_version(spec.strip(), where)
        return version, version
    first, _, last = spec.partition(RANGE_SEPARATOR)
    low, high = parse_version(first.strip(), where), parse_version(last.strip(), where)
    if high < low:
        raise HarnessInputError(f"{where}: {spec}: the range runs backwards ({high} is older than {low})")
    return low, high


def releases_in_range(spec: str, available: Iterable[str], where: str = "--sglang-releases") -> list[str]:
    """The releases of `available` that `spec` (`A..B`, or one release) names, in version order.
    Both ends must be releases that exist: a typo must not silently shorten a sweep."""
    low, high = parse_range(spec, where)
    releases = sort_releases(available)
    versions = [Version(r) for r in releases]
    for end in (low, high):
        if end not in versions:
            at = bisect.bisect_left(versions, end)
            near = ", ".join(releases[max(at - 1, 0):at + 1]) or "none"
            raise HarnessInputError(f"{where}: {end} is not a release on the registry (the nearest: {near})")
    return [r for r, v in zip(releases, versions, strict=True) if low <= v <= high]


_PIP_INDEX_LINE = re.compile(r"^Available versions:\s*(.+)$", re.MULTILINE)


def registry_releases(package: str = PACKAGE, python: str = sys.executable) -> list[str]:
    """Every release of `package` on the registry pip is configured for (`pip index versions`), in
    version order. One line (HarnessInputError) when the registry cannot be asked."""
    argv = [python, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=REGISTRY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessInputError(f"cannot list the releases of {package} on the registry: {exc}") from None
    match = _PIP_INDEX_LINE.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip() and "WARNING" not in line]
        why = lines[-1].strip() if lines else f"pip exited with {proc.returncode}"
        raise HarnessInputError(f"cannot list the releases of {package} on the registry: {why}")
    return sort_releases(v.strip() for v in match.group(1).split(","))
