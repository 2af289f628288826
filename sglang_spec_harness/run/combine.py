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

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir import (
    SCHEMA_VERSION,
    AnalysisRecord,
    EnvironmentRecord,
    LaunchEntry,
    PlanEntry,
    RunRecord,
    read_record,
    write_record,
)


def adopt_trials(run_dir: Path, source: Path) -> list[str]:
    """Add `source`'s trials and launches to `run_dir` (hard-linked copies), merging run.json's plan and launches
    (in plan order), analysis.json and environment.json's variants. A run adopting an incomplete one
    becomes incomplete with its reason. Returns the adopted trial directories (`trials/...`)."""
    run_dir, source = Path(run_dir), Path(source)
    run, other = read_record(run_dir / "run.json", RunRecord), read_record(source / "run.json", RunRecord)
    if run.scenario != other.scenario or run.mode != other.mode:
        raise HarnessInputError(f"{source}: a run of scenario {other.scenario!r} ({other.mode}) cannot "
                                f"join {run_dir} ({run.scenario!r}, {run.mode})")
    adopted: list[PlanEntry | LaunchEntry] = [*other.plan, *other.launches]
    dirs: list[str] = []
    for entry in adopted:  # all checked before anything changes
        if entry.dir is None:
            raise HarnessInputError(f"{source / 'run.json'}: {entry.index}: an entry without `dir`")
        if (run_dir / entry.dir).exists() or (run_dir / entry.dir).is_symlink():
            raise HarnessInputError(f"{run_dir / entry.dir}: already exists: the two runs are not subsets of one plan")
        dirs.append(entry.dir)
    for rel in dirs:
        link_tree(run_dir / rel, source / rel)
    run.plan = sorted([*run.plan, *other.plan], key=lambda e: e.index)
    run.launches = sorted([*run.launches, *other.launches], key=lambda e: e.index)
    run.trials_done = (run.trials_done or 0) + (other.trials_done or 0)
    run.adopted_from = os.path.relpath(source.resolve(), run_dir.resolve())
    if other.status != "complete" and run.status == "complete":
        run.status, run.error = "incomplete", f"adopted run {source.name} is {other.status}: {other.error}"
    write_record(run_dir / "run.json", run)
    _merge_analysis(run_dir, source)
    _merge_environment(run_dir, source)
    return [entry.dir for entry in other.plan if entry.dir is not None]


def _hard_link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or links not allowed: a copy
        shutil.copy2(src, dst)


def link_tree(link: Path, target: Path, *, leave_out: frozenset[str] = frozenset()) -> None:
    """`target` copied to `link` as hard links (copies across filesystems), without the top-level
    entries named in `leave_out`."""
    link.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(target, link, symlinks=False, copy_function=_hard_link,
                    ignore=lambda folder, names: [n for n in names if n in leave_out and Path(folder) == target])


def _merge_analysis(run_dir: Path, source: Path) -> None:
    theirs_path = source / "analysis.json"
    if not theirs_path.exists():
        return
    ours_path = run_dir / "analysis.json"
    ours = (read_record(ours_path, AnalysisRecord) if ours_path.exists()
            else AnalysisRecord(schema_version=SCHEMA_VERSION, trials={}))
    theirs = read_record(theirs_path, AnalysisRecord)
    ours.trials = {**ours.trials, **theirs.trials}
    if theirs.errors:
        ours.errors = {**(ours.errors or {}), **theirs.errors}
    write_record(ours_path, ours)


def _merge_environment(run_dir: Path, source: Path) -> None:
    theirs_path, ours_path = source / "environment.json", run_dir / "environment.json"
    if not theirs_path.exists() or not ours_path.exists():
        return
    ours, theirs = read_record(ours_path, EnvironmentRecord), read_record(theirs_path, EnvironmentRecord)
    ours.variants = {**theirs.variants, **ours.variants}
    write_record(ours_path, ours)
