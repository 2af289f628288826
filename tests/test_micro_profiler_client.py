"""The micro server's /start_profile against SGLang 0.5.23's own code: its request struct and its client.

- `ProfileReq` (with `BaseReq` and `ProfileReqType`) is compiled from the wheel's io_struct.py and
  validated through the wheel's real `msgspec_struct_pydantic_core_schema`, as SGLang's HTTP server
  does; the micro server must accept and refuse the same bodies, with the same coerced values.
- `sglang/profiler.py` from the wheel, SGLang's profiling client, drives a real micro server on
  loopback. It is run as a script: its imports are argparse, json, os, time, pathlib and requests,
  so nothing is stubbed (`python -m sglang.profiler` would first run sglang/__init__.py, which
  imports the whole server).
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
from support import sglang_wheel
from support.http_helpers import get, post
from support.micro_server import SMALL_FLAGS, generate, greedy, start_server

from sglang_spec_harness.micro.server import BadRequest, parse_profile


@pytest.fixture(scope="module")
def wheel_root() -> Path:
    return sglang_wheel.source_root_or_skip()


@pytest.fixture(scope="module")
def sglang_profile_req(wheel_root: Path) -> Any:
    """A pydantic adapter for `Optional[ProfileReq]`: SGLang's /start_profile body parameter."""
    from pydantic import TypeAdapter

    spec = importlib.util.spec_from_file_location("sglang_msgspec_utils", wheel_root / "sglang/srt/utils/msgspec_utils.py")
    msgspec_utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(msgspec_utils)
    module = types.ModuleType("sglang_io_struct_profile_req")
    exec("from __future__ import annotations\nfrom enum import Enum\nfrom typing import Any, Dict, List, Optional\n"
         "import msgspec", module.__dict__)
    module.msgspec_struct_pydantic_core_schema = msgspec_utils.msgspec_struct_pydantic_core_schema
    sys.modules[module.__name__] = module  # msgspec resolves the string annotations through it
    try:
        sglang_wheel.lift(wheel_root / "sglang/srt/managers/io_struct.py", ("BaseReq", "ProfileReqType", "ProfileReq"),
                          module.__dict__)
        yield TypeAdapter(module.ProfileReq | None)
    finally:
        sys.modules.pop(module.__name__, None)


def test_sglang_answers_400_for_an_invalid_body(wheel_root: Path) -> None:
    # SGLang's handler of RequestValidationError (not FastAPI's default 422) answers /start_profile.
    tree = ast.parse((wheel_root / "sglang/srt/entrypoints/http_server.py").read_text())
    handler = next(node for node in tree.body if isinstance(node, ast.AsyncFunctionDef)
                   and any("RequestValidationError" in ast.unparse(d) for d in node.decorator_list))
    final = handler.body[-1]
    assert isinstance(final, ast.Return) and "status_code=400" in ast.unparse(final)
    route = next(node for node in tree.body if isinstance(node, ast.AsyncFunctionDef) and node.name == "start_profile_async")
    assert ast.unparse(route.args.args[0].annotation) == "Annotated[Optional[ProfileReq], Body()]"


# Bodies SGLang 0.5.23 accepts or refuses; the micro server must agree (its documented limits aside).
BODIES: list[Any] = [
    None, {}, {"num_steps": 5}, {"num_steps": "5"}, {"num_steps": " 7 "}, {"num_steps": 5.0}, {"num_steps": "5.0"},
    {"num_steps": "1_000"}, {"num_steps": True}, {"num_steps": "five"}, {"num_steps": 5.5}, {"num_steps": "0x10"},
    {"num_steps": [5]}, {"num_steps": None}, {"num_steps": 0}, {"start_step": "2", "num_steps": "3"},
    {"start_step": "x"}, {"with_stack": "true"}, {"with_stack": "no"}, {"with_stack": "maybe"}, {"record_shapes": 0},
    {"activities": ["CPU"]}, {"activities": "CPU"}, {"activities": ["CPU", 1]}, {"profile_id": "run-1"},
    {"profile_id": 5}, {"output_dir": 3}, {"profile_prefix": None}, {"profile_prefix": "p"}, {"no_such_field": 1},
    {"merge_profiles": "false"}, {"profile_by_stage": 0}, {"detailed_annotations": "yes"},
    {"profile_stages": ["decode"]}, {"rid": 3}, {"req_type": 2}, {"req_type": 3}, [], "start", 5,
]
# What the micro engine refuses although SGLang takes it: one rank, no per-stage profiles.
MICRO_LIMITS: list[Any] = [{"merge_profiles": True}, {"profile_by_stage": True}, {"num_steps": -2}]


