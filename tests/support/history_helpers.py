"""Run directories for the history tests, a real PostgreSQL server on loopback, a sweep of real
micro-engine runs, and a database of schema version 1.

Series of runs are built with `rundir_factory` (planted TPOT, accept length and kernel counts, in the
real file shapes, plus op tables made from the planted counts) and evaluated by the real rules
(`check_run_dir` writes results.json), each with its own name, start time and SGLang commit, as a
nightly job would leave them. `micro_sweep` runs the micro engine as `harness sweep` would.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from datetime import datetime, timedelta, UTC
from glob import glob
from pathlib import Path

import numpy as np
import pytest

from sglang_spec_harness.verdict.judge import check_run_dir
from support.rundir_factory import SCENARIO, Arm, count_row, file_facts, write_run_dir

START = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def series_run(root: Path, i: int, *, base_tpot: float, cand_tpot: float, cand_softmax: int = 0, base_softmax: int = 2,
               aa: bool = False,
               noise: float = 0.02, seed: int = 0, name: str = "planted", hardware: str = "AMD EPYC",
               sglang_commit: str | None = None, op_tables: bool = True) -> Path:
    """Run number `i` of a nightly series: 6 TPOT samples per arm around the given medians (and op
    tables in its analysis unless `op_tables` is false: a run analysed before they existed)."""
    rng = np.random.default_rng(seed * 1000 + i)
    base = Arm(tpot_ms=list(base_tpot * (1 + noise * rng.standard_normal(6))),
               profile=[file_facts(softmax_per_replay=base_softmax)])
    cand = Arm(tpot_ms=list(cand_tpot * (1 + noise * rng.standard_normal(6))),
               profile=[file_facts(softmax_per_replay=cand_softmax)])
    work = root / "work" / f"{name}-{i}"
    run = write_run_dir(work, base, cand, aa=aa)
    started = START + timedelta(days=i)
    target = root / "runs" / f"{started:%Y%m%d-%H%M%S}-{name}{'-aa' if aa else ''}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(run, target)
    info = json.loads((target / "run.json").read_text())
    info.update(started=started.isoformat(), finished=(started + timedelta(minutes=5)).isoformat())
    (target / "run.json").write_text(json.dumps(info))
    commit = sglang_commit or f"{i:02d}" + "ab" * 19
    probe = {"python": "3.11.7", "torch": "2.13.0+cpu", "sglang": {"version": "0.5.9", "commit": commit}}
    (target / "environment.json").write_text(json.dumps({
        "schema_version": 1, "harness": {"version": "0.1.0", "git_commit": "c0ffee" * 6 + "abcd"},
        "hostname": "runner-1", "cpu": hardware, "cpu_count": 2, "gpus": [],
        "variants": {"baseline": probe, "candidate": probe},
    }))
    if op_tables:
        with_op_tables(target)
    check_run_dir(target)
    return target


def with_op_tables(run: Path) -> None:
    """Give each planted trace analysis the op tables a real one has, from its planted counts: per
    region, `cunn_SoftMaxForward` as often per replay as the planted softmax count and a constant
    `gemm_kernel`, 12 per replay."""
    from collections import Counter

    from sglang_spec_harness.traces.counting import op_table_from_histograms

    analysis = json.loads((run / "analysis.json").read_text())
    for trial in analysis["trials"].values():
        for facts in trial["files"]:
            tables = []
            for row in facts["counts"]:
                per_replay, replays = row["per_replay_max"], row["replays"]
                histograms = {"gemm_kernel": Counter({12: replays})}
                times = {"gemm_kernel": 30.0 * replays}
                if per_replay:
                    histograms["cunn_SoftMaxForward"] = Counter({per_replay: replays})
                    times["cunn_SoftMaxForward"] = row["time_us"]
                table = op_table_from_histograms(row["region"], row["unit"], replays, histograms, times)
                tables.append(table.model_dump(mode="json"))
            facts["op_tables"] = tables
    (run / "analysis.json").write_text(json.dumps(analysis))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    found = shutil.which("initdb")
    candidates = ([found] if found else []) + sorted(glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    for candidate in candidates:
        bindir = Path(candidate).resolve().parent
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


class PostgresServer:
    """initdb + pg_ctl in a temporary folder, listening on 127.0.0.1 only, trust authentication.
    PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user."""

    def __init__(self) -> None:
        bindir = postgres_bin()
        if bindir is None:
            pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run installs it)")
        self.bindir = bindir
        self.prefix: list[str] = []
        self.base = Path(tempfile.mkdtemp(prefix="harness-pg-"))
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.base)
                pytest.skip("running as root and there is no `postgres` user to run the server as")
            os.chown(self.base, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data = self.base / "data"
        self.port = free_port()
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "harness", "-E", "UTF8", "--no-sync")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.base / "server.log"), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.prefix, str(self.bindir / tool), *args], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            log = self.base / "server.log"
            raise RuntimeError(f"{tool} failed: {done.stderr[-2000:]}{log.read_text()[-2000:] if log.exists() else ''}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://harness@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


# ---- a sweep of real micro-engine runs, in the shape `harness sweep` writes ------------------------

MICRO_SWEEP = {
    "name": "micro_sweep",
    "engine": "micro",
    "server": {"args": {"--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--vocab-size": 512,
                        "--hidden-size": 32, "--device": "cpu", "--num-threads": 1},
               "startup_timeout_s": 60, "request_timeout_s": 60},
    "variants": {"baseline": {"args": {"--disable-topk1-fast-path": True}}, "candidate": {"args": {}}},
    # One request at a time: every replay at batch size 1, so that op counts per replay are the same in
    # every run of the same code (with several at once, timing decides some replays' batch size).
    "workload": {"num_requests": 4, "input_len": 16, "output_len": 16, "concurrency": 1, "warmup_requests": 1},
    "trials": {"mode": "interleaved", "launches": 1, "repetitions": 2, "profiled": 1, "seed": 7},
    "profile": {"num_steps": 6, "activities": ["CPU"]},
    "rules": [
        {"name": "candidate_no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
         "variants": ["candidate"], "per": "replay", "equals": 0},
        {"name": "identity", "kind": "output_identity"},
    ],
}


def micro_sweep(root: Path, fast_path: list[bool], *, name: str = "20260401-020000-micro_sweep",
                labels: list[str] | None = None, environments: list[dict] | None = None) -> list[Path]:
    """A sweep as `harness sweep` leaves it: the baseline's profiled trial run once, then per point the
    candidate's trials (the micro engine's fast path on or off: `fast_path[i]`) in
    `<root>/<name>/releases/<label>/`, the baseline's trial adopted, run.json's `sweep` written, the rules
    checked and the report built. Labels default to 0.5.10, 0.5.11, ..."""
    from sglang_spec_harness.report import build_report
    from sglang_spec_harness.rundir import RunRecord, SweepPoint, read_record, write_record
    from sglang_spec_harness.run.combine import adopt_trials
    from sglang_spec_harness.run.execute import run_scenario
    from sglang_spec_harness.scenario import load_scenario

    labels = labels or [f"0.5.{10 + i}" for i in range(len(fast_path))]
    sweep_dir = root / name
    sweep_dir.mkdir(parents=True)
    path = sweep_dir / "scenario.yaml"
    path.write_text(json.dumps(MICRO_SWEEP))
    scenario = load_scenario(path)
    once = sweep_dir / "baseline"
    run_scenario(scenario, path, select={("baseline", "profiled")}, run_dir=once)
    runs = []
    for position, (fast, label) in enumerate(zip(fast_path, labels)):
        spec = scenario.variants["candidate"]
        args = {} if fast else {"--disable-topk1-fast-path": True}
        variants = {**scenario.variants, "candidate": spec.model_copy(update={"args": args})}
        run_dir = sweep_dir / "releases" / label
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_scenario(scenario.model_copy(update={"variants": variants}), path,
                     select={("candidate", "timed"), ("candidate", "profiled")}, run_dir=run_dir)
        adopt_trials(run_dir, once)
        record = read_record(run_dir / "run.json", RunRecord)
        record.sweep = SweepPoint(sweep=name, axis="sglang_release", point=label, label=label, position=position,
                                  environment=(environments or [{}] * len(fast_path))[position])
        write_record(run_dir / "run.json", record)
        check_run_dir(run_dir)
        build_report(run_dir)
        runs.append(run_dir)
    return runs


# ---- a version-1 database, as the harness before sweeps created it -----------------------------------


def create_v1_database(url: str) -> None:
    """The tables of schema version 1 (the DDL of sglang_spec_harness/history/db.py before version 2), empty,
    with `schema_version` 1."""
    import sqlalchemy as sa

    md = sa.MetaData()
    meta = sa.Table("harness_meta", md, sa.Column("key", sa.String(64), primary_key=True),
                    sa.Column("value", sa.Text, nullable=False))
    sa.Table(
        "runs", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_key", sa.String(64), nullable=False, unique=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("report", sa.Text),
        sa.Column("scenario", sa.String(255)),
        sa.Column("engine", sa.String(64)),
        sa.Column("aa", sa.Boolean, nullable=False, default=False),
        sa.Column("mode", sa.String(64)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("started", sa.String(40)),
        sa.Column("finished", sa.String(40)),
        sa.Column("evaluated_at", sa.String(40)),
        sa.Column("verdict", sa.String(16)),
        sa.Column("exit_code", sa.Integer),
        sa.Column("harness_version", sa.String(64)),
        sa.Column("harness_commit", sa.String(64)),
        sa.Column("sglang_version", sa.String(64)),
        sa.Column("sglang_commit", sa.String(64)),
        sa.Column("hardware", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255)),
        sa.Column("scenario_json", sa.JSON),
        sa.Column("environment_json", sa.JSON),
        sa.Column("run_json", sa.JSON),
        sa.Column("ingested_at", sa.String(40), nullable=False),
    )
    sa.Table(
        "variants", md,
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("variant", sa.String(64), primary_key=True),
        sa.Column("config", sa.JSON),
        sa.Column("python", sa.String(64)),
        sa.Column("torch_version", sa.String(64)),
        sa.Column("sglang_version", sa.String(64)),
        sa.Column("sglang_commit", sa.String(64)),
    )
    sa.Table(
        "samples", md,
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("variant", sa.String(64), primary_key=True),
        sa.Column("metric", sa.String(64), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("trial", sa.String(255)),
        sa.Column("value", sa.Float, nullable=False),
    )
    sa.Table(
        "rules", md,
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(64)),
        sa.Column("verdict", sa.String(16)),
        sa.Column("reason", sa.Text),
        sa.Column("params", sa.JSON),
        sa.Column("numbers", sa.JSON),
    )
    sa.Table(
        "kernel_counts", md,
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("variant", sa.String(64), primary_key=True),
        sa.Column("trial", sa.String(255), primary_key=True),
        sa.Column("rank", sa.Integer, primary_key=True),
        sa.Column("region", sa.String(128), primary_key=True),
        sa.Column("pattern", sa.String(128), primary_key=True),
        sa.Column("unit", sa.String(32)),
        sa.Column("known", sa.Boolean, nullable=False),
        sa.Column("replays", sa.Integer),
        sa.Column("total", sa.Integer),
        sa.Column("per_replay_min", sa.Integer),
        sa.Column("per_replay_max", sa.Integer),
    )
    engine = sa.create_engine(url)
    md.create_all(engine)
    with engine.begin() as conn:
        conn.execute(meta.insert().values(key="schema_version", value="1"))
    engine.dispose()


def insert_as_v1(url: str, record) -> None:
    """A run as a version-1 harness stored it: its row and children in the version-1 columns only."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    tables = sa.MetaData()
    tables.reflect(engine)
    runs = tables.tables["runs"]
    with engine.begin() as conn:
        row = {c.name: getattr(record, c.name, None) for c in runs.columns if c.name not in ("id", "run_key", "ingested_at")}
        row.update(run_key=record.key, ingested_at="2026-03-01T00:00:00+00:00")
        run_id = conn.execute(runs.insert().values(**row)).inserted_primary_key[0]
        for name, rows in (("variants", record.variants), ("samples", record.samples), ("rules", record.rules),
                           ("kernel_counts", record.kernel_counts)):
            table = tables.tables[name]
            if rows:
                conn.execute(table.insert(), [{k: v for k, v in {**r, "run_id": run_id}.items() if k in table.c}
                                              for r in rows])
    engine.dispose()


