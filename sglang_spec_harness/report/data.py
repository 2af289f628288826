"""Everything the report shows, read from a run directory that may be incomplete.

Unlike `harness check`, the report never refuses a run: it reads the run directory leniently
(`sglang_spec_harness.rundir.load_run_dir(strict=False)`), so a missing or damaged file becomes a
note on the page (and in the summary), and the rest is still shown. Only a path that is not a run
directory at all (no run.json, no results.json, no trials) is bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_spec_harness.rundir import (
    PlanEntry,
    RunDir,
    StoredTrial,
    TrialAnalysis,
    as_list,
    as_object,
    inside,
    load_run_dir,
)
from sglang_spec_harness.rundir import valid_number
from sglang_spec_harness.vocabulary import Verdict

# The overall verdicts results.json may hold (a rule may also be INFO).
VERDICTS = (Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE)
# What the report cannot show without each run file: the end of its note.
WITHOUT = {
    "run.json": "the trial plan and run status are unknown",
    "results.json": "no verdict yet; run `harness check {run_dir}` to evaluate the rules",
    "analysis.json": "no trace analysis: kernel counts, region times and top kernels are not shown",
    "environment.json": "environment metadata is not shown",
    "scenario.yaml": "variant descriptions and arguments are not shown",
}


@dataclass
class TrialView:
    """One planned or executed trial as the report shows it: its place in the plan and, once it ran,
    its record (`trial`, rundir's StoredTrial)."""

    name: str  # directory name, e.g. `03-candidate-timed`
    dir: Path
    index: int
    variant: str
    kind: str  # timed | profiled
    repetition: int
    status: str  # ok | failed | interrupted | not run (planned, no trial.json) | unreadable
    error: str | None = None
    trial: StoredTrial | None = None
    trace_paths: list[Path] = field(default_factory=list)  # absolute; those that exist
    missing_traces: list[str] = field(default_factory=list)  # listed in trial.json, absent on disk
    server_log: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def command(self) -> str | None:
        return self.trial.record.command or None if self.trial else None

    @property
    def launch(self) -> str | None:
        """Warm modes: the launch directory (relative) that served it."""
        return self.trial.record.launch if self.trial else None

    @property
    def summary(self) -> dict[str, Any]:
        return self.trial.summary.model_dump(exclude_none=True) if self.trial else {}

    @property
    def server_info(self) -> dict[str, Any]:
        return self.trial.record.server_info if self.trial else {}

    def number(self, key: str) -> float | None:
        return valid_number(self.summary.get(key))


@dataclass
class VariantInfo:
    name: str
    description: str = ""
    args: dict[str, Any] = field(default_factory=dict)  # merged server flags
    env: dict[str, str] = field(default_factory=dict)
    patches: list[str] = field(default_factory=list)
    pythonpath: list[str] = field(default_factory=list)
    python: str | None = None


@dataclass
class ReportData:
    """The run directory as the report's pages read it: the typed run (`rundir`) and, for the pages,
    its records as plain JSON data ({} or None where a file is missing or damaged)."""

    run_dir: Path
    rundir: RunDir
    run: dict[str, Any]
    results: dict[str, Any] | None
    analysis: dict[str, TrialAnalysis]  # trial dir name -> its trace analysis
    environment: dict[str, Any]
    scenario: dict[str, Any]  # the resolved scenario as plain data ({} when missing)
    variants: list[VariantInfo]
    trials: list[TrialView]
    notes: list[str]  # what is missing or broken, one sentence each
    launches: list[dict[str, Any]] = field(default_factory=list)  # warm modes: launch.json of each launch
    cache: dict[str, Any] = field(default_factory=dict, repr=False)  # traces read once per report

    @property
    def scenario_name(self) -> str:
        return str(
            (self.results or {}).get("scenario") or self.run.get("scenario") or self.scenario.get("name") or self.run_dir.name
        )

    @property
    def verdict(self) -> Verdict | None:
        verdict = (self.results or {}).get("verdict")
        return Verdict(verdict) if verdict in VERDICTS else None

    @property
    def rules(self) -> list[dict[str, Any]]:
        rules = (self.results or {}).get("rules")
        return [r for r in as_list(rules) if isinstance(r, dict)]

    @property
    def variant_names(self) -> list[str]:
        names = [v.name for v in self.variants]
        for trial in self.trials:
            if trial.variant not in names:
                names.append(trial.variant)
        return names

    def rules_of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.rules if r.get("kind") == kind]

    def trials_of(self, variant: str, kind: str | None = None, *, ok_only: bool = True) -> list[TrialView]:
        return [
            t for t in self.trials
            if t.variant == variant and (kind is None or t.kind == kind) and (t.ok or not ok_only)
        ]

    def relative(self, path: Path) -> str:
        """A path as a link relative to the run directory (where index.html lives). Always `./...`:
        a file or directory named `javascript:...` must stay a file name, never become a URL scheme.
        Only paths inside the run directory are ever linked (see `_view`)."""
        try:
            return "./" + path.relative_to(self.run_dir).as_posix()
        except ValueError:
            return "./" + path.name


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _variants(scenario: dict[str, Any]) -> list[VariantInfo]:
    server = as_object(scenario.get("server"))
    shared_args = as_object(server.get("args"))
    out = []
    specs = as_object(scenario.get("variants"))
    for name, raw in specs.items():
        spec = as_object(raw)
        args = dict(shared_args)
        args.update(as_object(spec.get("args")))
        out.append(
            VariantInfo(
                name=str(name),
                description=str(spec.get("description") or ""),
                args=args,
                env={**as_object(server.get("env")), **as_object(spec.get("env"))},
                patches=list(spec.get("patches") or []),
                pythonpath=list(spec.get("pythonpath") or []),
                python=spec.get("python"),
            )
        )
    return out