def _sglang_view(adapter: Any, body: Any) -> dict[str, Any] | None:
    """What SGLang's server reads from the body, or None when it refuses it."""
    from pydantic import ValidationError

    try:
        req = adapter.validate_python(body)
    except ValidationError:
        return None
    return {"num_steps": (req.num_steps if req else None) or None, "start_step": req.start_step if req else None,
            "with_stack": (req.with_stack if req else None) is not False,
            "record_shapes": (req.record_shapes if req else None) is not False,
            "profile_id": req.profile_id if req else None, "profile_prefix": (req.profile_prefix if req else None) or None}


@pytest.mark.parametrize("body", BODIES, ids=lambda b: json.dumps(b))
def test_micro_reads_start_profile_bodies_as_sglang_does(sglang_profile_req: Any, body: Any) -> None:
    expected = _sglang_view(sglang_profile_req, body)
    try:
        got = parse_profile(body)
    except BadRequest as exc:
        assert expected is None, f"SGLang accepts {body!r} as {expected}; the micro server refused it: {exc}"
        return
    assert expected is not None, f"SGLang refuses {body!r}; the micro server accepted it"
    assert {k: getattr(got, k) for k in expected} == expected


@pytest.mark.parametrize("body", MICRO_LIMITS, ids=lambda b: json.dumps(b))
def test_micro_limits_are_bodies_sglang_accepts(sglang_profile_req: Any, body: Any) -> None:
    assert _sglang_view(sglang_profile_req, body) is not None
    with pytest.raises(BadRequest):
        parse_profile(body)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(tmp_path_factory.mktemp("profiler-client"), *SMALL_FLAGS)
    try:
        yield server
    finally:
        assert server.terminate() == 0, server.log()


@pytest.mark.slow
def test_string_step_counts_over_http(server) -> None:
    response = post(f"{server.url}/start_profile", json={"num_steps": "five"})
    assert response.status_code == 400 and "num_steps" in response.json()["error"]["message"]
    assert post(f"{server.url}/stop_profile").status_code == 400  # nothing was started


@pytest.mark.slow
def test_sglang_profiler_client_drives_the_micro_server_to_a_trace(server, wheel_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "profiles"
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    proc = subprocess.run(
        [sys.executable, str(wheel_root / "sglang/profiler.py"), "--url", server.url, "--output-dir", str(out),
         "--num-steps", "3", "--no-gpu"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Dump profiling traces to" in proc.stdout
    (run_dir,) = out.iterdir()  # <output-dir>/<time.time()>/, made by the client
    server_args = json.loads((run_dir / "server_args.json").read_text())
    assert server_args == get(f"{server.url}/server_info").json() | {
        "internal_states": server_args["internal_states"]}  # counters move between the two reads
    assert server_args["speculative_num_steps"] == 3
    # The client returns once the profiler started (as SGLang 0.5.23's server replies); the steps
    # happen with traffic.
    for i in range(2):
        assert generate(server.url, {"text": f"profiled request {i}", "sampling_params": greedy(16)}).status_code == 200
    deadline = time.monotonic() + 60
    traces: list[Path] = []
    while time.monotonic() < deadline and not traces:
        traces = sorted(run_dir.glob("*-TP-0.trace.json.gz"))
        time.sleep(0.2)
    assert len(traces) == 1, (sorted(p.name for p in run_dir.iterdir()), server.log()[-2000:])
    events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("step[")]
    assert 1 <= len({e["name"].split()[0] for e in steps})
    assert post(f"{server.url}/stop_profile").status_code == 400  # it stopped after 3 steps by itself
