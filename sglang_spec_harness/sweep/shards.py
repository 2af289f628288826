"""A sweep spread over runners: which points a shard runs (`Shard`), and what makes folders parts of
one sweep (`identity`), so that `harness sweep merge` joins only the shards of one sweep.

A sharded sweep is one experiment as an unsharded one is: one baseline run (`harness sweep baseline`),
adopted by every point of every shard (`--baseline-from`), one scenario (the same seed), one harness.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir import read_json
from sglang_spec_harness.scenario import Scenario

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# sweep.json's fields that must agree between the parts of one sweep (the baseline step, each shard)
# (the scenario's hash last: the fields before it say more when they differ)
IDENTITY_FIELDS = ("name", "scenario", "axis", "range", "revisions", "variant", "rules", "overrides", "notes",
                   "environments", "harness", "scenario_sha256")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`: the points whose position is index - 1 modulo count, so
    that every shard spans the whole range (the environments of old and new releases differ in cost)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        match = _SHARD.match(text)
        if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)):
            raise HarnessInputError(f"--shard {text}: expected I/N with 1 <= I <= N (e.g. 1/2)")
        return cls(int(match.group(1)), int(match.group(2)))

    def owns(self, position: int) -> bool:
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def describe(self) -> str:
        return f"shard {self.index} of {self.count}"


def scenario_sha256(scenario: Scenario) -> str:
    """The scenario as the points run it (its rules, design and seed), paths inside the harness's
    checkout written relative to it (runners check it out in different places)."""
    text = json.dumps(scenario.model_dump(mode="json"), sort_keys=True).replace(str(HARNESS_SOURCE_ROOT), "<harness>")
    return hashlib.sha256(text.encode()).hexdigest()


def baseline_id(run_dir: Path) -> str | None:
    """The baseline run's identity: its run.json, written once at its end (start, plan, pids), so a
    copy (an artifact, hard links) is the same run and another run of the same scenario is not."""
    path = run_dir / "run.json"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None


def read_sweep_json(folder: Path, what: str) -> dict[str, Any]:
    """A sweep folder's sweep.json (the run files' reader: size cap, one line when broken)."""
    path = folder / "sweep.json"
    if not path.is_file():
        raise HarnessInputError(f"{what} {folder}: no sweep.json there")
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise HarnessInputError(f"{path}: expected an object with a `points` list")
    return data


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def identity_difference(ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """The first field of sweep.json in which two parts of a sweep disagree (`scenario_sha256: a vs
    b`), else None."""
    for field in IDENTITY_FIELDS:
        if ours.get(field) != theirs.get(field):
            return f"{field}: {_shown(ours.get(field))} vs {_shown(theirs.get(field))}"
    return None


def point_keys(points: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """The points of a sweep as (position, point, label): what its parts must agree on."""
    return [(p.get("position"), p.get("point"), p.get("label")) for p in points if isinstance(p, dict)]
