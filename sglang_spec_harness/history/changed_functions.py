"""The source that ran and changed at a change point: the Python functions that ran in the regions
concerned (the profiled passes' with_stack frames, stored per region), intersected with the
functions whose source differs between the two points, each with its unified diff.

The regions concerned: those whose ops changed at the change point; where none did (an output
change, a timing change), the regions of the decode cycle. Every function that ran in any region is
compared; those that ran in the regions concerned rank first, and among them first those that ran
only where ops appeared or disappeared (a draft method, not the forward pass that every region
runs), or, where no op changed, those that ran in every region of the decode cycle; then by how
many lines changed.

A function is SGLang's (the code under test) when its file lies in the point's source (the release's
package, or the repository's tree); the harness's own code (its package, the stand-ins it puts on
sys.path) is listed apart, by what ran on each side; other packages (torch, the standard library)
are only counted. A function is found in each version of its file by name and first line, then by
qualified name; it changed when its syntax tree differs (an edit of whitespace or comments alone is
no change). Where its file or the function is gone, or the file moved, the entry says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sglang_spec_harness.history.source import (
    MAX_SOURCE_BYTES,
    Definition,
    ParsedFile,
    SourceTree,
    SourceUnavailable,
    function_diff,
    is_harness_file,
    parse_source,
    tree_of,
)
from sglang_spec_harness.vocabulary import CYCLE_REGIONS, NO_REGION, PREFILL

MAX_CHANGED = 25  # functions listed with their hunks; the rest counted
MAX_HUNK_LINES = 120  # the whole of most changed methods: the line that matters is often past the 60th
MAX_HARNESS = 20
SIDES = ("before", "after")


@dataclass(frozen=True)
class Ran:
    """One function as the database stores it for one run and region."""

    region: str
    file: str
    function: str
    line: int
    calls: int
    time_us: float
    complete: bool


@dataclass
class _Entry:
    """One function of the code under test, on both sides."""

    path: dict[str, str | None] = field(default_factory=lambda: {"before": None, "after": None})
    definition: dict[str, Definition | None] = field(default_factory=lambda: {"before": None, "after": None})
    calls: dict[str, int] = field(default_factory=lambda: {"before": 0, "after": 0})
    time_us: dict[str, float] = field(default_factory=lambda: {"before": 0.0, "after": 0.0})
    regions: set[str] = field(default_factory=set)
    file: str = ""
    function: str = ""


class SourceCache:
    """Trees and parsed files, shared by the explanations of one report (a sweep's points recur)."""

    def __init__(self) -> None:
        self.trees: dict[str, SourceTree | str] = {}
        self.files: dict[tuple[int, str], ParsedFile] = {}

    def tree(self, key: str, run_json: dict[str, Any], label: str) -> SourceTree | str:
        """The run's source tree, or why there is none (one line)."""
        if key not in self.trees:
            try:
                self.trees[key] = tree_of(run_json, label)
            except SourceUnavailable as exc:
                self.trees[key] = str(exc)
        return self.trees[key]

    def parsed(self, tree: SourceTree, path: str) -> ParsedFile:
        key = (id(tree), path)
        if key not in self.files:
            try:
                size = tree.sizes()[path]
                self.files[key] = parse_source(path, b"" if size > MAX_SOURCE_BYTES else tree.read(path), size)
            except (OSError, SourceUnavailable) as exc:
                self.files[key] = ParsedFile(path, note=f"{path}: cannot read ({exc})")
        return self.files[key]


def regions_concerned(regions: list[dict[str, Any]], ran: dict[str, list[Ran]]) -> tuple[list[str], str]:
    """The regions whose ops changed (`changed regions`); where none did, the decode cycle's regions
    that ran (`decode cycle`): those of CYCLE_REGIONS, or every region but the prefill's."""
    changed = sorted({r["region"] for r in regions if r["appeared"] or r["disappeared"] or r["changed"]})
    if changed:
        return changed, "changed regions"
    present = sorted({f.region for side in ran.values() for f in side} - {NO_REGION})
    cycle = [r for r in present if r in CYCLE_REGIONS] or [r for r in present if r != PREFILL]
    return cycle, "decode cycle"


def regions_where_ops_came_or_went(regions: list[dict[str, Any]], concerned: list[str]) -> set[str]:
    """The regions where an op appeared or disappeared (the strongest change); the regions concerned
    where none did."""
    return {r["region"] for r in regions if r["appeared"] or r["disappeared"]} or set(concerned)


def _specific(ran_in: set[str], basis: str, concerned: list[str], strongest: set[str]) -> bool:
    """The first tier of the functions that ran in a region concerned. Where ops changed: those that
    ran only where ops appeared or disappeared (the draft's own method, not the forward pass that
    every region runs). Where none did (an output change): those that ran in every region of the
    decode cycle (what all of its steps share: the model's forward, attention, sampling)."""
    if not ran_in & set(concerned):
        return False
    return ran_in >= set(concerned) if basis == "decode cycle" else ran_in <= strongest


def source_changes(ran: dict[str, list[Ran]], trees: dict[str, SourceTree | str], regions: list[dict[str, Any]],
                   cache: SourceCache, labels: dict[str, str]) -> dict[str, Any]:
    """The `source` part of an explanation (docs/history.md)."""
    concerned, basis = regions_concerned(regions, ran)
    strongest = regions_where_ops_came_or_went(regions, concerned)
    notes = [t for t in trees.values() if isinstance(t, str)]
    out: dict[str, Any] = {
        "basis": basis, "regions": concerned,
        "trees": {side: t if isinstance(t, str) else t.label for side, t in trees.items()},
        "stacks": {side: bool(ran[side]) for side in SIDES},
        "complete": all(f.complete for side in SIDES for f in ran[side]),
        "compared": 0, "unchanged": 0, "other_packages": 0,
        "changed": [], "changed_left_out": 0, "harness": [], "harness_left_out": 0, "notes": notes,
    }
    if not all(ran[side] for side in SIDES):
        return out
    harness, entries, other = _sort_out(ran, trees, cache, out["notes"])
    out["other_packages"] = other
    out["harness"], out["harness_left_out"] = _harness_list(harness, set(concerned))
    if any(isinstance(t, str) for t in trees.values()):
        return out
    changed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entry in entries.values():
        item = _compare(entry, trees, cache, labels)
        if item is None:
            out["unchanged"] += all(entry.definition.values())
            continue
        item["focus"] = bool(entry.regions & set(concerned))
        item["specific"] = _specific(entry.regions, basis, concerned, strongest)
        same = changed.get(key := (item["path_before"], item["path_after"], item["function"]))
        if same is None:
            changed[key] = item
        else:  # a moved file's function that ran on both sides: one entry from each side's path
            for side in SIDES:
                same["calls"][side] += item["calls"][side]
                same["time_us"][side] += item["time_us"][side]
            same["regions"] = sorted({*same["regions"], *item["regions"]})
            same["focus"] = same["focus"] or item["focus"]
            same["specific"] = _specific(set(same["regions"]), basis, concerned, strongest)
    out["compared"] = out["unchanged"] + len(changed)
    ranked = sorted(changed.values(), key=lambda c: (not c["focus"], not c["specific"], -(c["added"] + c["removed"]),
                                                    -max(c["time_us"].values()), c["file"], c["function"]))
    for rank, item in enumerate(ranked, 1):
        item["rank"] = rank
    out["changed"], out["changed_left_out"] = ranked[:MAX_CHANGED], max(0, len(ranked) - MAX_CHANGED)
    return out


def _sort_out(ran: dict[str, list[Ran]], trees: dict[str, SourceTree | str], cache: SourceCache,
              notes: list[str]) -> tuple[dict[tuple[str, str, int], dict[str, Any]], dict[tuple[str, str], _Entry], int]:
    """The functions that ran, as the harness's (by file, name and line), the code under test's (by
    its path in the tree and qualified name: the same function on both sides), and a count of the
    others."""
    harness: dict[tuple[str, str, int], dict[str, Any]] = {}
    entries: dict[tuple[str, str], _Entry] = {}
    other: set[tuple[str, str, int]] = set()
    for side in SIDES:
        tree = trees[side]
        for f in ran[side]:
            if is_harness_file(f.file):
                h = harness.setdefault((f.file, f.function, f.line), {
                    "file": f.file, "function": f.function, "line": f.line, "regions": set(),
                    "calls": {"before": 0, "after": 0}})
                h["regions"].add(f.region)
                h["calls"][side] += f.calls
                continue
            path = None if isinstance(tree, str) else tree.resolve(f.file)
            if path is None or isinstance(tree, str):
                other.add((f.file, f.function, f.line))
                continue
            parsed = cache.parsed(tree, path)
            definition = parsed.find(f.function, f.line) if parsed.note is None else None
            if definition is None:
                note = parsed.note or (f"{path}: no function {f.function} at line {f.line} in {tree.label}: "
                                       "not the source that ran")
                if note not in notes and f.function[:1] != "<":  # <lambda>, <listcomp>: no name to find
                    notes.append(note)
                continue
            entry = entries.setdefault((path, definition.qualname), _Entry(file=f.file, function=definition.qualname))
            entry.path[side], entry.definition[side] = path, definition
            entry.calls[side] += f.calls
            entry.time_us[side] += f.time_us
            entry.regions.add(f.region)
    return harness, entries, len(other)


def _counterpart(entry: _Entry, side: str, tree: SourceTree, cache: SourceCache) -> tuple[str | None, Definition | None, str]:
    """The function on the side where it did not run: the same path and qualified name, else a file
    of the same name that defines it (the file moved). (path, definition, status)."""
    known = next(p for p in entry.path.values() if p)
    qualname = entry.function
    if known in tree.sizes():
        parsed = cache.parsed(tree, known)
        if parsed.note is not None:
            return known, None, "unreadable"  # its note says why; not compared
        found = parsed.by_qualname(qualname)
        return known, found, "" if found else ("removed" if side == "after" else "added")
    for other in tree.same_name(known):
        parsed = cache.parsed(tree, other)
        found = parsed.by_qualname(qualname) if parsed.note is None else None
        if found:
            return other, found, "moved"
    return None, None, "file gone" if side == "after" else "file added"


def _compare(entry: _Entry, trees: dict[str, SourceTree | str], cache: SourceCache,
             labels: dict[str, str]) -> dict[str, Any] | None:
    """The entry of a function whose source differs between the two points (with its hunk), or None."""
    status = ""
    for side in SIDES:
        if entry.definition[side] is None:
            tree = trees[side]
            assert not isinstance(tree, str)
            entry.path[side], entry.definition[side], status = _counterpart(entry, side, tree, cache)
            if status == "unreadable":
                return None
    before, after = entry.definition["before"], entry.definition["after"]
    if before is not None and after is not None and before.shape == after.shape and entry.path["before"] == entry.path["after"]:
        return None
    segments: dict[str, list[str]] = {}
    for side in SIDES:
        d, tree, path = entry.definition[side], trees[side], entry.path[side]
        segments[side] = cache.parsed(tree, path).segment(d) if d and path and not isinstance(tree, str) else []
    hunk = function_diff(segments["before"], segments["after"], before.first_line if before else 0,
                         after.first_line if after else 0,
                         (f"{labels['before']}:{entry.path['before'] or '(none)'}",
                          f"{labels['after']}:{entry.path['after'] or '(none)'}"), MAX_HUNK_LINES)
    if not status:
        status = "changed" if before is None or after is None or before.shape != after.shape else "moved"
    elif status == "moved" and before is not None and after is not None and before.shape != after.shape:
        status = "moved and changed"
    return {
        "file": entry.file, "function": entry.function, "status": status,
        "path_before": entry.path["before"], "path_after": entry.path["after"],
        "line_before": before.first_line if before else None, "line_after": after.first_line if after else None,
        "added": hunk.added, "removed": hunk.removed, "regions": sorted(entry.regions),
        "calls": dict(entry.calls), "time_us": {k: round(v, 3) for k, v in entry.time_us.items()},
        "hunk": hunk.text, "hunk_lines_left_out": hunk.lines_left_out,
    }


def _harness_list(harness: dict[tuple[str, str, int], dict[str, Any]], concerned: set[str]) -> tuple[list[dict[str, Any]], int]:
    """The harness's functions that ran in the regions concerned on one side only (a port piece or
    stand-in that came or went), most calls first."""
    # a comprehension or lambda (`<listcomp>`) is part of a function listed already
    listed = [{**h, "regions": sorted(h["regions"]), "ran": "before only" if h["calls"]["before"] else "after only"}
              for h in harness.values()
              if h["regions"] & concerned and min(h["calls"].values()) == 0 and not h["function"].startswith("<")]
    listed.sort(key=lambda h: (h["ran"], -max(h["calls"].values()), h["file"], h["function"]))
    return listed[:MAX_HARNESS], max(0, len(listed) - MAX_HARNESS)


def ran_rows(rows: Iterable[tuple[Any, ...]]) -> list[Ran]:
    """Database rows (region, file, function, line, calls, time_us, complete) as `Ran`, outside
    regions left out."""
    return [Ran(*row) for row in rows if row[0] != NO_REGION]
