"""The micro engine's HTTP server, as a real process on loopback."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.http_helpers import get, post
from support.micro_server import SMALL_FLAGS, RunningServer, generate, greedy, start_server

from sglang_spec_harness.micro.trace_summary import summarize

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("default_profile_dir")


@pytest.fixture(scope="module")
def server_on(tmp_path_factory: pytest.TempPathFactory, profile_dir: Path) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("on"), *SMALL_FLAGS, env={"SGLANG_TORCH_PROFILER_DIR": str(profile_dir)})
    try:
        yield server
    finally:
        assert server.terminate() == 0, server.log()


@pytest.fixture(scope="module")
def server_off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("off"), *SMALL_FLAGS, "--disable-topk1-fast-path")
    try:
        yield server
    finally:
        assert server.terminate() == 0, server.log()


def _stream(url: str, payload: dict) -> list[str]:
    lines = []
    with httpx.stream("POST", f"{url}/generate", json={**payload, "stream": True}, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line:
                lines.append(line)
    return lines


@pytest.mark.slow
def test_health_info_and_generate(server_on: RunningServer) -> None:
    url = server_on.url
    assert get(f"{url}/health").status_code == 200
    assert get(f"{url}/health_generate", timeout=60).status_code == 200
    response = generate(url, {"text": "hello micro engine", "sampling_params": greedy(24)})
    assert response.status_code == 200
    body = response.json()
    meta = body["meta_info"]
    assert len(body["output_ids"]) == meta["completion_tokens"] == 24
    assert body["text"].isprintable() and len(body["text"].split()) == 24
    assert meta["prompt_tokens"] == 4  # BOS + three words
    assert meta["finish_reason"] == {"type": "length", "length": 24}
    assert 1 <= meta["spec_verify_ct"] < 24
    assert meta["spec_accept_length"] == pytest.approx(24 / meta["spec_verify_ct"])
    assert meta["e2e_latency"] > 0 and meta["id"]
    by_ids = generate(url, {"input_ids": [7, 8, 9], "sampling_params": greedy(5)}).json()
    assert by_ids["meta_info"]["prompt_tokens"] == 3 and len(by_ids["output_ids"]) == 5
    batch = generate(url, {"text": ["one two", "three"], "sampling_params": greedy(6)}).json()
    assert isinstance(batch, list) and [len(b["output_ids"]) for b in batch] == [6, 6]

    for path in ("/server_info", "/get_server_info"):
        info = get(f"{url}{path}").json()
        assert info["speculative_num_steps"] == 3 and info["speculative_eagle_topk"] == 1
        assert info["speculative_num_draft_tokens"] == 4
        assert info["topk1_fast_path"] is True and info["device"] == "cpu" and info["version"]
        assert info["model_path"] and info["speculative_algorithm"] == "EAGLE"
        state = info["internal_states"][0]
        assert 1.0 <= state["avg_spec_accept_length"] <= 4.0
        # glibc's mmap threshold is fixed (launch-to-launch stability), and said so in the log
        assert info["mmap_threshold"] == 128 * 1024 and info["inject_delay_us"] == 0
    assert get(f"{url}/get_model_info").json()["is_generation"] is True

    assert post(f"{url}/flush_cache").status_code == 200
    assert get(f"{url}/server_info").json()["internal_states"][0]["avg_spec_accept_length"] is None


def test_streaming_chunks_are_cumulative_and_end_with_done(server_on: RunningServer) -> None:
    payload = {"text": "stream these tokens please", "sampling_params": greedy(40)}
    lines = _stream(server_on.url, payload)
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    ids = [c["output_ids"] for c in chunks]
    for before, after in itertools.pairwise(ids):
        assert after[: len(before)] == before and len(after) > len(before)
    assert max(len(b) - len(a) for a, b in itertools.pairwise(ids)) > 1  # speculative: several tokens per step
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    final = chunks[-1]
    assert final["meta_info"]["finish_reason"]["type"] == "length"
    assert final["meta_info"]["completion_tokens"] == 40
    assert final["output_ids"] == generate(server_on.url, payload).json()["output_ids"]


def test_bad_requests_get_4xx_and_the_server_lives_on(server_on: RunningServer) -> None:
    url = server_on.url
    bad_generate = [
        b"{not json",
        json.dumps({"sampling_params": {"max_new_tokens": 3}}).encode(),
        json.dumps({"text": "a", "input_ids": [1]}).encode(),
        json.dumps({"text": "a", "sampling_params": {"temperature": 0.7}}).encode(),
        json.dumps({"text": "a", "sampling_params": {"max_new_tokens": -1}}).encode(),
        json.dumps({"input_ids": [1, 99999999]}).encode(),
        json.dumps({"text": 5}).encode(),
        json.dumps({"text": "a", "stream": "yes"}).encode(),
    ]
    for content in bad_generate:
        response = post(f"{url}/generate", content=content, headers={"content-type": "application/json"})
        assert response.status_code == 400, content
        assert response.json()["error"]["message"]
    for path, body in [
        ("/stop_profile", None),
        ("/start_profile", {"activities": ["RPD"]}),
        ("/start_profile", {"num_steps": "five"}),
        ("/start_profile", {"profile_id": 5}),
        ("/start_profile", {"merge_profiles": True}),
    ]:
        response = post(f"{url}{path}", json=body)
        assert 400 <= response.status_code < 500, (path, body)
        assert response.json()["error"]["message"]
    assert get(f"{url}/health").status_code == 200
    assert generate(url, {"text": "still alive", "sampling_params": greedy(3)}).status_code == 200


@pytest.mark.slow
def test_concurrent_requests_are_batched(server_on: RunningServer, profile_dir: Path) -> None:
    url = server_on.url
    assert post(f"{url}/flush_cache").status_code == 200
    prompts = [f"concurrent request {i}" for i in range(6)]
    with ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(lambda t: generate(url, {"text": t, "sampling_params": greedy(96)}).json(), t)
                   for t in prompts]
        # The profiler starts once all six run together: on a loaded machine the requests arrive one by
        # one, and a profile started before them held only batches of one (1 failure in 4 suites).
        deadline = time.monotonic() + 60
        while (get(f"{url}/server_info").json()["internal_states"][0]["num_running_reqs"] < len(prompts)
               and time.monotonic() < deadline):
            time.sleep(0.005)
        # Profile into the default directory (SGLANG_TORCH_PROFILER_DIR), no output_dir in the request.
        started = post(f"{url}/start_profile", json={"num_steps": 12, "profile_id": "batch", "with_stack": False})
        assert started.status_code == 200
        bodies = [future.result() for future in futures]
    assert [len(b["output_ids"]) for b in bodies] == [96] * 6
    state = get(f"{url}/server_info").json()["internal_states"][0]
    assert state["max_decode_batch_size"] == 6
    trace = profile_dir / "batch-TP-0.trace.json.gz"
    deadline = time.monotonic() + 30
    while not trace.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    names = [span.name for span in summarize(trace).spans]
    assert "step[TARGET_VERIFY bs=6]" in names and "step[DECODE bs=6]" in names and "step[DRAFT_EXTEND_V2 bs=6]" in names


@pytest.mark.parametrize("variant", ["on", "off"])
def test_profile_file_name_self_stop_and_softmax_per_region(
    variant: str, server_on: RunningServer, server_off: RunningServer, tmp_path: Path
) -> None:
    server = server_on if variant == "on" else server_off
    url = server.url
    out_dir = tmp_path / "not" / "yet" / "there"
    request = {
        "output_dir": str(out_dir),
        "num_steps": 5,
        "activities": ["CPU", "GPU"],
        "with_stack": False,
        "record_shapes": False,
        "profile_prefix": "micro",
        "profile_id": f"id-{variant}",
    }
    response = post(f"{url}/start_profile", json=request)
    assert response.status_code == 200 and response.text.startswith("Start profiling")
    assert post(f"{url}/start_profile", json=request).status_code == 400  # already in progress
    assert get(f"{url}/server_info").json()["internal_states"][0]["profiling"] is True
    assert generate(url, {"text": "profile this request", "sampling_params": greedy(64)}).status_code == 200
    trace = out_dir / f"micro-id-{variant}-TP-0.trace.json.gz"
    deadline = time.monotonic() + 30
    while not trace.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert trace.exists(), sorted(p.name for p in tmp_path.rglob("*"))
    assert get(f"{url}/server_info").json()["internal_states"][0]["profiling"] is False
    assert post(f"{url}/stop_profile").status_code == 400  # it stopped by itself
    counts = {mode: [s.ops for s in spans] for mode, spans in summarize(trace).by_mode().items()}
    # 5 steps: one prefill (two EXTEND spans), then 4 decode cycles of one request.
    assert counts["EXTEND"] == [0, 1]
    assert counts["TARGET_VERIFY"] == [0] * 4
    expected = 0 if variant == "on" else 2  # num_steps 3: 2 draft forwards; extend: graph body + eager
    assert counts["DECODE"] == [expected] * 4
    assert counts["DRAFT_EXTEND_V2"] == [expected] * 4
    _check_with_harness_analysis(trace, expected)


def _check_with_harness_analysis(trace: Path, expected_per_span: int) -> None:
    """The harness's own trace analysis (its default SGLang region table) sees the same counts."""
    traces = pytest.importorskip("sglang_spec_harness.traces")
    analysis = traces.analyze_traces([trace], patterns={"softmax": r"^aten::_softmax$"})
    for region in ("DRAFT_DECODE", "DRAFT_EXTEND"):
        row = analysis.count(region, "softmax", unit="span")
        assert row is not None and row.replays == 4, (region, row)
        assert row.per_replay_min == row.per_replay_max == expected_per_span, (region, row)
    verify = analysis.count("TARGET_VERIFY", "softmax", unit="span")
    assert verify is not None and verify.total == 0


