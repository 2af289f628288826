"""Workload: prompts, the streaming client's records, and the per-trial summary.

The client is tested against real HTTP servers: the micro engine (tests/test_runner.py) and, for a
stream that breaks mid-response, the stand-in in tests/support/fake_servers/.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
import pytest
from support.tiny_scenario import FAKE_SERVER

from sglang_spec_harness.engines import ServerCommand
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.scenario import WorkloadSpec
from sglang_spec_harness.run.server import ServerProcess, free_port
from sglang_spec_harness.run.workload import Prompt, build_prompts, send_request, send_requests, summarize
from sglang_spec_harness.rundir import RequestRow


def test_synthetic_prompts_are_deterministic_and_independent_of_count(tmp_path):
    spec = WorkloadSpec(num_requests=4, input_len=16, warmup_requests=2)
    warmup, measured = build_prompts(spec, scenario_dir=tmp_path, vocab_limit=50)
    again_warmup, again = build_prompts(spec, scenario_dir=tmp_path, vocab_limit=50)
    assert measured == again and warmup == again_warmup
    assert [p.index for p in measured] == [0, 1, 2, 3] and [p.index for p in warmup] == [-2, -1]
    assert all(p.warmup for p in warmup) and not any(p.warmup for p in measured)
    assert all(len(p.input_ids) == 16 and all(3 <= t < 50 for t in p.input_ids) for p in measured + warmup)
    # the first prompts do not change when more requests are asked for
    _, more = build_prompts(spec, scenario_dir=tmp_path, vocab_limit=50, num_requests=8)
    assert more[:4] == measured
    assert len({tuple(p.input_ids) for p in measured + warmup}) == 6
    other = build_prompts(WorkloadSpec(num_requests=4, input_len=16, prompts={"source": "synthetic", "seed": 1}),
                          scenario_dir=tmp_path, vocab_limit=50)[1]
    assert other != measured


def test_file_prompts_jsonl_and_sharegpt_relative_to_the_scenario(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"text": "a"}\n\n{"prompt": "b"}\n{"text": "c"}\n')
    spec = WorkloadSpec(num_requests=5, warmup_requests=1, prompts={"source": "file", "path": "p.jsonl", "seed": 3})
    warmup, measured = build_prompts(spec, scenario_dir=tmp_path)
    assert [p.text for p in measured][:3] != [None] * 3 and {p.text for p in measured} == {"a", "b", "c"}
    assert len(measured) == 5 and warmup[0].text in {"a", "b", "c"}
    assert measured == build_prompts(spec, scenario_dir=tmp_path)[1]
    (tmp_path / "sg.json").write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
        {"conversations": [{"from": "gpt", "value": "only a reply"}]},
    ]))
    spec = WorkloadSpec(num_requests=2, warmup_requests=0, prompts={"source": "file", "path": "sg.json", "format": "sharegpt"})
    assert [p.text for p in build_prompts(spec, scenario_dir=tmp_path)[1]] == ["hi", "hi"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ('{"text": "a"}\nnot json\n', r"p.jsonl:2: not valid JSON"),
        ('{"other": 1}\n', r"p.jsonl:1: expected an object with a string `text` or `prompt`"),
    ],
)
def test_bad_prompt_files_are_input_errors(tmp_path, content, message):
    if content is not None:
        (tmp_path / "p.jsonl").write_text(content)
    spec = WorkloadSpec(prompts={"source": "file", "path": "p.jsonl"})
    with pytest.raises(HarnessInputError, match=message):
        build_prompts(spec, scenario_dir=tmp_path)


def test_summary_accept_length_is_a_ratio_of_sums_and_skips_warmup_and_errors():
    records = [
        RequestRow(index=-1, warmup=True, completion_tokens=100, spec_verify_ct=1, tpot_ms=99.0),
        RequestRow(index=0, warmup=False, completion_tokens=10, spec_verify_ct=4, tpot_ms=2.0, ttft_ms=5.0, itl_ms=[1.0, 3.0]),
        RequestRow(index=1, warmup=False, completion_tokens=20, spec_verify_ct=11, tpot_ms=4.0, ttft_ms=7.0, itl_ms=[2.0]),
        RequestRow(index=2, warmup=False, completion_tokens=3, spec_verify_ct=1, error="HTTP 400: bad"),
    ]
    s = summarize(records, duration_s=2.0)
    assert s.requests == 3 and s.errors == 1
    assert s.completion_tokens == 30 and s.spec_verify_ct == 15 and s.accept_length == 2.0
    assert s.median_tpot_ms == 3.0 and s.mean_tpot_ms == 3.0 and s.median_ttft_ms == 6.0
    assert s.median_itl_ms == 2.0 and s.output_throughput_tok_s == 15.0 and s.duration_s == 2.0
    empty = summarize([], duration_s=None)
    assert empty.accept_length is None and empty.median_tpot_ms is None


def test_a_broken_stream_is_recorded_per_request_not_raised(tmp_path):
    port = free_port()
    command = ServerCommand([sys.executable, str(FAKE_SERVER), "--port", str(port)], {"FAKE_SERVER_MODE": "broken_stream"})
    spec = WorkloadSpec(num_requests=3, input_len=4, output_len=8, concurrency=2, warmup_requests=0)
    _, prompts = build_prompts(spec, scenario_dir=tmp_path)
    seen: list[int] = []
    with ServerProcess(command, log_path=tmp_path / "server.log", port=port, startup_timeout_s=20) as server:
        records = asyncio.run(
            send_requests(server.base_url, prompts, spec, request_timeout_s=10, on_record=lambda r: seen.append(r.index))
        )
    assert [r.index for r in records] == [0, 1, 2] and sorted(seen) == [0, 1, 2]
    for record in records:
        assert record.error is not None and record.error.startswith("broken stream (RemoteProtocolError")
        assert record.output_ids == [5] and record.ttft_ms is not None


def test_a_refused_connection_is_recorded_per_request(tmp_path):
    spec = WorkloadSpec(num_requests=1, input_len=4, warmup_requests=0)
    _, prompts = build_prompts(spec, scenario_dir=tmp_path)
    records = asyncio.run(send_requests(f"http://127.0.0.1:{free_port()}", prompts, spec, request_timeout_s=5))
    assert records[0].error.startswith("cannot connect (ConnectError")


def _stream_of(chunks: list[dict]) -> httpx.AsyncClient:
    """A client whose /generate answers these chunks as server-sent events, then [DONE]."""
    events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=events.encode()))
    return httpx.AsyncClient(transport=transport)


@pytest.mark.parametrize("mode", ["cumulative", "incremental"])
def test_cumulative_and_incremental_streams_give_the_same_record(mode):
    # SGLang streams all ids so far by default, only the new ones with --incremental-streaming-output.
    # The text comes the same way as the ids.
    steps = [[7, 8], [9], [10, 11, 12]]
    chunks, so_far = [], []
    for step in steps:
        so_far = so_far + step
        ids = so_far if mode == "cumulative" else step
        text = "".join(f" w{i}" for i in ids)
        meta = {"prompt_tokens": 3, "completion_tokens": len(so_far), "spec_verify_ct": 2, "finish_reason": {"type": "length"}}
        chunks.append({"output_ids": ids, "text": text, "meta_info": meta})

    async def send() -> RequestRow:
        async with _stream_of(chunks) as client:
            return await send_request(client, "http://engine", Prompt(0, False, input_ids=[1, 2, 3]), WorkloadSpec())

    record = asyncio.run(send())
    assert record.error is None
    assert record.output_ids == [7, 8, 9, 10, 11, 12]
    assert record.text == " w7 w8 w9 w10 w11 w12"
    assert (record.prompt_tokens, record.completion_tokens, record.spec_verify_ct) == (3, 6, 2)
    assert record.finish_reason == "length"
    assert record.ttft_ms is not None and len(record.itl_ms) == 2 and record.tpot_ms is not None


def test_a_stream_with_no_tokens_is_an_error():
    async def send() -> RequestRow:
        async with _stream_of([{"output_ids": [], "meta_info": {"completion_tokens": 0}}]) as client:
            return await send_request(client, "http://engine", Prompt(0, False, input_ids=[1]), WorkloadSpec())

    record = asyncio.run(send())
    assert record.error == "no tokens generated" and record.completion_tokens == 0 and record.ttft_ms is None
