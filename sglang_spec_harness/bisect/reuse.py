"""Points a bisection need not run again (`harness bisect --reuse SWEEP_FOLDER`).

A nightly sweep has already measured the ends of the range a bisection then searches (and, over
releases, often every release of it). A point the sweep ran under the same scenario is judged from
the sweep's stored trials instead of a new server launch: the step's run directory is a copy of the
stored one made of hard links (as `sglang_spec_harness.run.combine` adopts trials), whose scenario.yaml holds the
bisection's rules, checked and reported like any step. "The same scenario" means everything that
decides what the trials measured: the engine, the server and its flags, the variant as it ran at the
point (interpreter, patches, environment), the workload, the profiler's settings and the design. The
name, the rules and the trials' seed may differ; a stored point that differs in anything else, or
that did not complete, or lacks a trial the rules read, is run again, and the step says why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_spec_harness.bisect.plan import Need
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import write_text_atomic
from sglang_spec_harness.run.combine import link_tree
from sglang_spec_harness.rundir import RunRecord, read_json, read_record, write_record
from sglang_spec_harness.scenario import Scenario, load_scenario, scenario_to_yaml

# Written again for the step (its own rules): never carried over from the stored run.
_REGENERATED = frozenset({"results.json", "index.html", "junit.xml", "summary.md"})
WORKTREE = "<worktree>"


@dataclass(frozen=True)
class StoredPoint:
    point: str  # the release, or the full commit hash
    run_dir: Path
    worktree: str | None  # git: the worktree the point ran from (masked when comparing)


def stored_points(folder: Path) -> dict[str, StoredPoint]:
    """The points a sweep folder ran (sweep.json), by release or commit hash. Bad input: one line."""
    path = folder / "sweep.json"
    if not path.is_file():
        raise HarnessInputError(f"--reuse {folder}: no sweep.json there (give a sweep's folder, "
                                "e.g. reports/sweeps/<timestamp>-<scenario>)")
    data = read_json(path)  # the run files' reader: size cap, finite numbers, one line when broken
    points = data.get("points") if isinstance(data, dict) else None
    if not isinstance(points, list):
        raise HarnessInputError(f"{path}: expected an object with a `points` list")
    found: dict[str, StoredPoint] = {}
    for i, entry in enumerate(points):
        if not isinstance(entry, dict) or not isinstance(entry.get("point"), str):
            raise HarnessInputError(f"{path}: points[{i}]: expected an object with a string `point`")
        if entry.get("status") != "ran" or not isinstance(entry.get("run_dir"), str):
            continue
        run_dir = Path(entry["run_dir"])
        if not run_dir.is_absolute():
            run_dir = folder / run_dir
        environment = entry.get("environment")
        worktree = environment.get("worktree") if isinstance(environment, dict) else None
        found[entry["point"]] = StoredPoint(entry["point"], run_dir, worktree if isinstance(worktree, str) else None)
    return found


def _measured(scenario: Scenario, variant: str, worktree: str | None) -> dict[str, Any]:
    """What decides the trials' measurements: the scenario less its name, description, rules and seed;
    a git point's worktree path replaced by a placeholder (the commit is compared instead)."""
    data = scenario.model_dump(mode="json")
    for key in ("name", "description", "rules"):
        data.pop(key, None)
    data.get("trials", {}).pop("seed", None)
    if worktree:
        spec = data["variants"][variant]
        spec["pythonpath"] = [entry.replace(worktree, WORKTREE) for entry in spec.get("pythonpath", [])]
        spec.pop("description", None)
    return data


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b), key=str):
            out += _differences(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
        return out
    return [] if a == b else [where or "(scenario)"]


def why_not_reusable(stored: StoredPoint, scenario: Scenario, variant: str, needs: set[Need],
                     worktree: Path | None = None) -> tuple[Scenario | None, str]:
    """(the stored scenario, "") when the stored point can stand for a run of `scenario` at the point;
    else (None, why not)."""
    run_json = stored.run_dir / "run.json"
    try:
        record = read_record(run_json, RunRecord)
        theirs = load_scenario(stored.run_dir / "scenario.yaml")
    except HarnessInputError as exc:
        return None, f"cannot read it: {exc}"
    if record.status != "complete":
        return None, f"it is {record.status}"
    ran = {(entry.variant, entry.kind) for entry in record.plan}
    missing = sorted(needs - ran)
    if missing:
        return None, "it has no " + ", ".join(f"{arm} {kind}" for arm, kind in missing) + " trials, which the rules read"
    differ = _differences(_measured(theirs, variant, stored.worktree),
                          _measured(scenario, variant, str(worktree) if worktree else None))
    if differ:
        return None, f"it ran another scenario ({', '.join(differ[:4])}{' ...' if len(differ) > 4 else ''} differ)"
    return theirs, ""


def copy_stored_run(stored: StoredPoint, theirs: Scenario, rules: Scenario, run_dir: Path) -> None:
    """The step's run directory: the stored run's files as hard links (copies across filesystems),
    its scenario.yaml with the bisection's rules, run.json naming the run it came from."""
    link_tree(run_dir, stored.run_dir, leave_out=_REGENERATED)
    write_text_atomic(run_dir / "scenario.yaml", scenario_to_yaml(theirs.model_copy(update={"rules": rules.rules})))
    record = read_record(run_dir / "run.json", RunRecord)
    record.adopted_from = os.path.relpath(stored.run_dir.resolve(), run_dir.resolve())
    record.sweep = None  # a step of the bisection, not a second point of the sweep in the history
    write_record(run_dir / "run.json", record)