def test_stop_profile_writes_the_trace(server_on: RunningServer, tmp_path: Path) -> None:
    url = server_on.url
    body = {"output_dir": str(tmp_path), "profile_id": "manual", "with_stack": False}
    assert post(f"{url}/start_profile", json=body).status_code == 200
    assert generate(url, {"text": "short", "sampling_params": greedy(8)}).status_code == 200
    response = post(f"{url}/stop_profile", timeout=60)
    assert response.status_code == 200
    assert (tmp_path / "manual-TP-0.trace.json.gz").exists()


def test_outputs_identical_between_fast_path_servers(server_on: RunningServer, server_off: RunningServer) -> None:
    prompts = [f"compare outputs for prompt number {i}" for i in range(4)]

    def run(url: str) -> list[tuple[list[int], int]]:
        with ThreadPoolExecutor(len(prompts)) as pool:
            bodies = list(pool.map(lambda t: generate(url, {"text": t, "sampling_params": greedy(48)}).json(), prompts))
        return [(b["output_ids"], b["meta_info"]["spec_verify_ct"]) for b in bodies]

    assert run(server_on.url) == run(server_off.url)
    assert get(f"{server_off.url}/server_info").json()["topk1_fast_path"] is False


@pytest.mark.parametrize(
    "flags",
    [
        ["--speculative-num-steps", "0"],
        ["--no-such-flag"],
        ["--hidden-size", "63"],
        ["--port", "70000"],
        ["--speculative-algorithm", "MEDUSA"],
    ],
)
def test_bad_flags_exit_2(flags: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sglang_spec_harness.micro.server", *flags], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "usage:" in result.stderr and "error:" in result.stderr


@pytest.mark.slow
def test_sigterm_shuts_down_cleanly_during_a_stream(tmp_path: Path) -> None:
    server = start_server(tmp_path, *SMALL_FLAGS, "--log-level", "info")
    try:
        first_chunk = threading.Event()

        def consume() -> None:
            try:
                with httpx.stream(
                    "POST", f"{server.url}/generate", json={"text": "long", "sampling_params": greedy(100000), "stream": True}
                ) as response:
                    for _ in response.iter_lines():
                        first_chunk.set()
            except httpx.HTTPError:
                pass

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        assert first_chunk.wait(60)
        assert "The server is fired up and ready to roll!" in server.log()
        started = time.monotonic()
        assert server.terminate(timeout=30) == 0, server.log()
        assert time.monotonic() - started < 20
        assert "Server shut down." in server.log()
    finally:
        server.terminate()