def _trial_dir(rd: RunDir, rel: str, notes: list[str]) -> Path:
    trial_dir = rd.path / rel
    if not inside(rd.path, trial_dir) or trial_dir.resolve() == rd.path.resolve():
        notes.append(f"The plan names a trial directory outside the run directory ({rel[:80]}): ignored.")
        return rd.path / "trials" / "(outside)"
    return trial_dir


def _view(rd: RunDir, trial_dir: Path, entry: PlanEntry, notes: list[str]) -> TrialView:
    """A planned trial (or one found on disk, `entry` guessed from its name) as the report shows it."""
    view = TrialView(name=trial_dir.name, dir=trial_dir, index=entry.index, variant=entry.variant, kind=entry.kind,
                     repetition=entry.repetition or 0, status="not run")
    rel = f"{trial_dir.relative_to(rd.path).as_posix()}/trial.json" if inside(rd.path, trial_dir) else ""
    if (problem := rd.problem(rel)) is not None:
        view.status, view.error = "unreadable", f"trial.json could not be read ({problem})"
        notes.append(f"{view.name}/trial.json could not be read ({problem}).")
        return view
    trial = next((t for t in rd.trials if t.dir == trial_dir), None)
    if trial is None:
        return view
    record = trial.record
    view.trial, view.index, view.variant, view.kind = trial, record.index, record.variant, record.kind
    view.repetition = record.repetition or 0
    # `running` left on disk means the run stopped (Ctrl-C, crash) while this trial ran.
    view.status = {"ok": "ok", "running": "interrupted"}.get(str(record.status), "failed")
    view.error = record.error or None
    for rel_trace in record.traces:
        path = trial_dir / rel_trace
        if not inside(trial_dir, path):  # a name from a file: never read or link outside the trial
            notes.append(f"Trial {view.name}: trace {rel_trace[:80]!r} lies outside the trial directory: ignored.")
        elif path.is_file():
            view.trace_paths.append(path)
        else:
            view.missing_traces.append(rel_trace)
    log = trial_dir / "server.log"
    if not log.exists() and record.launch:  # warm modes: the launch's log
        log = rd.path / record.launch / "server.log"
    view.server_log = log if log.is_file() and inside(rd.path, log) and (
        log.parent != trial_dir or inside(trial_dir, log)) else None
    return view


def _guessed_entry(name: str, position: int) -> PlanEntry:
    """A trial directory the plan does not name: what its name `NN-variant-kind` says."""
    parts = name.split("-")
    return PlanEntry(index=int(parts[0]) if parts[0].isdigit() else position,
                     variant="-".join(parts[1:-1]) or "?", kind=parts[-1] if len(parts) > 1 else "?")


