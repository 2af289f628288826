"""`harness sweep merge SHARD_FOLDER...`: the shards of one sweep joined into one sweep folder, as an
unsharded sweep would have written it: sweep.json with every point in the sweep's order, the points'
run directories (hard links to the shards', copies across file systems: the merged folder stands
alone), the baseline run they adopted, the history database, and the series, change points and
explanations computed over the whole sweep (`facts.write_history`, as after a whole sweep).

Everything is checked before anything is written: each folder is a shard (`part: shard`) of the same
sweep (`shards.IDENTITY_FIELDS`, the same points, the same baseline run), no shard is given twice, each
holds its own share of the points and their run directories, and none is missing, unless `partial`:
then the missing shards' points are points that could not run (a gap in the series, never a zero).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.pages.numbers import seconds
from sglang_spec_harness.run.combine import link_tree
from sglang_spec_harness.rundir import RunRecord, read_record
from sglang_spec_harness.sweep.facts import write_history
from sglang_spec_harness.sweep.result import DEFAULT_OUT_ROOT, PointResult, SweepRequest, SweepResult
from sglang_spec_harness.sweep.shards import (
    Shard, baseline_id, identity_difference, point_keys, read_sweep_json)

_RUN_DIR_NAME = re.compile(r"^\d{2,}-[A-Za-z0-9._-]+$")  # points/<NN>-<label>, as the sweep names them


@dataclass(frozen=True)
class MergeRequest:
    shards: tuple[Path, ...]
    out_dir: Path | None = None  # the merged sweep's folder; default reports/sweeps/<the sweep's name>
    db: str | None = None  # the history database (default as `harness history`)
    ingest: bool = True
    partial: bool = False  # merge without the shards that are missing (their points: could not run)


@dataclass
class ShardFolder:
    folder: Path
    doc: dict[str, Any]
    shard: Shard
    points: list[PointResult]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _baseline(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["baseline"] if isinstance(doc.get("baseline"), dict) else {}


def _point(entry: Any, where: str) -> PointResult:
    """A point of a shard's sweep.json, its fields checked (the file came from another machine)."""
    if not isinstance(entry, dict) or _int(entry.get("position")) is None or not isinstance(entry.get("point"), str) \
            or not isinstance(entry.get("label"), str) or not isinstance(entry.get("status"), str):
        raise HarnessInputError(f"{where}: expected an object with position, point, label and status")
    run_dir = entry.get("run_dir")
    if run_dir is not None and not (isinstance(run_dir, str) and _RUN_DIR_NAME.match(Path(run_dir).name)):
        raise HarnessInputError(f"{where}: run_dir: expected a path ending in points/<NN>-<label>, got {run_dir!r}")
    def an_object(key: str) -> dict[str, Any]:
        return entry[key] if isinstance(entry.get(key), dict) else {}

    return PointResult(position=entry["position"], point=entry["point"], label=entry["label"], status=entry["status"],
                       reason=str(entry.get("reason") or ""), verdict=entry.get("verdict") if isinstance(
                           entry.get("verdict"), str) else None, run_dir=run_dir, environment=an_object("environment"),
                       seconds=an_object("seconds"), numbers=an_object("numbers"))


def read_shard(folder: Path) -> ShardFolder:
    """One shard's folder: its sweep.json, which shard it is, its points and their run directories."""
    doc = read_sweep_json(folder, "shard folder")
    path = folder / "sweep.json"
    shard = doc.get("shard")
    if doc.get("part") != "shard" or not isinstance(shard, dict):
        raise HarnessInputError(f"{path}: not a shard of a sweep (part: {doc.get('part')!r}; a shard is what "
                                "`harness sweep --shard I/N` writes)")
    index, count = _int(shard.get("index")), _int(shard.get("count"))
    if index is None or count is None or not 1 <= index <= count or not isinstance(shard.get("sweep_points"), list):
        raise HarnessInputError(f"{path}: shard: expected index and count (1 <= index <= count) and sweep_points")
    part = ShardFolder(folder, doc, Shard(index, count),
                       [_point(entry, f"{path}: points[{i}]") for i, entry in enumerate(doc["points"])])
    owned = [key for key in point_keys(shard["sweep_points"]) if isinstance(key[0], int) and part.shard.owns(key[0])]
    if [(p.position, p.point, p.label) for p in part.points] != owned:
        raise HarnessInputError(f"{path}: its points are not {part.shard.describe()}'s share of the sweep's points")
    _check_folder(part, path)
    return part


