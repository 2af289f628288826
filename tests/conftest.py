"""Shared pytest fixtures (keep small and general)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# Real GPU traces live beside the project (../shared/traces), never inside it.
SHARED_TRACES = Path(os.environ.get("HARNESS_SHARED_TRACES") or Path(__file__).parents[2] / "shared" / "traces")


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The directory of real profiler traces; tests that need it skip (saying why) without it."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (set HARNESS_SHARED_TRACES)")
    return SHARED_TRACES


INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def terminal_signal_dispositions() -> None:
    """The dispositions a terminal's foreground job starts with. A suite started in the background
    (`make test &`, `nohup`) inherits SIGINT or SIGHUP ignored, and the harness rightly keeps a
    signal it was started to ignore: tests of interrupts set these in themselves (this) or in their
    children (`faultkit.default_signals_in_child`)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture
def terminal_signals():
    """This test process gets a terminal job's signal dispositions for the test, then its own back."""
    saved = {sig: signal.getsignal(sig) for sig in INTERRUPT_SIGNALS}
    terminal_signal_dispositions()
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
