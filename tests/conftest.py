"""Shared pytest fixtures (keep small and general)."""

from __future__ import annotations

import os
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