def _check_folder(part: ShardFolder, path: Path) -> None:
    """The shard's baseline run is the one it says, and every run directory it lists is there, a
    point of this sweep at its place."""
    recorded = _baseline(part.doc)
    if recorded.get("id") != baseline_id(part.folder / "baseline"):
        raise HarnessInputError(f"{part.folder / 'baseline'}: not the baseline run {path} records "
                                f"(baseline.id {recorded.get('id')})")
    for point in part.points:
        if point.run_dir is None:
            continue
        run_dir = part.folder / "points" / Path(point.run_dir).name
        if not (run_dir / "run.json").is_file():
            raise HarnessInputError(f"{run_dir}: missing (the shard's sweep.json lists it for {point.label})")
        sweep = read_record(run_dir / "run.json", RunRecord).sweep
        if sweep is None or (sweep.sweep, sweep.position, sweep.point) != (part.doc.get("name"), point.position,
                                                                           point.point):
            raise HarnessInputError(f"{run_dir}/run.json: sweep: not point {point.position} ({point.label}) of "
                                    f"sweep {part.doc.get('name')}")


def check_shards(parts: list[ShardFolder], partial: bool) -> list[int]:
    """The shards are of one sweep, none twice; the indices of those missing (an error unless
    `partial`)."""
    first = parts[0]
    for part in parts[1:]:
        difference = identity_difference(first.doc, part.doc)
        if difference is None and part.shard.count != first.shard.count:
            difference = f"shard count: {first.shard.count} vs {part.shard.count}"
        if difference is None and point_keys(part.doc["shard"]["sweep_points"]) != point_keys(
                first.doc["shard"]["sweep_points"]):
            difference = "the sweep's points differ"
        if difference is None and _baseline(part.doc).get("id") != _baseline(first.doc).get("id"):
            difference = f"baseline.id: {_baseline(first.doc).get('id')} vs {_baseline(part.doc).get('id')}"
        if difference is not None:
            raise HarnessInputError(f"{part.folder} and {first.folder} are shards of different sweeps: {difference}")
    seen: dict[int, Path] = {}
    for part in parts:
        if part.shard.index in seen:
            raise HarnessInputError(f"{part.shard.describe()} given twice: {seen[part.shard.index]} and {part.folder} "
                                    "(shards overlap)")
        seen[part.shard.index] = part.folder
    missing = [i for i in range(1, first.shard.count + 1) if i not in seen]
    if missing and not partial:
        raise HarnessInputError(f"shard(s) {', '.join(f'{i} of {first.shard.count}' for i in missing)} missing: give "
                                "every shard's folder, or --partial to merge these alone (the missing points become gaps)")
    return missing


