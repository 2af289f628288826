"""The results database: SQLAlchemy Core, so that one code path serves a SQLite file (the default,
nothing to start) and a team's PostgreSQL server (by URL).

Tables (schema version in `harness_meta`):
  runs          one row per run directory (identified by `run_key`), with its status
                (complete | incomplete | damaged) and the reason, versions, commits, hardware, verdict,
                and its sweep point (sweep, axis, point, label, position) when it is one
  variants      per run and variant: its configuration, software versions and the hash of its
                greedy outputs
  samples       per run, variant and metric: the samples (TPOT per timed trial, accept length,
                throughput)
  rules         per run: every rule's verdict, reason, parameters and numbers
  kernel_counts per run, variant, profiled trial, rank, region and pattern: the trace analysis counts
  op_counts     per run, variant, region, unit and op name: its count per replay over the variant's
                profiled trials and ranks (min, median, max), replays, time
  region_times  per run, variant and region: instances and time (the profiled trials' region_times)
  region_functions  per run, variant, region and Python function (file, name, first line): calls and
                time over the variant's profiled trials (with_stack traces only)
  acks          per series and run: a change point marked intended (`harness history ack`): why, who, when
  confirmations per pair of runs, variant and timing metric: the two points run again side by side
                (`harness sweep --confirm`): confirmed or not, the interval, the run directory
Children are written in the same transaction as their run row, so a run row means a whole run. Acks
and confirmations name runs by `run_key`, so that re-ingesting a run (a new row id) keeps them.

Version 2 added the sweep columns, the output hash, op_counts and region_times; version 3
region_functions; version 4 the acks and confirmations. An older database is migrated in place when
opened (`_migrate`); from a version before 3 its runs are re-read by the next ingest.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError, ProgrammingError

from sglang_spec_harness.errors import HarnessInputError

SCHEMA_VERSION = 4
DEFAULT_DB = Path("reports") / "history.sqlite"
DB_ENV = "HARNESS_HISTORY_DB"

metadata = sa.MetaData()

meta = sa.Table(
    "harness_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_key", sa.String(64), nullable=False, unique=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("report", sa.Text),  # index.html beside the run, when there was one
    sa.Column("scenario", sa.String(255)),
    sa.Column("engine", sa.String(64)),
    sa.Column("aa", sa.Boolean, nullable=False, default=False),
    sa.Column("mode", sa.String(64)),  # run.json `mode` (null: one TPOT sample per server launch)
    sa.Column("status", sa.String(16), nullable=False),  # complete | incomplete | damaged
    sa.Column("reason", sa.Text),
    sa.Column("started", sa.String(40)),  # ISO 8601 in UTC: sorts as text on every backend
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
    # run.json `sweep` (version 2): a point of a sweep over SGLang releases or revisions
    sa.Column("sweep", sa.String(255)),
    sa.Column("sweep_axis", sa.String(32)),
    sa.Column("sweep_point", sa.String(255)),
    sa.Column("sweep_label", sa.String(255)),
    sa.Column("sweep_position", sa.Integer),
    sa.Column("scenario_json", sa.JSON),  # the resolved scenario (variant configurations, rules)
    sa.Column("environment_json", sa.JSON),
    sa.Column("run_json", sa.JSON),
    sa.Column("ingested_at", sa.String(40), nullable=False),
)

variants = sa.Table(
    "variants", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("variant", sa.String(64), primary_key=True),
    sa.Column("config", sa.JSON),
    sa.Column("python", sa.String(64)),
    sa.Column("torch_version", sa.String(64)),
    sa.Column("sglang_version", sa.String(64)),
    sa.Column("sglang_commit", sa.String(64)),
    # (version 2) sha256 of the profiled trials' greedy outputs in prompt order, and how many requests
    sa.Column("output_hash", sa.String(64)),
    sa.Column("outputs", sa.Integer),
)

samples = sa.Table(
    "samples", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("variant", sa.String(64), primary_key=True),
    sa.Column("metric", sa.String(64), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("trial", sa.String(255)),
    sa.Column("value", sa.Float, nullable=False),
)

rules = sa.Table(
    "rules", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("kind", sa.String(64)),
    sa.Column("verdict", sa.String(16)),
    sa.Column("reason", sa.Text),
    sa.Column("params", sa.JSON),
    sa.Column("numbers", sa.JSON),
)

kernel_counts = sa.Table(
    "kernel_counts", metadata,
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

op_counts = sa.Table(
    "op_counts", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("variant", sa.String(64), primary_key=True),
    sa.Column("region", sa.String(128), primary_key=True),
    sa.Column("unit", sa.String(32), primary_key=True),
    sa.Column("op_key", sa.String(32), primary_key=True),  # sha256 of `op`: kernel names outgrow an index
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("replays", sa.Integer, nullable=False),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("per_replay_min", sa.Integer, nullable=False),
    sa.Column("per_replay_median", sa.Float, nullable=False),
    sa.Column("per_replay_max", sa.Integer, nullable=False),
    sa.Column("time_us", sa.Float, nullable=False),
)

region_times = sa.Table(
    "region_times", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("variant", sa.String(64), primary_key=True),
    sa.Column("region", sa.String(128), primary_key=True),
    sa.Column("unit", sa.String(32)),
    sa.Column("instances", sa.Integer, nullable=False),
    sa.Column("time_us", sa.Float, nullable=False),
    sa.Column("robust_time_us", sa.Float, nullable=False),
    sa.Column("basis", sa.String(32)),
)

region_functions = sa.Table(
    "region_functions", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("variant", sa.String(64), primary_key=True),
    sa.Column("region", sa.String(128), primary_key=True),
    sa.Column("function_key", sa.String(32), primary_key=True),  # sha256 of file, name and line: paths outgrow an index
    sa.Column("file", sa.Text, nullable=False),
    sa.Column("function", sa.Text, nullable=False),
    sa.Column("line", sa.Integer, nullable=False),
    sa.Column("calls", sa.Integer, nullable=False),
    sa.Column("time_us", sa.Float, nullable=False),
    sa.Column("complete", sa.Boolean, nullable=False),  # the region's table lists every function that ran
)

acks = sa.Table(
    "acks", metadata,
    sa.Column("series_key", sa.String(64), primary_key=True),  # sha256 of `series`: ids outgrow an index
    sa.Column("run_key", sa.String(64), primary_key=True),  # the first run after the change point
    sa.Column("series", sa.Text, nullable=False),  # the series id as `harness history report` names it
    sa.Column("run", sa.String(255), nullable=False),  # the run's name, for people
    sa.Column("label", sa.String(255)),  # its sweep point's label (the release), when it is one
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("acked_by", sa.String(255), nullable=False),
    sa.Column("acked_at", sa.String(40), nullable=False),  # ISO 8601 in UTC
)

confirmations = sa.Table(
    "confirmations", metadata,
    sa.Column("run_key_before", sa.String(64), primary_key=True),
    sa.Column("run_key_after", sa.String(64), primary_key=True),
    sa.Column("variant", sa.String(64), primary_key=True),
    sa.Column("metric", sa.String(64), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),  # confirmed | not confirmed
    sa.Column("measured", sa.Boolean, nullable=False),  # whether the points ran again (else `reason` says why not)
    sa.Column("ratio", sa.Float),  # after / before, side by side
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("confidence", sa.Float),
    sa.Column("method", sa.String(64)),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("run_dir", sa.Text),  # the side-by-side run
    sa.Column("confirmed_at", sa.String(40), nullable=False),
)

CHILD_TABLES = (variants, samples, rules, kernel_counts, op_counts, region_times, region_functions)
# What version 2 added to tables that version 1 had (new tables are created by create_all).
ADDED_IN_2 = {"runs": ("sweep", "sweep_axis", "sweep_point", "sweep_label", "sweep_position"),
              "variants": ("output_hash", "outputs")}


def database_url(db: str | os.PathLike | None) -> str:
    """A URL (`postgresql+psycopg://...`, `sqlite:///...`) as given; anything else is a SQLite file.
    Default: $HARNESS_HISTORY_DB, else reports/history.sqlite."""
    db = db if db is not None else os.environ.get(DB_ENV) or DEFAULT_DB
    text = str(db)
    if "://" in text:
        if text.startswith("postgresql://") or text.startswith("postgres://"):
            # The driver the `postgres` extra installs (psycopg 3), unless the URL names one.
            text = "postgresql+psycopg://" + text.split("://", 1)[1]
        return text
    path = Path(text)
    if path.is_dir():
        raise HarnessInputError(f"--db {text}: is a directory (expected a database file or a URL)")
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def display_url(url: str) -> str:
    """The URL without its password, for printing."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:  # only for display
        return url