# ---- the committed release sweep, replayed as planted runs ------------------------------------------


RELEASE_SWEEP_JSON = Path(__file__).resolve().parents[2] / "benchmarks" / "sglang_release_sweep.json"
RELEASE_SWEEP_YAML = Path(__file__).resolve().parents[2] / "scenarios" / "sglang_cpu_release_sweep.yaml"


def release_sweep_runs(root: Path, rule_names: list[str] | None = None, name: str = "20261203-100000-release_sweep") -> list[Path]:
    """benchmarks/sglang_release_sweep.json's releases as one planted sweep: per release the candidate's
    softmax and argmax per replay in DRAFT_DECODE and DRAFT_EXTEND and its TPOT, as that sweep measured
    them; the baseline's as the patched 0.5.23 (softmax 4 / 1). The rules are the shipped release
    scenario's kernel_count rules (only those named in `rule_names` when given: the committed sweep
    ran before the argmax rule existed), checked by the real rule evaluators."""
    import yaml

    from sglang_spec_harness.rundir import RunRecord, SweepPoint, read_record, write_record

    shipped = yaml.safe_load(RELEASE_SWEEP_YAML.read_text())
    rules = [r for r in shipped["rules"] if r["kind"] == "kernel_count" and (rule_names is None or r["name"] in rule_names)]
    scenario = {**SCENARIO, "name": shipped["name"], "patterns": shipped["patterns"], "rules": rules}
    releases = json.loads(RELEASE_SWEEP_JSON.read_text())["releases"]
    runs = []
    for position, release in enumerate(releases):
        counts = {region: release["regions"][region]["per_replay"] for region in ("DRAFT_DECODE", "DRAFT_EXTEND")}
        candidate = _with_argmax(file_facts(softmax_per_replay=counts["DRAFT_DECODE"]["softmax"], cpu=True), counts)
        baseline = _with_argmax(file_facts(softmax_per_replay=4, cpu=True), {})
        rng = np.random.default_rng(position)
        tpot = release["tpot_ms"]
        run = write_run_dir(root / "work" / release["release"],
                            Arm(tpot_ms=list(190.0 * (1 + 0.02 * rng.standard_normal(2))), profile=[baseline]),
                            Arm(tpot_ms=list(tpot * (1 + 0.02 * rng.standard_normal(2))), profile=[candidate]),
                            scenario=scenario)
        target = root / name / "points" / f"{position:02d}-{release['release']}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(run, target)
        record = read_record(target / "run.json", RunRecord)
        record.started = (START + timedelta(minutes=3 * position)).isoformat()
        record.sweep = SweepPoint(sweep=name, axis="sglang_release", point=release["release"], label=release["release"],
                                  position=position)
        write_record(target / "run.json", record)
        check_run_dir(target)
        runs.append(target)
    return runs


def _with_argmax(facts: dict, counts: dict[str, dict[str, int]]) -> dict:
    """The file facts with an `argmax` row per draft region (TARGET_VERIFY: none)."""
    unit = facts["counts"][0]["unit"]
    replays = facts["counts"][0]["replays"]
    for region in ("DRAFT_DECODE", "DRAFT_EXTEND", "TARGET_VERIFY"):
        per = counts.get(region, {}).get("argmax", 0)
        row = count_row(region, unit, "argmax", [per] * replays)
        row["matched_names"] = {"aten::argmax": row["total"]} if per else {}
        facts["counts"].append(row)
        facts["regions"][region]["counts"]["argmax"] = row
    return facts
