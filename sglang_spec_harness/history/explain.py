"""Why a series changed where it did: the kernel diff between the run just before a change point and
the run just after it, for one variant, from the database only.

Per region and counting unit, by each op name's median count per replay: which appeared (0 -> n),
which disappeared (n -> 0), which changed count, which only varied (the same median, another
minimum or maximum: some replays ran at another batch size, which timing decides), and how the
region's time per replay moved; whether the greedy outputs
differ; and what changed between the two runs that was not SGLang's (the harness's commit, a sweep
environment's adaptations, the torch or transformers that ran), since then not every difference is
SGLang's. Where the runs stored the Python functions that ran per region (with_stack) and their
source is here (a sweep's points), which of those functions changed between the two points, with
their hunks (`changed_functions.py`). `sentence` says it in one paragraph a maintainer can paste into
an issue. Nothing here knows an SGLang version, a region or an op name: they all come from the stored
runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from sglang_spec_harness.history import db
from sglang_spec_harness.history.changed_functions import Ran, SourceCache, ran_rows, source_changes
from sglang_spec_harness.pages.numbers import per_replay, signed_pct, us
from sglang_spec_harness.rundir import as_object
from sglang_spec_harness.vocabulary import NO_REGION

UNIT_ORDER = ("graph_launch", "span", "trace")
UNIT_WORDS = {"graph_launch": "per replay", "span": "per span", "trace": "in the trace"}
SENTENCE_OPS = 10  # names listed per kind in the sentence; the JSON lists all
SENTENCE_FUNCTIONS = 3  # changed functions the sentence names; the JSON lists them with their hunks
AXIS_WORDS = {"sglang_release": "SGLang", "git_revision": "SGLang"}
# Facts of a sweep's environment that are the harness's choice, not SGLang's (docs/history.md).
HARNESS_SIDE_KEYS = ("adaptations", "not_sglang", "provider", "python", "dependency_set")
HARNESS_SIDE_PACKAGES = ("torch", "transformers")


@dataclass(frozen=True)
class OpStat:
    replays: int
    low: int
    median: float
    high: int
    time_us: float


def _relative_change(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None or before == 0 else (after - before) / before


def run_side(run: dict[str, Any]) -> dict[str, Any]:
    """One side of an explanation: the run, its label (the sweep point, else the run's name), where it is."""
    return {"run": run["name"], "run_key": run["run_key"], "label": run["sweep_label"] or run["name"],
            "point": run["sweep_point"], "position": run["sweep_position"], "sweep": run["sweep"],
            "axis": run["sweep_axis"], "path": run["path"], "report": run["report"],
            "sglang_version": run["sglang_version"], "sglang_commit": run["sglang_commit"],
            "harness_commit": run["harness_commit"]}


class Explainer:
    """Explanations for change points, one per (run before, run after, variant), built once each."""

    def __init__(self, engine: sa.Engine, runs: dict[int, dict[str, Any]]):
        self.engine, self.runs = engine, runs
        self.made: dict[tuple[int, int, str], dict[str, Any]] = {}
        self.sources = SourceCache()

    def explanation(self, before: int, after: int, variant: str) -> dict[str, Any]:
        key = (before, after, variant)
        if key not in self.made:
            self.made[key] = self._explain(before, after, variant, f"e{len(self.made) + 1}")
        return self.made[key]

    def all(self) -> list[dict[str, Any]]:
        return list(self.made.values())

    def _explain(self, before: int, after: int, variant: str, ident: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            ops = {run: _op_tables(conn, run, variant) for run in (before, after)}
            times = {run: _region_times(conn, run, variant) for run in (before, after)}
            facts = {run: _variant_facts(conn, run, variant) for run in (before, after)}
            run_json = {run: conn.execute(sa.select(db.runs.c.run_json).where(db.runs.c.id == run)).scalar()
                        for run in (before, after)}
            functions = {run: _functions(conn, run, variant) for run in (before, after)}
        # A run without op counts (analysed before op tables): no diff of ops, or every op would "appear".
        counted = bool(ops[before]) and bool(ops[after])
        regions = region_diffs(ops[before] if counted else {}, ops[after] if counted else {}, times[before], times[after])
        outputs = _outputs(facts[before], facts[after])
        differs = environment_differences(
            _harness_side(self.runs[before], as_object(run_json[before]), facts[before]),
            _harness_side(self.runs[after], as_object(run_json[after]), facts[after]))
        sides = run_side(self.runs[before]), run_side(self.runs[after])
        explanation = {
            "id": ident, "variant": variant, "series": [], "before": sides[0], "after": sides[1],
            "op_counts": {"before": bool(ops[before]), "after": bool(ops[after])},
            "regions": regions, "outputs": outputs, "environment_differs": differs,
        }
        trees = {side: self.sources.tree(str(run), as_object(run_json[run]), label)
                 for side, run, label in (("before", before, sides[0]["label"]), ("after", after, sides[1]["label"]))}
        explanation["source"] = source_changes(
            {"before": functions[before], "after": functions[after]}, trees, regions, self.sources,
            {"before": sides[0]["label"], "after": sides[1]["label"]})
        explanation["sentence"] = sentence(explanation)
        return explanation


def _op_tables(conn: sa.Connection, run_id: int, variant: str) -> dict[tuple[str, str], dict[str, OpStat]]:
    c = db.op_counts.c
    rows = conn.execute(sa.select(c.region, c.unit, c.op, c.replays, c.per_replay_min, c.per_replay_median,
                                  c.per_replay_max, c.time_us)
                        .where(c.run_id == run_id, c.variant == variant))
    out: dict[tuple[str, str], dict[str, OpStat]] = {}
    for region, unit, op, replays, low, median, high, time_us in rows:
        if region != NO_REGION:  # everything the server does outside the regions: not explained
            out.setdefault((region, unit), {})[op] = OpStat(replays, low, median, high, time_us)
    return out


def _functions(conn: sa.Connection, run_id: int, variant: str) -> list[Ran]:
    c = db.region_functions.c
    return ran_rows(conn.execute(sa.select(c.region, c.file, c.function, c.line, c.calls, c.time_us, c.complete)
                                 .where(c.run_id == run_id, c.variant == variant)))


def _region_times(conn: sa.Connection, run_id: int, variant: str) -> dict[str, float]:
    """Each region's time per replay: its (robust) time over its instances."""
    c = db.region_times.c
    rows = conn.execute(sa.select(c.region, c.instances, c.robust_time_us)
                        .where(c.run_id == run_id, c.variant == variant))
    return {region: spent / instances for region, instances, spent in rows if instances}


def _variant_facts(conn: sa.Connection, run_id: int, variant: str) -> dict[str, Any]:
    c = db.variants.c
    row = conn.execute(sa.select(c.output_hash, c.outputs, c.torch_version)
                       .where(c.run_id == run_id, c.variant == variant)).mappings().first()
    return dict(row) if row else {}


def _stat_json(stat: OpStat | None) -> dict[str, Any]:
    if stat is None:
        return {"per_replay": 0, "range": [0, 0], "time_per_replay_us": 0.0}
    return {"per_replay": stat.median, "range": [stat.low, stat.high],
            "time_per_replay_us": round(stat.time_us / stat.replays, 3) if stat.replays else None}


def region_diffs(before: dict[tuple[str, str], dict[str, OpStat]], after: dict[tuple[str, str], dict[str, OpStat]],
                 time_before: dict[str, float], time_after: dict[str, float]) -> list[dict[str, Any]]:
    """Per region and unit (regions by name, units graph replay, span, trace): the ops that appeared,
    disappeared or changed count per replay, and the region's time per replay on either side. A
    region with a time but no op counts on either side (an analysis older than op tables) has an
    entry with its time only."""
    out = []
    keys = before.keys() | after.keys()
    counted = {region for region, _ in keys}
    keys |= {(region, "") for region in time_before.keys() | time_after.keys() if region not in counted}
    for region, unit in sorted(keys, key=lambda k: (k[0], UNIT_ORDER.index(k[1]) if k[1] in UNIT_ORDER else 9)):
        b, a = before.get((region, unit)), after.get((region, unit))
        appeared: list[dict[str, Any]] = []
        disappeared: list[dict[str, Any]] = []
        changed: list[dict[str, Any]] = []
        varied: list[dict[str, Any]] = []
        for op in sorted((b or {}).keys() | (a or {}).keys()):
            old, new = (b or {}).get(op), (a or {}).get(op)
            entry: dict[str, Any] = {"op": op, "before": old.median if old else 0, "after": new.median if new else 0,
                     "before_detail": _stat_json(old), "after_detail": _stat_json(new)}
            # By the median per replay: the count of most replays, which the batch sizes timing picks
            # do not move; an op absent from a run's table ran in none of its replays.
            was, now = old.median if old else 0, new.median if new else 0
            if now and not was:
                appeared.append(entry)
            elif was and not now:
                disappeared.append(entry)
            elif was != now:
                changed.append(entry)
            elif (old.low if old else 0, old.high if old else 0) != (new.low if new else 0, new.high if new else 0):
                varied.append(entry)
        for entries in (appeared, disappeared, changed, varied):  # most time first: what matters leads
            entries.sort(key=lambda e: (-max(e["before_detail"]["time_per_replay_us"] or 0,
                                             e["after_detail"]["time_per_replay_us"] or 0), e["op"]))
        t_before, t_after = time_before.get(region), time_after.get(region)
        present = ("no op counts" if not unit else "both" if b is not None and a is not None
                   else "before only" if b is not None else "after only")
        out.append({
            "region": region, "unit": unit or None, "present": present,
            "replays": {"before": _replays(b), "after": _replays(a)},
            "appeared": appeared, "disappeared": disappeared, "changed": changed, "varied": varied,
            "time_per_replay_us": {"before": _round(t_before), "after": _round(t_after),
                                   "change": _round(_relative_change(t_before, t_after), 4)},
        })
    return out


def _replays(table: dict[str, OpStat] | None) -> int | None:
    return next(iter(table.values())).replays if table else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _outputs(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    b, a = before.get("output_hash"), after.get("output_hash")
    return {"before": b, "after": a, "identical": None if b is None or a is None else b == a}


def _harness_side(run: dict[str, Any], run_json: dict[str, Any], variant: dict[str, Any]) -> dict[str, str]:
    """What ran that was not SGLang's: the harness's commit, the variant's torch, and a sweep
    environment's adaptations, provider, interpreter, dependency set and the packages used where
    they were pinned."""
    facts: dict[str, str] = {}
    if run.get("harness_commit"):
        facts["harness commit"] = str(run["harness_commit"])
    if variant.get("torch_version"):
        facts["torch"] = str(variant["torch_version"])
    environment = as_object(as_object(run_json.get("sweep")).get("environment"))
    for key in HARNESS_SIDE_KEYS:
        if environment.get(key) is not None:
            facts[key] = _text(environment[key])
    # what ran in place of a pin: `pins.<package>.used`, `used.<package>`, `<package>.used` (the CPU
    # environments record torch, transformers and sgl_kernel so), or `torch` / `transformers` as strings
    used = {**{name: as_object(pin).get("used") for name, pin in as_object(environment.get("pins")).items()},
            **as_object(environment.get("used")),
            **{name: value["used"] for name, value in environment.items() if isinstance(value, dict) and "used" in value},
            **{name: environment[name] for name in HARNESS_SIDE_PACKAGES if isinstance(environment.get(name), str)}}
    for name, version in used.items():
        if version is not None:
            facts[name] = _text(version)  # a sweep's own record of what ran wins over the probe's
    return facts


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def environment_differences(before: dict[str, str], after: dict[str, str]) -> list[dict[str, Any]]:
    return [{"what": key, "before": before.get(key), "after": after.get(key)}
            for key in sorted(before.keys() | after.keys()) if before.get(key) != after.get(key)]


def _ops_text(entries: Iterable[dict[str, Any]], word: str) -> str:
    entries = list(entries)
    listed = ", ".join(f"{e['op']} {_side_text(e['before_detail'])} -> {_side_text(e['after_detail'])}"
                       for e in entries[:SENTENCE_OPS])
    more = f" and {len(entries) - SENTENCE_OPS} more" if len(entries) > SENTENCE_OPS else ""
    return f"{listed}{more} {word}"


def _side_text(detail: dict[str, Any]) -> str:
    low, high = detail["range"]
    return per_replay(low, high, detail["per_replay"])


def _time_text(region: dict[str, Any], nested: bool = False) -> str:
    """`time per replay A -> B (+x%)`; `nested` (inside parentheses already): `..., +x%`."""
    t = region["time_per_replay_us"]
    if t["before"] is None and t["after"] is None:
        return "time not recorded"
    change = "" if t["change"] is None else f", {signed_pct(t['change'], 0)}" if nested else f" ({signed_pct(t['change'], 0)})"
    return f"time per replay {us(t['before'])} -> {us(t['after'])}{change}"


def sentence(explanation: dict[str, Any]) -> str:
    before, after = explanation["before"], explanation["after"]
    if before["axis"] and before["axis"] == after["axis"]:
        head = f"Between {AXIS_WORDS.get(before['axis'], before['axis'])} {before['label']} and {after['label']}"
    else:
        head = f"Between runs {before['run']} and {after['run']}"
    parts = [f"{head} ({before['path']}, {after['path']}), {explanation['variant']}:"]
    missing = [side["label"] for side, has in zip((before, after), explanation["op_counts"].values()) if not has]
    if missing:
        parts.append(f"no op counts stored for {' and '.join(missing)} (no profiled trial, or analysed before op "
                     "tables), so which ops changed is unknown.")
    changed: list[str] = []
    timed: set[str] = set()  # regions whose time the sentence gave already
    for region in explanation["regions"]:
        kinds = [_ops_text(region[kind], kind) for kind in ("disappeared", "appeared", "changed") if region[kind]]
        if not kinds:
            continue
        presence = "" if region["present"] == "both" else f" (counted {region['present']})"
        if region["varied"]:
            kinds.append(f"{len(region['varied'])} more varied between replays only (the same median)")
        time = "" if region["region"] in timed else f"; {_time_text(region)}"
        timed.add(region["region"])
        changed.append(f"{region['region']} {UNIT_WORDS.get(region['unit'], region['unit'])}{presence}: "
                       f"{'; '.join(kinds)}{time}.")
    parts += changed
    quiet: dict[str, dict[str, Any]] = {}
    for region in explanation["regions"]:
        if region["region"] not in timed:
            quiet.setdefault(region["region"], region)
    if quiet:
        listed = ", ".join(f"{name} ({_varied(region)}{_time_text(region, nested=True)})" for name, region in quiet.items())
        if missing:
            parts.append(f"Time: {listed}.")
        else:
            parts.append(f"No op count changed in {'' if changed else 'any region: '}{listed}.")
    if before.get("sweep") and after.get("sweep"):  # elsewhere which source ran is not recorded (the JSON says so)
        parts += _source_sentence(explanation.get("source"), before["label"], after["label"])
    outputs = explanation["outputs"]
    if outputs["identical"] is False:
        parts.append(f"Greedy outputs differ (sha256 {outputs['before'][:12]} -> {outputs['after'][:12]}).")
    elif outputs["identical"]:
        parts.append("Greedy outputs identical.")
    if explanation["environment_differs"]:
        listed = "; ".join(f"{d['what']} {_or_none(d['before'])} -> {_or_none(d['after'])}"
                           for d in explanation["environment_differs"])
        parts.append(f"Not only SGLang changed: {listed}.")
    parts += _harness_sentence((explanation.get("source") or {}).get("harness") or [],
                               (explanation.get("source") or {}).get("harness_left_out") or 0)
    return " ".join(parts)


def _harness_sentence(harness: list[dict[str, Any]], left_out: int) -> list[str]:
    """The harness's own functions that ran at one point only, the first few by name per side."""
    listed = []
    for ran in ("before only", "after only"):
        names = [_function_name(h) for h in harness if h["ran"] == ran]
        if names:
            more = f" and {len(names) - SENTENCE_FUNCTIONS} more" if len(names) > SENTENCE_FUNCTIONS else ""
            listed.append(f"{', '.join(names[:SENTENCE_FUNCTIONS])}{more} ran {ran}")
    rest = f" ({left_out} more not listed)" if left_out else ""
    return [f"The harness's own code in those regions: {'; '.join(listed)}{rest}."] if listed else []


def _function_name(f: dict[str, Any]) -> str:
    return f"{f['file']}:{f['function']}"


def _source_sentence(source: dict[str, Any] | None, before: str, after: str) -> list[str]:
    """The functions that ran there and changed, the top few by name; or why they are not known."""
    if not source or not any(source["stacks"].values()):
        return []  # no Python stacks on either side (profiled without with_stack): nothing to say
    if not all(source["stacks"].values()):
        missing = before if not source["stacks"]["before"] else after
        return [f"No Python stacks stored for {missing}, so which functions ran there is unknown."]
    where = ", ".join(source["regions"]) or "no region"
    if source["notes"] and not source["compared"]:
        return [f"Source not compared: {source['notes'][0]}."]
    changed = source["changed"]
    focus = [c for c in changed if c["focus"]]
    if not focus:
        return [f"None of the {source['compared']} SGLang functions that ran in {where} changed"
                + (f" ({len(changed)} that ran elsewhere did)." if changed else ".")]
    total = len(focus) + (source["changed_left_out"] if len(focus) == len(changed) else 0)
    named = ", ".join(f"{_function_name(c)} ({_status_text(c)})" for c in focus[:SENTENCE_FUNCTIONS])
    more = f" and {total - SENTENCE_FUNCTIONS} more" if total > SENTENCE_FUNCTIONS else ""
    basis = "" if source["basis"] == "changed regions" else " (no region's ops changed: the decode cycle's regions)"
    return [f"SGLang functions that ran in {where}{basis} and changed ({total} of {source['compared']} compared): {named}{more}."]


def _status_text(c: dict[str, Any]) -> str:
    lines = f"+{c['added']} -{c['removed']} lines"
    return lines if c["status"] == "changed" else f"{c['status']}, {lines}"


def _varied(region: dict[str, Any]) -> str:
    return f"{len(region['varied'])} varied between replays only; " if region["varied"] else ""


def _or_none(value: str | None) -> str:
    return "(none)" if value is None else value
