"""Shared pytest fixtures (keep small and general)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sglang_spec_harness.run.interrupts import SIGNALS

# Test files in SGLang's style: each runs as `python3 FILE` (tests/support/sglang_style.py), not in this session.
collect_ignore = ["sglang_style"]

# Real GPU traces live beside the project (../shared/traces), never inside it.
SHARED_TRACES = Path(os.environ.get("HARNESS_SHARED_TRACES") or Path(__file__).parents[2] / "shared" / "traces")


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The directory of real profiler traces; tests that need it skip (saying why) without it."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (set HARNESS_SHARED_TRACES)")
    return SHARED_TRACES


@pytest.fixture
def terminal_signals():
    """A terminal job's signal dispositions in this test process, then its own back. A suite started
    in the background (`make test &`, `nohup`) inherits SIGINT or SIGHUP ignored, and the harness
    rightly keeps a signal it was started to ignore (children: `faultkit.default_signals_in_child`)."""
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of the module's own (initdb + pg_ctl on loopback), stopped after it."""
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is in the `postgres` and `test` extras")
    from support.history_helpers import PostgresServer

    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (tests/support/chromium.py); tests that need it skip (saying why) without it."""
    from support.chromium import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set HARNESS_CHROMIUM)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the `test` extra")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


# Markers that follow from a test's fixtures: the test drives Chromium, or starts PostgreSQL.
FIXTURE_MARKERS = {"browser": "browser", "postgres": "postgres"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
