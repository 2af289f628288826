"""Run directories written by older harnesses: one migration per schema version, applied in order on
load (as pyperf and asv keep old result files readable), so that every reader sees the current shape
and none keeps its own check for an old one. A version newer than SCHEMA_VERSION is refused.

A migration takes the parsed JSON of one record (or, for `scenario.yaml`, which carries no version of
its own, the resolved scenario as YAML data, at run.json's version) and returns it in the next
version's shape. Records are migrated in memory only: the files stay as written.

Versions:
1  0.1.0 and before (import package `harness`)
2  the import package renamed `sglang_spec_harness`: the resolved scenario names patch modules
   `sglang_spec_harness.*`; run.json always says its `mode`
3  one word for what a scenario declares: the resolved scenario's `checks:` is `rules:`
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir.models import SCHEMA_VERSION
from sglang_spec_harness.scenario import current_module_name, with_current_keys

# What a migration is given: which record, and its data.
RecordKind = Literal["run.json", "analysis.json", "environment.json", "results.json", "scenario.yaml"]
Migration = Callable[[RecordKind, dict[str, Any]], dict[str, Any]]

FIRST_VERSION = 1


def _v1_to_v2(kind: RecordKind, data: dict[str, Any]) -> dict[str, Any]:
    """The rename: patch modules `harness.X` -> `sglang_spec_harness.X`; a run.json without `mode`
    (written before the warm modes) ran in `restart` mode."""
    if kind == "scenario.yaml":
        variants = data.get("variants")
        for spec in variants.values() if isinstance(variants, dict) else ():
            if isinstance(spec, dict) and isinstance(spec.get("patches"), list):
                spec["patches"] = [current_module_name(n) if isinstance(n, str) else n for n in spec["patches"]]
    elif kind == "run.json" and data.get("mode") is None:
        data["mode"] = "restart"
    return data


def _v2_to_v3(kind: RecordKind, data: dict[str, Any]) -> dict[str, Any]:
    """The stored scenario's `checks:` under its current name, `rules:` (scenario.LEGACY_KEYS)."""
    return with_current_keys(data) if kind == "scenario.yaml" else data


# version -> the migration to version + 1
MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2, 2: _v2_to_v3}


def version_of(path: Path, data: dict[str, Any]) -> int:
    """A record's schema version (absent: the current one); another type or a newer version: one line."""
    version = data.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int or not FIRST_VERSION <= version <= SCHEMA_VERSION:
        raise HarnessInputError(
            f"{path}: schema_version {json.dumps(version)[:40]}, this harness reads "
            f"{FIRST_VERSION} to {SCHEMA_VERSION}: written by another version of the harness"
        )
    return version


def migrate(kind: RecordKind, data: dict[str, Any], version: int) -> dict[str, Any]:
    """`data` (of `version`) in the current version's shape; a copy when anything is migrated."""
    if version == SCHEMA_VERSION:
        return data
    data = copy.deepcopy(data)
    for step in range(version, SCHEMA_VERSION):
        data = MIGRATIONS[step](kind, data)
    if kind != "scenario.yaml":
        data["schema_version"] = SCHEMA_VERSION
    return data
