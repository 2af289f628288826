"""Run directories for the history tests, and a real PostgreSQL server on loopback.

Series of runs are built with `rundir_factory` (planted TPOT, accept length and kernel counts, in the
real file shapes) and evaluated by the real checks (`check_run_dir` writes results.json), each with
its own name, start time and SGLang commit, as a nightly job would leave them.
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

from harness.verdict.rules import check_run_dir
from rundir_factory import Arm, file_facts, write_run_dir

START = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def series_run(root: Path, i: int, *, base_tpot: float, cand_tpot: float, cand_softmax: int = 0, aa: bool = False,
               noise: float = 0.02, seed: int = 0, name: str = "planted", hardware: str = "AMD EPYC",
               sglang_commit: str | None = None) -> Path:
    """Run number `i` of a nightly series: 6 TPOT samples per arm around the given medians."""
    rng = np.random.default_rng(seed * 1000 + i)
    base = Arm(tpot_ms=list(base_tpot * (1 + noise * rng.standard_normal(6))),
               profile=[file_facts(softmax_per_replay=2)])
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
    check_run_dir(target)
    return target


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
