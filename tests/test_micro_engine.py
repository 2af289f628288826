"""The micro engine in process: selection consistency, exact outputs, accept length, profile regions."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sglang_spec_harness.micro.engine import MicroEngine, ProfileRequest, SpecConfig
from sglang_spec_harness.micro.model import LOGIT_SCALE, MicroModelConfig, MicroModels, select_draft_tokens
from sglang_spec_harness.micro.trace_summary import summarize

SMALL = MicroModelConfig(vocab_size=8192)


def _engine(config: MicroModelConfig, **spec: object) -> MicroEngine:
    engine = MicroEngine(config, SpecConfig(**spec))  # type: ignore[arg-type]
    engine.start()
    engine.wait_ready(timeout=120)
    return engine


@pytest.fixture
def engines() -> Iterator[list[MicroEngine]]:
    started: list[MicroEngine] = []
    yield started
    for engine in started:
        engine.stop()


def _prompts(engine: MicroEngine, count: int) -> list[list[int]]:
    return [engine.tokenizer.encode(f"prompt {i} asks the micro engine about item {i * 7}") for i in range(count)]


def test_fast_path_picks_the_softmax_path_token_on_grid_logits_with_ties() -> None:
    gen = torch.Generator().manual_seed(1)
    rows = torch.randint(-40000, 40000, (256, 128256), generator=gen).to(torch.float32) * LOGIT_SCALE
    # Exact ties at the maximum, in various places, and near-ties one grid step apart.
    rows[0, 10] = rows[0, 20] = rows[0].max() + 1.0
    rows[1, 5000] = rows[1].max() + LOGIT_SCALE
    rows[1, 4999] = rows[1, 5000] - LOGIT_SCALE
    rows[2, 128255] = rows[2, 0] = rows[2].max() + 3.0
    with torch.inference_mode():
        _, fast = select_draft_tokens(rows, topk=1, fast_path=True)
        p_fast, _ = select_draft_tokens(rows[:4], topk=1, fast_path=True)
        _, slow = select_draft_tokens(rows, topk=1, fast_path=False)
    assert torch.equal(fast, slow)
    assert fast[0].item() == 10 and fast[1].item() == 5000 and fast[2].item() == 0
    assert torch.equal(p_fast, torch.ones(4, 1))


def test_logits_do_not_depend_on_batch_composition() -> None:
    models = MicroModels(SMALL)
    c = SMALL.context_len
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, SMALL.vocab_size, (6, c + 4), generator=gen)
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[2, :5] = False  # a left-padded row
    first_new_pos = torch.tensor([c, c + 3, c - 5, 100, 7, 4096])
    with torch.inference_mode():
        batched = models.forward(models.target_layers, ids, valid, first_new_pos, 4)
        for row in range(6):
            alone = models.forward(models.target_layers, ids[row : row + 1], valid[row : row + 1], first_new_pos[row : row + 1], 4)
            assert torch.equal(alone[0], batched[row]), f"row {row} differs when computed alone"


def test_greedy_outputs_and_accept_lengths_identical_with_and_without_fast_path(engines: list[MicroEngine]) -> None:
    results = {}
    for fast_path in (True, False):
        engine = _engine(SMALL, fast_path=fast_path)
        engines.append(engine)
        requests = engine.generate(_prompts(engine, 6), max_new_tokens=48)
        results[fast_path] = (
            [r.output_ids for r in requests],
            [r.spec_verify_ct for r in requests],
            engine.avg_spec_accept_length,
        )
    assert results[True][0] == results[False][0]
    assert results[True][1] == results[False][1]
    assert results[True][2] == results[False][2]
    assert all(len(ids) == 48 for ids in results[True][0])


def test_output_of_a_request_does_not_depend_on_its_batch(engines: list[MicroEngine]) -> None:
    engine = _engine(SMALL)
    engines.append(engine)
    prompts = _prompts(engine, 5)
    together = [r.output_ids for r in engine.generate(prompts, max_new_tokens=32)]
    alone = [engine.generate([p], max_new_tokens=32)[0].output_ids for p in prompts[:2]]
    assert alone == together[:2]
    assert engine.max_decode_batch_size == 5


def test_default_config_accept_length_in_range(engines: list[MicroEngine]) -> None:
    config = MicroModelConfig()
    assert config.vocab_size == 128256
    engine = _engine(config, num_steps=3, topk=1)
    engines.append(engine)
    requests = engine.generate(_prompts(engine, 4), max_new_tokens=64)
    accept_length = engine.avg_spec_accept_length
    assert accept_length is not None and 1.8 <= accept_length <= 3.5, accept_length
    # The draft must disagree sometimes: not every verify accepts every draft token.
    assert accept_length < config.vocab_size and any(r.spec_verify_ct * 4 > len(r.output_ids) for r in requests)
    # SGLang's per-request figure: completion tokens (first one from prefill) per verify.
    total_completion = sum(len(r.output_ids) for r in requests)
    assert 1.8 <= total_completion / sum(r.spec_verify_ct for r in requests) <= 3.6


def _profile_counts(engine: MicroEngine, out_dir: Path, profile_id: str, num_steps: int) -> dict[str, list[int]]:
    request = ProfileRequest(
        output_dir=str(out_dir), num_steps=num_steps, profile_id=profile_id, with_stack=False, record_shapes=False
    )
    engine.call(lambda: engine.start_profile(request)).result(timeout=30)
    engine.generate(_prompts(engine, 3), max_new_tokens=200)  # more cycles than num_steps
    trace = out_dir / f"{profile_id}-TP-0.trace.json.gz"
    assert trace.exists()
    return {mode: [s.ops for s in spans] for mode, spans in summarize(trace).by_mode().items()}


@pytest.mark.slow
def test_softmax_only_in_draft_regions_without_fast_path(engines: list[MicroEngine], tmp_path: Path) -> None:
    steps = 4
    off = _engine(SMALL, num_steps=steps, fast_path=False)
    engines.append(off)
    counts_off = _profile_counts(off, tmp_path, "off", num_steps=6)
    on = _engine(SMALL, num_steps=steps, fast_path=True)
    engines.append(on)
    counts_on = _profile_counts(on, tmp_path, "on", num_steps=6)
    # 1 prefill step (two EXTEND spans) + 5 decode cycles.
    assert counts_off["DECODE"] == [steps - 1] * 5
    assert counts_off["DRAFT_EXTEND_V2"] == [2] * 5
    assert counts_off["TARGET_VERIFY"] == [0] * 5
    assert counts_on["DECODE"] == [0] * 5
    assert counts_on["DRAFT_EXTEND_V2"] == [0] * 5
    assert counts_on["TARGET_VERIFY"] == [0] * 5
    # Draft prefill keeps its softmax in both variants, as SGLang's _draft_extend_for_prefill.
    assert counts_off["EXTEND"] == counts_on["EXTEND"] == [0, 1]


def test_topk_above_one_keeps_the_softmax_path(engines: list[MicroEngine], tmp_path: Path) -> None:
    engine = _engine(SMALL, num_steps=3, topk=2, fast_path=True)
    engines.append(engine)
    assert not engine.spec.uses_fast_path
    counts = _profile_counts(engine, tmp_path, "topk2", num_steps=3)
    assert counts["DECODE"] == [2, 2]
    assert counts["DRAFT_EXTEND_V2"] == [2, 2]


@pytest.mark.slow
def test_inject_delay_busy_waits_inside_every_draft_decode_and_changes_no_output(
    engines: list[MicroEngine], tmp_path: Path
) -> None:
    delay_us = 3000
    plain = _engine(SMALL, num_steps=3)
    engines.append(plain)
    delayed = _engine(SMALL, num_steps=3, inject_delay_us=delay_us)
    engines.append(delayed)
    prompts = _prompts(plain, 3)
    outputs = [[r.output_ids for r in e.generate(prompts, max_new_tokens=12)] for e in (plain, delayed)]
    assert outputs[0] == outputs[1]
    request = ProfileRequest(output_dir=str(tmp_path), num_steps=5, profile_id="delay", activities=["CPU"])
    delayed.call(lambda: delayed.start_profile(request)).result(timeout=30)
    delayed.generate(prompts[:1], max_new_tokens=40)
    trace = json.loads(gzip.decompress(next(tmp_path.glob("*.trace.json.gz")).read_bytes()))
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    decodes = [e for e in spans if e["name"].startswith("step[DECODE")]
    delays = [e for e in spans if e["name"] == "micro::inject_delay"]
    # 1 prefill step + 4 decode cycles; a busy-wait lasts at least its length by construction.
    assert len(decodes) == len(delays) == 4
    for decode, delay in zip(sorted(decodes, key=lambda e: e["ts"]), sorted(delays, key=lambda e: e["ts"])):
        assert decode["ts"] <= delay["ts"] and delay["ts"] + delay["dur"] <= decode["ts"] + decode["dur"]
        assert delay["dur"] >= delay_us


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_the_planted_delay_is_work_which_a_shared_cpu_stretches() -> None:
    """--inject-delay-us spins CPU time: on a CPU shared with a busy process it lasts about twice its
    nominal length, as the cycle's real work does. A wait on the wall clock lasted its nominal length
    whatever the load, so load shrank the planted slowdown against the cycle (tests/test_runner.py's
    planted slowdown: its interval fell to 1.04-1.38, below the 1.5 it asserts)."""
    engine = MicroEngine(SMALL, SpecConfig(num_steps=3, inject_delay_us=300_000))  # not started: the delay alone
    cpu = sorted(os.sched_getaffinity(0))[-1]
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    lasted: list[float] = []

    def delay_on_the_hogs_cpu() -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only
        started = time.perf_counter()
        engine._inject_delay()
        lasted.append(time.perf_counter() - started)

    try:
        os.sched_setaffinity(hog.pid, {cpu})
        time.sleep(0.2)  # the hog is spinning there
        thread = threading.Thread(target=delay_on_the_hogs_cpu)
        thread.start()
        thread.join(timeout=30)
    finally:
        hog.kill()
        hog.wait()
    assert lasted and lasted[0] >= 0.45, lasted  # ~0.6 s with half the CPU; a wall-clock wait: 0.3 s


def test_graph_runners_are_built_and_captured_in_the_order_a_cycle_replays_them(engines: list[MicroEngine]) -> None:
    """The CUDA graphs share one memory pool: a graph captured after another may keep its outputs in
    blocks the other freed, and replaying the other overwrites them. Captured in replay order, each
    graph's outputs outlive the rest of the cycle (the opposite order lost the draft tokens on the
    first GPU run: accept length ~1.2 instead of ~2.5). Capture iterates `runners` in order."""
    engine = _engine(SMALL, num_steps=3, topk=1)
    engines.append(engine)
    assert list(engine.runners) == ["draft_decode", "target_verify", "draft_extend"]
    single = _engine(SMALL, num_steps=1, topk=1)
    engines.append(single)
    assert list(single.runners) == ["target_verify", "draft_extend"]
