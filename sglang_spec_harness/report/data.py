"""Everything the report shows, read from a run directory that may be incomplete.

Unlike `harness check`, the report never refuses a run: a missing or unreadable file becomes a
note on the page (and in the summary), and the rest is still shown. Only a path that is not a run
directory at all (no run.json, no results.json, no trials) is bad input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir import SCHEMA_VERSION, as_list, as_object, inside, read_json
from sglang_spec_harness.vocabulary import Verdict

# The overall verdicts results.json may hold (a rule may also be INFO).
VERDICTS = (Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE)
# Beyond this a number from a file is damage, not a measurement: figures cannot scale to it.
MAX_PLOTTED = 1e12


def plottable(value: Any) -> float | None:
    """A number from a file as a float that a figure or a sum can take (finite, not huge), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_PLOTTED else None


@dataclass
class TrialRecord:
    """One planned or executed trial (server run)."""

    name: str  # directory name, e.g. `03-candidate-timed`
    dir: Path
    index: int
    variant: str
    kind: str  # timed | profiled
    repetition: int
    status: str  # ok | failed | not run (planned, no trial.json) | unreadable
    error: str | None = None
    command: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)
    trace_paths: list[Path] = field(default_factory=list)  # absolute; those that exist
    missing_traces: list[str] = field(default_factory=list)  # listed in trial.json, absent on disk
    server_log: Path | None = None
    launch: str | None = None  # warm modes: the launch directory (relative) that served it

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def number(self, key: str) -> float | None:
        return plottable(self.summary.get(key))


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
    run_dir: Path
    run: dict[str, Any]
    results: dict[str, Any] | None
    analysis: dict[str, Any]  # trial dir name -> TraceAnalysis JSON
    environment: dict[str, Any]
    scenario: dict[str, Any]  # the resolved scenario as plain data ({} when missing)
    variants: list[VariantInfo]
    trials: list[TrialRecord]
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

    def trials_of(self, variant: str, kind: str | None = None, *, ok_only: bool = True) -> list[TrialRecord]:
        return [
            t for t in self.trials
            if t.variant == variant and (kind is None or t.kind == kind) and (t.ok or not ok_only)
        ]

    def relative(self, path: Path) -> str:
        """A path as a link relative to the run directory (where index.html lives). Always `./...`:
        a file or directory named `javascript:...` must stay a file name, never become a URL scheme.
        Only paths inside the run directory are ever linked (see `_trial_record`)."""
        try:
            return "./" + path.relative_to(self.run_dir).as_posix()
        except ValueError:
            return "./" + path.name


def _read_json(path: Path, notes: list[str], what: str) -> Any | None:
    """The JSON at `path`, or None with a note saying why it is not there."""
    if not path.exists():
        notes.append(f"{path.name} is missing: {what}.")
        return None
    try:
        data = read_json(path)
    except HarnessInputError as exc:
        notes.append(f"{path.name} could not be read ({str(exc).removeprefix(str(path) + ':').strip()}): {what}.")
        return None
    version = data.get("schema_version", SCHEMA_VERSION) if isinstance(data, dict) else SCHEMA_VERSION
    if version != SCHEMA_VERSION or isinstance(version, bool):
        notes.append(f"{path.name} has schema_version {str(version)[:40]}, this harness reads {SCHEMA_VERSION}: {what}.")
        return None
    return data


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


def _trial_record(run_dir: Path, entry: dict[str, Any], notes: list[str]) -> TrialRecord:
    rel = str(entry.get("dir") or f"trials/{_int(entry.get('index'), 0):02d}-{entry.get('variant')}-{entry.get('kind')}")
    trial_dir = run_dir / rel
    if not inside(run_dir, trial_dir) or trial_dir.resolve() == run_dir.resolve():
        notes.append(f"The plan names a trial directory outside the run directory ({rel[:80]}): ignored.")
        trial_dir = run_dir / "trials" / "(outside)"
    record = TrialRecord(
        name=trial_dir.name,
        dir=trial_dir,
        index=_int(entry.get("index"), 0),
        variant=str(entry.get("variant", "?")),
        kind=str(entry.get("kind", "?")),
        repetition=_int(entry.get("repetition"), 0),
        status="not run",
    )
    trial_json = trial_dir / "trial.json"
    if not trial_json.is_file() or not inside(run_dir, trial_json):
        return record
    try:
        info = read_json(trial_json)
        if not isinstance(info, dict):
            raise HarnessInputError("not an object")
    except HarnessInputError as exc:
        problem = str(exc).removeprefix(str(trial_json) + ":").strip()
        record.status = "unreadable"
        record.error = f"trial.json could not be read ({problem})"
        notes.append(f"{record.name}/trial.json could not be read ({problem}).")
        return record
    record.index = _int(info.get("index"), record.index)
    record.variant = str(info.get("variant", record.variant))
    record.kind = str(info.get("kind", record.kind))
    record.repetition = _int(info.get("repetition"), record.repetition)
    status = info.get("status")
    # `running` left on disk means the run stopped (Ctrl-C, crash) while this trial ran.
    record.status = {"ok": "ok", "running": "interrupted"}.get(str(status), "failed")
    record.error = info.get("error") or None
    record.command = info.get("command") or None
    record.summary = as_object(info.get("summary"))
    record.server_info = as_object(info.get("server_info"))
    for rel_trace in as_list(info.get("traces")):
        path = trial_dir / str(rel_trace)
        if not inside(trial_dir, path):  # a name from a file: never read or link outside the trial
            notes.append(f"Trial {record.name}: trace {str(rel_trace)[:80]!r} lies outside the trial directory: ignored.")
        elif path.is_file():
            record.trace_paths.append(path)
        else:
            record.missing_traces.append(str(rel_trace))
    launch = info.get("launch")
    record.launch = launch if isinstance(launch, str) else None
    log = trial_dir / "server.log"
    if not log.exists() and record.launch:  # warm modes: the launch's log
        log = run_dir / record.launch / "server.log"
    record.server_log = log if log.is_file() and inside(run_dir, log) and (
        log.parent != trial_dir or inside(trial_dir, log)) else None
    return record


