"""Profiler collection over SGLang's HTTP API: `/start_profile`, `/stop_profile`, and waiting until
the trace files are on disk and complete.

With `num_steps` the server's profiler stops by itself after that many forward steps and then writes
`{prefix-}{profile_id}-TP-{rank}....trace.json.gz` into `output_dir`. Writing a large trace takes a
while, so a file counts as complete only when its size has stopped changing and it decompresses to the
end.
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

from sglang_spec_harness.pages.numbers import seconds
from sglang_spec_harness.scenario import ProfileSpec

TRACE_GLOB = "*.trace.json*"
# Only finished names count: writers stage a trace under another name first (the micro engine's
# `X.trace.json.gz.tmp`), and such a file left by a server killed while writing is no trace.
TRACE_SUFFIXES = (".trace.json", ".trace.json.gz")
POLL_S = 0.1
# After the profiled requests, how long the server gets to finish writing traces by itself (it
# stops after num_steps) before the harness asks it to stop (at most trace_timeout_s). Short:
# a server that is still writing answers /stop_profile with "not profiling", and the harness then
# waits for the files (up to trace_timeout_s); one that ran fewer steps waits for nothing.
TRACE_SELF_STOP_WAIT_S = 2.0


class ProfilingError(Exception):
    pass


def start_profile_body(spec: ProfileSpec, *, output_dir: Path, profile_id: str) -> dict[str, Any]:
    return {
        "output_dir": str(output_dir),
        "num_steps": spec.num_steps,
        "activities": list(spec.activities),
        "with_stack": spec.with_stack,
        "record_shapes": spec.record_shapes,
        "profile_id": profile_id,
    }


def start_profile(base_url: str, spec: ProfileSpec, *, output_dir: Path, profile_id: str, timeout_s: float = 120.0) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    body = start_profile_body(spec, output_dir=output_dir, profile_id=profile_id)
    try:
        response = httpx.post(f"{base_url}/start_profile", json=body, timeout=timeout_s, trust_env=False)
    except httpx.HTTPError as exc:
        raise ProfilingError(f"POST /start_profile failed ({type(exc).__name__}: {exc})") from None
    if response.status_code != 200:
        raise ProfilingError(f"POST /start_profile answered HTTP {response.status_code}: {response.text[:300]}")


def stop_profile(base_url: str, *, timeout_s: float = 300.0) -> bool:
    """POST /stop_profile; False when the server says no profile is running (it stopped by itself)."""
    try:
        response = httpx.post(f"{base_url}/stop_profile", timeout=timeout_s, trust_env=False)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def trace_files(directory: Path, pattern: str = "*", *, traces_only: bool = False) -> list[Path]:
    """Regular files the server wrote into `directory` (sorted; hidden files and the temporary files
    a killed writer leaves behind left out; `traces_only`: Kineto traces alone). A link is never
    taken: a server (or anything in the trial directory) must not lead the harness to read, copy or
    report a file outside the trial directory."""
    try:
        if not directory.is_dir():
            return []
        return sorted(p for p in directory.glob(pattern)
                      if not p.name.startswith(".") and ".tmp" not in p.name and not p.is_symlink() and p.is_file()
                      and (not traces_only or p.name.endswith(TRACE_SUFFIXES)))
    except OSError:
        return []


def trace_is_complete(path: Path) -> bool:
    """A `.gz` trace decompresses to its end; a plain `.json` one parses."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
            return True
        json.loads(path.read_bytes())
        return True
    except (OSError, EOFError, zlib.error, ValueError):
        return False


def wait_for_traces(output_dir: Path, *, timeout_s: float, settle_s: float = 0.1, expected: int = 1,
                    waiting_since: float | None = None) -> list[Path]:
    """The trace files in `output_dir`, once at least `expected` exist and all are complete (size
    unchanged for `settle_s` and readable to the end). Raises ProfilingError at the timeout (its
    message counts from `waiting_since`, a `time.monotonic()`, when an earlier wait came first)."""
    since = time.monotonic() if waiting_since is None else waiting_since
    deadline = time.monotonic() + timeout_s
    sizes: dict[Path, int] = {}
    stable_since: float | None = None
    while True:
        paths = trace_files(output_dir, TRACE_GLOB, traces_only=True)
        try:
            current = {p: p.stat().st_size for p in paths}
        except OSError:  # replaced or removed meanwhile: look again
            current, paths = {}, []
        now = time.monotonic()
        if len(paths) >= expected and current == sizes and all(current.values()):
            if stable_since is None:
                stable_since = now
            if now - stable_since >= settle_s and all(trace_is_complete(p) for p in paths):
                return paths
        else:
            stable_since = None
        sizes = current
        if now >= deadline:
            found = ", ".join(p.name + ("" if trace_is_complete(p) else " (truncated)") for p in paths) or "none"
            raise ProfilingError(f"no complete trace file in {output_dir} after {seconds(now - since)} (found: {found})")
        time.sleep(POLL_S)


def collect_traces(base_url: str, output_dir: Path, *, trace_timeout_s: float, stop_timeout_s: float) -> list[Path]:
    """The complete trace files of a profile started with `num_steps`, once the profiled requests are
    done: the server's own stop after `num_steps`, or else POST /stop_profile (fewer steps ran) and
    wait. Raises ProfilingError when no complete trace is there within `trace_timeout_s`."""
    started = time.monotonic()
    try:
        return wait_for_traces(output_dir, timeout_s=min(TRACE_SELF_STOP_WAIT_S, trace_timeout_s))
    except ProfilingError:
        pass
    # Fewer forward steps than num_steps ran: the profiler is still on. Stop it.
    stop_profile(base_url, timeout_s=stop_timeout_s)
    left = trace_timeout_s - (time.monotonic() - started)
    return wait_for_traces(output_dir, timeout_s=max(left, 1.0), waiting_since=started)
