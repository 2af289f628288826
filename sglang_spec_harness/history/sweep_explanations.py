"""A stored sweep's explanations, computed again after the fact (`harness history explain SWEEP_DIR`):
from its run directories (their traces and analysis) and the source of its points (the release
folders or the repository its run.json records), without starting a server.

A run whose scenario profiled `with_stack` but whose analysis.json stores no functions per region
(analysed by a harness before them) is analysed again from its trace files first (as `harness analyze
--run-dir` does, rewriting its analysis.json with the same counts and the functions); one whose
trace files are not all there is left as it is, and its explanations say it stored no stacks. The
runs go into a database (a fresh one unless given), and the sweep's series, change points and
explanations come out as `history report` computes them, the sweep's alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from sglang_spec_harness.errors import HarnessInputError, one_line
from sglang_spec_harness.files import write_text_atomic
from sglang_spec_harness.history.analyze import history_facts
from sglang_spec_harness.history.ingest import find_run_dirs, ingest
from sglang_spec_harness.rundir import load_run_dir
from sglang_spec_harness.run.reanalyze import reanalyze_run

EXPLANATIONS_VERSION = 1


def sweep_scenario(folder: Path) -> str:
    """The scenario name a sweep folder's sweep.json records; one line when it is not a sweep folder."""
    path = folder / "sweep.json"
    try:
        scenario = json.loads(path.read_text(encoding="utf-8")).get("scenario")
    except FileNotFoundError:
        raise HarnessInputError(f"{one_line(folder)}: no sweep.json (expected a folder that harness sweep wrote)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise HarnessInputError(f"{one_line(path)}: not a sweep's JSON ({one_line(exc)})") from None
    if not isinstance(scenario, str) or not scenario:
        raise HarnessInputError(f"{one_line(path)}: field scenario: expected the scenario's name")
    return scenario


def lacks_functions(run_dir: Path) -> bool:
    """Whether the run profiled with stacks, its trace files are all there, and its analysis.json
    stores no functions per region (an analysis written before them)."""
    try:
        run = load_run_dir(run_dir, strict=False)
        with_stack = run.scenario.profile.with_stack
    except HarnessInputError:
        return False  # a damaged run is ingested as damaged, with its reason
    profiled = [t for t in run.trials if t.kind == "profiled" and t.ok and t.record.traces]
    if not with_stack or not profiled or any(t.name not in run.analysis for t in profiled):
        return False
    if not all((t.dir / name).is_file() for t in profiled for name in t.record.traces):
        return False
    return not any(f.region_functions for trial in run.analysis.values() for f in trial.files)


def _analyse_again(run_dir: Path, progress: Callable[[str], None]) -> bool:
    """`harness analyze --run-dir`, kept only where every trial analysed again: a trace this harness
    cannot analyse must not cost the run the analysis it had (analysis.json is put back)."""
    path = run_dir / "analysis.json"
    stored = path.read_text(encoding="utf-8")
    record = reanalyze_run(run_dir)
    if record.errors:
        write_text_atomic(path, stored)
        trial, error = next(iter(record.errors.items()))
        progress(f"{run_dir.name}: {trial} could not be analysed again ({one_line(error)}): its analysis.json is kept")
        return False
    return True


@dataclass
class SweepExplanations:
    document: dict[str, Any]  # the change points and their explanations (the JSON written)
    facts: dict[str, Any]  # the sweep's history facts (what its trend page draws)


def sweep_explanations(engine: Engine, folder: Path, *, reanalyze: bool = True,
                       progress: Callable[[str], None] = lambda line: None) -> SweepExplanations:
    """The sweep folder's change points and their explanations, with the source that ran and changed."""
    scenario = sweep_scenario(folder)
    # the trials that run once (`baseline/`) are no point: the points hold them, and alone the folder
    # has no results.json
    run_dirs = [d for d in find_run_dirs([folder]) if d != (folder / "baseline").resolve()]
    if not run_dirs:
        raise HarnessInputError(f"{one_line(folder)}: no run directory found (expected folders with run.json)")
    analysed = []
    for run_dir in run_dirs:
        if reanalyze and lacks_functions(run_dir):
            progress(f"analysing {run_dir.name} again: its analysis.json stores no functions per region")
            if _analyse_again(run_dir, progress):
                analysed.append(run_dir.name)
    ingest(engine, run_dirs, on_run=lambda o: progress(f"ingested {o.record.name} ({o.record.status})"))
    facts = history_facts(engine, scenarios=[scenario])
    # the sweep as its runs recorded it (the folder may have been copied or renamed since)
    found = {str(p) for p in run_dirs}
    names = {r["sweep"] for r in facts["run_list"] if r["sweep"] and str(Path(r["path"]).resolve()) in found}
    if len(names) != 1:
        raise HarnessInputError(f"{one_line(folder)}: its runs record {len(names)} sweeps "
                                f"({', '.join(sorted(names)) or 'none'}); expected one sweep's folder")
    (name,) = names
    series = [s for s in facts["series"] if s["sweep"] == name]
    ids = {s["series"] for s in series}
    changes = [c for c in facts["change_points"] if c["series"] in ids]
    used = {c["explanation"] for c in changes}
    explanations = [e for e in facts["explanations"] if e["id"] in used]
    sweeps = [w for w in facts["sweeps"] if w["sweep"] == name]
    facts = {**facts, "series": series, "change_points": changes, "explanations": explanations, "sweeps": sweeps,
             "run_list": [r for r in facts["run_list"] if r["sweep"] == name]}
    document = {"schema_version": EXPLANATIONS_VERSION, "sweep": name, "scenario": scenario,
                "points": sweeps[0]["points"] if sweeps else [], "analysed_again": analysed,
                "change_points": changes, "explanations": explanations}
    return SweepExplanations(document, facts)