def load_report_data(run_dir: Path) -> ReportData:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise HarnessInputError(f"{run_dir}: not a run directory (no such directory)")
    markers = ("run.json", "results.json", "trials")
    if not any((run_dir / m).exists() for m in markers):
        raise HarnessInputError(
            f"{run_dir}: not a run directory (expected run.json, results.json or trials/ written by `harness run`)"
        )
    notes: list[str] = []

    run = as_object(_read_json(run_dir / "run.json", notes, "the trial plan and run status are unknown"))
    results = _read_json(
        run_dir / "results.json", notes, f"no verdict yet; run `harness check {run_dir}` to evaluate the rules"
    )
    if results is not None and not isinstance(results, dict):
        notes.append("results.json is not an object: no verdict.")
        results = None
    analysis_doc = _read_json(
        run_dir / "analysis.json", notes, "no trace analysis: kernel counts, region times and top kernels are not shown"
    )
    analysis = as_object(as_object(analysis_doc).get("trials"))
    for trial_name, message in as_object(as_object(analysis_doc).get("errors")).items():
        notes.append(f"The trace analysis of {trial_name} failed: {message}.")
    environment = as_object(_read_json(run_dir / "environment.json", notes, "environment metadata is not shown"))

    scenario: dict[str, Any] = {}
    scenario_path = run_dir / "scenario.yaml"
    if scenario_path.exists():
        from sglang_spec_harness.scenario import read_yaml

        try:
            loaded, _ = read_yaml(scenario_path)
            scenario = as_object(loaded)
        except HarnessInputError as exc:
            problem = str(exc).removeprefix(str(scenario_path)).lstrip(":0123456789 ")
            notes.append(f"scenario.yaml could not be read ({problem}): variant descriptions are not shown.")
    else:
        notes.append("scenario.yaml is missing: variant descriptions and arguments are not shown.")

    # Trials: the plan first (so that trials that never ran show up), then any trial directory
    # on disk that the plan does not name.
    trials: list[TrialRecord] = []
    seen: set[str] = set()
    for entry in run.get("plan") or []:
        if isinstance(entry, dict):
            record = _trial_record(run_dir, entry, notes)
            trials.append(record)
            seen.add(record.name)
    trials_dir = run_dir / "trials"
    if trials_dir.is_dir():
        for trial_json in sorted(trials_dir.glob("*/trial.json")):
            if trial_json.parent.name in seen:
                continue
            parts = trial_json.parent.name.split("-")
            guess = {
                "dir": f"trials/{trial_json.parent.name}",
                "index": int(parts[0]) if parts[0].isdigit() else len(trials),
                "variant": "-".join(parts[1:-1]) or "?",
                "kind": parts[-1] if len(parts) > 1 else "?",
            }
            trials.append(_trial_record(run_dir, guess, notes))
    trials.sort(key=lambda t: t.index)

    for t in trials:
        if t.status in ("failed", "unreadable"):
            notes.append(f"Trial {t.name} failed: {t.error or 'no error recorded'}.")
        elif t.status == "interrupted":
            notes.append(f"Trial {t.name} was still running when the run stopped: its measurements are partial.")
    not_run = [t.name for t in trials if t.status == "not run"]
    if not_run:
        notes.append(f"{len(not_run)} planned trial(s) did not run: {', '.join(not_run)}.")
    if run.get("status") == "incomplete" or run.get("error"):
        notes.append(f"The run is incomplete: {run.get('error') or 'it stopped before the end of the plan'}.")
    for t in trials:
        if t.ok and t.kind == "profiled" and t.name not in analysis and analysis_doc is not None:
            notes.append(f"analysis.json has no entry for profiled trial {t.name}.")
        if t.missing_traces:
            notes.append(f"Trial {t.name}: trace file(s) listed but missing: {', '.join(t.missing_traces)}.")

    launches: list[dict[str, Any]] = []
    for entry in run.get("launches") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("dir"), str):
            continue
        if not inside(run_dir, run_dir / entry["dir"]) or (run_dir / entry["dir"]).resolve() == run_dir.resolve():
            notes.append(f"run.json names a launch directory outside the run directory ({entry['dir'][:80]}): ignored.")
            continue
        described = _read_json(run_dir / entry["dir"] / "launch.json", notes, f"launch {entry['dir']} is not described")
        launch = {**entry, **as_object(described)}
        log = run_dir / entry["dir"] / "server.log"
        launch["server_log"] = log if log.is_file() and inside(run_dir / entry["dir"], log) else None
        launches.append(launch)
        if launch.get("status") == "failed":
            notes.append(f"Server launch {entry['dir']} failed: {launch.get('error') or 'no error recorded'}.")

    return ReportData(
        launches=launches,
        run_dir=run_dir,
        run=run,
        results=results,
        analysis=analysis,
        environment=environment,
        scenario=scenario,
        variants=_variants(scenario),
        trials=trials,
        notes=notes,
    )