def _merged_result(parts: list[ShardFolder], missing: list[int], out_dir: Path, request: MergeRequest) -> SweepResult:
    """The merged sweep's result: every point in the sweep's order, the missing shards' as points that
    could not run; the request, rules and notes the shards share."""
    doc = parts[0].doc
    points = [p for part in parts for p in part.points]
    count = parts[0].shard.count
    for position, point, label in point_keys(doc["shard"]["sweep_points"]):
        if isinstance(position, int) and position % count + 1 in missing:
            points.append(PointResult(position=position, point=point, label=label, status="cannot run",
                                      reason=f"shard {position % count + 1} of {count} was not merged (--partial)"))
    points.sort(key=lambda p: p.position)
    sweep_request = SweepRequest(
        scenario_path=Path(str(doc.get("scenario_path"))), releases=doc.get("range"),
        source=Path(doc["source"]) if isinstance(doc.get("source"), str) else None,
        revisions=tuple(str(r) for r in doc.get("revisions") or ()), variant=str(doc.get("variant")),
        out_root=out_dir.parent, db=request.db, ingest=request.ingest,
        overrides=tuple(str(o) for o in doc.get("overrides") or ()))
    result = SweepResult(request=sweep_request, scenario=str(doc.get("scenario")), rules=list(doc.get("rules") or []),
                         out_dir=out_dir, points=points, environments=str(doc.get("environments") or ""),
                         notes=list(doc.get("notes") or []), name=str(doc["name"]), part="merged",
                         scenario_sha256=str(doc.get("scenario_sha256")), seed=doc.get("seed"),
                         harness=doc.get("harness") or {}, baseline=_baseline(doc), missing_shards=missing)
    result.shards = [{"index": part.shard.index, "count": count, "folder": str(part.folder.resolve()),
                      "status": part.doc.get("status"), "message": part.doc.get("message"),
                      "wall_s": part.doc.get("wall_s"), "points": [p.label for p in part.points]}
                     for part in sorted(parts, key=lambda part: part.shard.index)]
    return result


def _conclude(result: SweepResult, parts: list[ShardFolder]) -> None:
    """The merged sweep's status, message and wall time: the baseline's, then its longest shard's
    (the shards ran side by side)."""
    unfinished = [part for part in parts if part.doc.get("status") != "done"]
    result.status = "interrupted" if unfinished else "done"
    ran, points = result.ran, result.points
    result.message = (f"{len(ran)} of {len(points)} point(s) ran" +
                      (f"; could not run: {', '.join(p.label for p in points if p.status != 'ran')}"
                       if len(ran) < len(points) else "") +
                      "".join(f"; {part.shard.describe()} did not finish ({part.doc.get('status')}: "
                              f"{part.doc.get('message')})" for part in unfinished) +
                      (f"; not merged: {', '.join(f'shard {i}' for i in result.missing_shards)}"
                       if result.missing_shards else ""))
    shard_s = [w for part in parts if isinstance(w := part.doc.get("wall_s"), (int, float))]
    baseline_s = result.baseline.get("wall_s")
    result.wall_s = round((baseline_s if isinstance(baseline_s, (int, float)) else 0) + max(shard_s, default=0), 1)


def merge_shards(request: MergeRequest, say: Callable[[str], None] = lambda text: None) -> SweepResult:
    """Join the shards into one sweep folder (bad input: HarnessInputError before anything is written)."""
    if not request.shards:
        raise HarnessInputError("give the shards' folders (each written by `harness sweep --shard I/N`)")
    parts = [read_shard(folder) for folder in request.shards]
    missing = check_shards(parts, request.partial)
    name = str(parts[0].doc["name"])
    out_dir = (request.out_dir or DEFAULT_OUT_ROOT / name).resolve()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise HarnessInputError(f"--out {out_dir}: exists and is not empty (a merge writes a sweep folder of its own)")
    engine = None
    if request.ingest:
        from sglang_spec_harness.history.db import open_database

        engine = open_database(request.db)
    started = time.monotonic()
    result = _merged_result(parts, missing, out_dir, request)
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"merge {name}: {len(parts)} of {parts[0].shard.count} shard(s), {len(result.points)} point(s) -> {out_dir}")
    if result.baseline.get("id"):
        link_tree(out_dir / "baseline", parts[0].folder / "baseline")
        result.baseline_run_dir = out_dir / "baseline"
    for part in parts:
        for point in part.points:
            if point.run_dir is not None:
                run_dir = out_dir / "points" / Path(point.run_dir).name
                link_tree(run_dir, part.folder / "points" / run_dir.name)
                point.run_dir = str(run_dir)
    _conclude(result, parts)
    if engine is not None:
        from sglang_spec_harness.history.ingest import ingest

        ingest(engine, [Path(p.run_dir) for p in result.points if p.run_dir is not None])
        if result.ran:
            write_history(engine, result)
    say(f"merged in {seconds(time.monotonic() - started)}")
    result.save()
    return result