def open_database(db: str | os.PathLike | None = None) -> Engine:
    """Connect, create the tables when missing, and check the schema version."""
    url = database_url(db)
    kwargs: dict = {}
    if url.startswith("sqlite"):
        # Another ingester may hold the write lock for a while: wait instead of failing.
        kwargs["connect_args"] = {"timeout": 60}
    try:
        engine = sa.create_engine(url, **kwargs)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise HarnessInputError(f"--db {display_url(url)}: cannot use this database ({exc})") from None
    _create_schema(engine, url)
    return engine


def open_existing(db: str | None) -> Engine:
    """A database to read or add to that must be there already: a SQLite file must exist (opening one
    creates it, which would hide a wrong path behind an empty database). Else one line."""
    given = db if db is not None else os.environ.get(DB_ENV) or str(DEFAULT_DB)
    if "://" not in given and not Path(given).is_file():
        raise HarnessInputError(f"--db {given}: no such database file (create it with `harness history ingest RUN_DIR`)")
    return open_database(given)


def _create_schema(engine: Engine, url: str) -> None:
    # Two ingesters may create the schema at once: the loser's CREATE fails, and its retry finds it.
    for attempt in range(5):
        try:
            metadata.create_all(engine)
            with engine.begin() as conn:
                found = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
                if found is None:
                    conn.execute(meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
                    found = str(SCHEMA_VERSION)
            break
        except (IntegrityError, ProgrammingError, OperationalError) as exc:
            if attempt == 4 or _unreachable(exc):
                raise HarnessInputError(f"--db {display_url(url)}: cannot open the database "
                                        f"({str(exc.orig).strip().splitlines()[0] if exc.orig else exc})") from None
            time.sleep(0.2 * (attempt + 1))
        except DatabaseError as exc:  # not a database at all (SQLite: "file is not a database"): no retry helps
            raise HarnessInputError(f"--db {display_url(url)}: cannot open the database "
                                    f"({str(exc.orig).strip().splitlines()[0] if exc.orig else exc})") from None
    assert found is not None  # the loop breaks with it read or written, or raises on the last attempt
    if int(found) > SCHEMA_VERSION:
        raise HarnessInputError(
            f"--db {display_url(url)}: schema version {found} is newer than this harness's ({SCHEMA_VERSION}); "
            "upgrade the harness")
    if int(found) < SCHEMA_VERSION:
        _migrate(engine, url, int(found))


def _migrate(engine: Engine, url: str, found: int) -> None:
    """An older schema brought to this one in place. Version 1 -> 2: the new columns (the new tables
    exist already: create_all). Before 3, the runs' fingerprints are cleared, so that the next ingest
    re-reads them and fills the new columns and tables (region_functions). Version 3 -> 4: the acks
    and confirmations tables, which create_all made; nothing to re-read. Each step is idempotent (a
    column is added only when missing), so a migration cut short, or two processes migrating at once,
    end in the same schema."""
    for attempt in range(5):
        try:
            with engine.begin() as conn:
                version = int(conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar_one())
                if version >= SCHEMA_VERSION:
                    return
                if version < 2:
                    _add_columns(conn, ADDED_IN_2)
                if version < 3:
                    conn.execute(runs.update().values(fingerprint=f"migrated-from-{version}"))
                conn.execute(meta.update().where(meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))
            return
        except (ProgrammingError, OperationalError) as exc:
            # Another process migrating at the same moment: look again.
            if attempt == 4 or _unreachable(exc):
                raise HarnessInputError(f"--db {display_url(url)}: cannot migrate the database from schema version "
                                        f"{found} ({str(exc.orig).strip().splitlines()[0] if exc.orig else exc})") from None
            time.sleep(0.2 * (attempt + 1))


def _add_columns(conn: sa.Connection, added: dict[str, tuple[str, ...]]) -> None:
    inspector = sa.inspect(conn)
    quote = conn.dialect.identifier_preparer.quote
    for table_name, names in added.items():
        have = {c["name"] for c in inspector.get_columns(table_name)}
        table = metadata.tables[table_name]
        for name in names:
            if name not in have:
                kind = table.c[name].type.compile(dialect=conn.dialect)
                conn.execute(sa.text(f"ALTER TABLE {quote(table_name)} ADD COLUMN {quote(name)} {kind}"))


def _unreachable(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("connection refused", "could not connect", "unable to open database",
                                    "password authentication failed", "does not exist"))


def schema_version(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar_one())


def row_counts(engine: Engine) -> dict[str, int]:
    """Rows per table (what an idempotent re-ingest must leave unchanged)."""
    with engine.connect() as conn:
        return {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                for t in (runs, *CHILD_TABLES)}