def _trials(rd: RunDir, notes: list[str]) -> list[TrialView]:
    """The plan first (so that trials that never ran show up), then any trial directory on disk that
    the plan does not name."""
    views: list[TrialView] = []
    for entry in rd.run.plan:
        rel = entry.dir or f"trials/{entry.index:02d}-{entry.variant}-{entry.kind}"
        views.append(_view(rd, _trial_dir(rd, rel, notes), entry, notes))
    seen = {v.name for v in views}
    trials_dir = rd.path / "trials"
    for trial_json in sorted(trials_dir.glob("*/trial.json")) if trials_dir.is_dir() else []:
        if trial_json.parent.name not in seen:
            views.append(_view(rd, trial_json.parent, _guessed_entry(trial_json.parent.name, len(views)), notes))
    views.sort(key=lambda t: t.index)
    return views


def _file_notes(rd: RunDir) -> list[str]:
    """The run's own files: missing or damaged, and what the report cannot show without each."""
    notes = []
    for name, without in WITHOUT.items():
        without = without.format(run_dir=rd.path)
        if not (rd.path / name).exists():
            notes.append(f"{name} is missing: {without}.")
        elif (problem := rd.problem(name)) is not None:
            notes.append(f"{name} could not be read ({problem}): {without}.")
    for trial_name, message in rd.analysis_errors.items():
        notes.append(f"The trace analysis of {trial_name} failed: {message}.")
    return notes


def _trial_notes(rd: RunDir, trials: list[TrialView]) -> list[str]:
    notes = []
    for t in trials:
        if t.status == "failed":
            notes.append(f"Trial {t.name} failed: {t.error or 'no error recorded'}.")
        elif t.status == "interrupted":
            notes.append(f"Trial {t.name} was still running when the run stopped: its measurements are partial.")
    not_run = [t.name for t in trials if t.status == "not run"]
    if not_run:
        notes.append(f"{len(not_run)} planned trial(s) did not run: {', '.join(not_run)}.")
    if rd.run.status == "incomplete" or rd.run.error:
        notes.append(f"The run is incomplete: {rd.run.error or 'it stopped before the end of the plan'}.")
    analysed = (rd.path / "analysis.json").exists() and "analysis.json" not in rd.damaged
    for t in trials:
        if t.ok and t.kind == "profiled" and t.name not in rd.analysis and analysed:
            notes.append(f"analysis.json has no entry for profiled trial {t.name}.")
        if t.missing_traces:
            notes.append(f"Trial {t.name}: trace file(s) listed but missing: {', '.join(t.missing_traces)}.")
    return notes


def _launches(rd: RunDir, notes: list[str]) -> list[dict[str, Any]]:
    """Warm modes: each launch's run.json entry with its launch.json and its server log."""
    launches: list[dict[str, Any]] = []
    for entry in rd.run.launches:
        if entry.dir is None:
            continue
        where = rd.path / entry.dir
        if not inside(rd.path, where) or where.resolve() == rd.path.resolve():
            notes.append(f"run.json names a launch directory outside the run directory ({entry.dir[:80]}): ignored.")
            continue
        record = rd.launches.get(entry.dir)
        if record is None:
            problem = rd.problem(f"{entry.dir}/launch.json")
            said = f"could not be read ({problem})" if problem is not None else "is missing"
            notes.append(f"{entry.dir}/launch.json {said}: launch {entry.dir} is not described.")
        launch = {**entry.model_dump(mode="json"), **(record.model_dump(mode="json") if record else {})}
        log = where / "server.log"
        launch["server_log"] = log if log.is_file() and inside(where, log) else None
        launches.append(launch)
        if launch.get("status") == "failed":
            notes.append(f"Server launch {entry.dir} failed: {launch.get('error') or 'no error recorded'}.")
    return launches


def load_report_data(run_dir: Path) -> ReportData:
    rd = load_run_dir(run_dir, strict=False)
    notes = _file_notes(rd)
    trials = _trials(rd, notes)
    notes.extend(_trial_notes(rd, trials))
    launches = _launches(rd, notes)
    run_read = "run.json" not in rd.damaged
    return ReportData(
        run_dir=rd.path,
        rundir=rd,
        run=rd.run.model_dump(mode="json") if run_read else {},
        results=rd.results.model_dump(mode="json") if rd.results is not None else None,
        analysis=dict(rd.analysis),
        environment=rd.environment.model_dump(mode="json") if rd.environment is not None else {},
        scenario=rd.scenario_data,
        variants=_variants(rd.scenario_data),
        trials=trials,
        notes=notes,
        launches=launches,
    )
