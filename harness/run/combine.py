"""One run directory from two runs of subsets of the same plan (same scenario, same seed).

`harness bisect` runs the baseline's trials once and the bisected variant's at every commit; each
step's run directory then adopts the baseline's trials so that `harness check` and `harness report`
see one ordinary run. Subsets keep their places in the full plan (`make_plan(select=...)`), so their
trial and launch directories never clash. The adopted directories are copies made of hard links: a
profiled SGLang trace is tens of MB and every step would copy it, while a hard link costs no space;
and the step stays a self-contained run directory (readers refuse symbolic links that lead out of a
run, since a run directory is untrusted input). Across filesystems the files are copied.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from harness.errors import HarnessInputError
from harness.rundir import read_json
from harness.run.execute import write_json


def adopt_trials(run_dir: Path, source: Path) -> list[str]:
    """Add `source`'s trials and launches to `run_dir` (hard-linked copies), merging run.json's plan and launches
    (in plan order), analysis.json and environment.json's variants. A run adopting an incomplete one
    becomes incomplete with its reason. Returns the adopted trial directories (`trials/...`)."""
    run_dir, source = Path(run_dir), Path(source)
    run, other = read_json(run_dir / "run.json"), read_json(source / "run.json")
    if run.get("scenario") != other.get("scenario") or run.get("mode", "restart") != other.get("mode", "restart"):
        raise HarnessInputError(f"{source}: a run of scenario {other.get('scenario')!r} ({other.get('mode')}) cannot "
                                f"join {run_dir} ({run.get('scenario')!r}, {run.get('mode')})")
    plan, launches = other.get("plan") or [], other.get("launches") or []
    for entry in [*plan, *launches]:  # all checked before anything changes
        if (run_dir / entry["dir"]).exists() or (run_dir / entry["dir"]).is_symlink():
            raise HarnessInputError(f"{run_dir / entry['dir']}: already exists: the two runs are not subsets of one plan")
    for entry in [*plan, *launches]:
        _link(run_dir / entry["dir"], source / entry["dir"])
    changes: dict[str, Any] = {
        "plan": sorted([*(run.get("plan") or []), *plan], key=lambda e: e["index"]),
        "launches": sorted([*(run.get("launches") or []), *launches], key=lambda e: e["index"]),
        "trials_done": int(run.get("trials_done") or 0) + int(other.get("trials_done") or 0),
        "adopted_from": os.path.relpath(source.resolve(), run_dir.resolve()),
    }
    if other.get("status") != "complete" and run.get("status") == "complete":
        changes.update(status="incomplete", error=f"adopted run {source.name} is {other.get('status')}: {other.get('error')}")
    write_json(run_dir / "run.json", {**run, **changes})
    _merge_analysis(run_dir, source)
    _merge_environment(run_dir, source)
    return [entry["dir"] for entry in plan]


def _link(link: Path, target: Path) -> None:
    def hard_link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another filesystem, or links not allowed: a copy
            shutil.copy2(src, dst)

    link.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(target, link, symlinks=False, copy_function=hard_link)


def _merge_analysis(run_dir: Path, source: Path) -> None:
    theirs_path = source / "analysis.json"
    if not theirs_path.exists():
        return
    ours_path = run_dir / "analysis.json"
    ours = read_json(ours_path) if ours_path.exists() else {"schema_version": 1, "trials": {}}
    theirs = read_json(theirs_path)
    ours.setdefault("trials", {}).update(theirs.get("trials") or {})
    if theirs.get("errors"):
        ours.setdefault("errors", {}).update(theirs["errors"])
    write_json(ours_path, ours)


def _merge_environment(run_dir: Path, source: Path) -> None:
    theirs_path, ours_path = source / "environment.json", run_dir / "environment.json"
    if not theirs_path.exists() or not ours_path.exists():
        return
    ours, theirs = read_json(ours_path), read_json(theirs_path)
    ours["variants"] = {**(theirs.get("variants") or {}), **(ours.get("variants") or {})}
    write_json(ours_path, ours)
