"""The release table (`releases.toml`): which CPU adaptations and which dependency set each SGLang
release uses here. Standard library only: the shims read it inside SGLang's interpreter.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_spec_harness.sglang_cpu import PACKAGE_DIR

TABLE_PATH = PACKAGE_DIR / "releases.toml"
# A release as `pip install sglang==X` names it: a final release or a .postN of one.
RELEASE_PATTERN = re.compile(r"^\d+(\.\d+)*(\.post\d+)?$")
ADD_A_RELEASE = (f"add it to the `versions` of a [[releases]] row in {TABLE_PATH} (its dependency set and "
                 "adaptations; docs/gpu.md, 'SGLang releases on this CPU')")


class TableError(Exception):
    """The table itself is wrong: one line naming the entry."""


class UnknownRelease(Exception):
    """No row of the table names this release: one line saying how to add it."""


@dataclass(frozen=True)
class Adaptation:
    name: str
    kind: str
    what: str
    params: dict[str, Any]  # the kind's arguments: module paths, signatures, kernel names


@dataclass(frozen=True)
class DependencySet:
    name: str
    packages: tuple[str, ...]  # requirements installed with --no-deps into the set's overlay folder
    note: str = ""


@dataclass(frozen=True)
class ReleaseRow:
    release: str
    dependency_set: DependencySet
    adaptations: tuple[Adaptation, ...]
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class ReleaseTable:
    adaptations: dict[str, Adaptation]
    dependency_sets: dict[str, DependencySet]
    rows: dict[str, ReleaseRow]  # release -> its row

    def row(self, release: str) -> ReleaseRow:
        try:
            return self.rows[release]
        except KeyError:
            raise UnknownRelease(f"SGLang {release} is not in the CPU release table: {ADD_A_RELEASE}") from None

    def releases(self) -> list[str]:
        return sorted(self.rows, key=release_key)


def release_key(release: str) -> tuple[tuple[int, ...], int]:
    """Version order of final releases and .postN (0.5.10 < 0.5.10.post1 < 0.5.11)."""
    if not RELEASE_PATTERN.match(release):
        raise ValueError(f"{release!r} is not a release version (expected e.g. 0.5.13 or 0.5.12.post1)")
    base, _, post = release.partition(".post")
    return tuple(int(p) for p in base.split(".")), int(post) if post else -1


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TableError(f"{where}: expected a list of strings")
    return value


def parse_table(data: dict[str, Any], known_kinds: frozenset[str] | None = None, where: str = str(TABLE_PATH)) -> ReleaseTable:
    """The table from parsed TOML; `known_kinds` (port.ADAPTATION_KINDS) checks every kind exists."""
    if data.get("schema") != 1:
        raise TableError(f"{where}: schema must be 1")
    sets: dict[str, DependencySet] = {}
    for name, entry in (data.get("dependency_sets") or {}).items():
        sets[name] = DependencySet(name, tuple(_strings(entry.get("packages", []), f"{where}: dependency_sets.{name}.packages")),
                                   str(entry.get("note", "")))
    adaptations: dict[str, Adaptation] = {}
    for name, entry in (data.get("adaptations") or {}).items():
        kind = entry.get("kind")
        if not isinstance(kind, str) or (known_kinds is not None and kind not in known_kinds):
            raise TableError(f"{where}: adaptations.{name}: kind {kind!r} is not one of {sorted(known_kinds or ())}")
        params = {k: v for k, v in entry.items() if k not in ("kind", "what")}
        adaptations[name] = Adaptation(name, kind, str(entry.get("what", "")), params)
    rows: dict[str, ReleaseRow] = {}
    for i, entry in enumerate(data.get("releases") or []):
        at = f"{where}: releases[{i}]"
        versions = _strings(entry.get("versions"), f"{at}.versions")
        set_name = entry.get("dependency_set")
        if set_name not in sets:
            raise TableError(f"{at}: dependency_set {set_name!r} is not one of {sorted(sets)}")
        names = _strings(entry.get("adaptations", []), f"{at}.adaptations")
        unknown = [n for n in names if n not in adaptations]
        if unknown:
            raise TableError(f"{at}: adaptation(s) {', '.join(unknown)} not defined under [adaptations]")
        env = entry.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise TableError(f"{at}.env: expected string values")
        args = entry.get("args", {})
        if not isinstance(args, dict) or not all(str(k).startswith("--") for k in args):
            raise TableError(f"{at}.args: expected `--flag = value` entries")
        for release in versions:
            if not RELEASE_PATTERN.match(release):
                raise TableError(f"{at}: {release!r} is not a release version")
            if release in rows:
                raise TableError(f"{at}: {release} is in two rows")
            rows[release] = ReleaseRow(release, sets[set_name], tuple(adaptations[n] for n in names), dict(env),
                                       dict(args), str(entry.get("note", "")))
    return ReleaseTable(adaptations, sets, rows)


def load_table(path: Path = TABLE_PATH, known_kinds: frozenset[str] | None = None) -> ReleaseTable:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TableError(f"{path}: {exc}") from None
    return parse_table(data, known_kinds, str(path))
