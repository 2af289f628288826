"""The workload: prompts, and an asynchronous streaming client for SGLang's `/generate`.

Per request it records TTFT, TPOT, the inter-token latencies, token counts, `spec_verify_ct`, the
output token ids and any error (a `RequestRow`, one line of requests.jsonl, appended by `RequestLog`
as each request finishes); per trial it summarises them (warmup requests excluded). A failed request
(an HTTP error, an error chunk, a broken or truncated stream, a timeout) is recorded with its error
and never raises: the caller decides what a failed request means for the trial.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import append_whole, write_failed
from sglang_spec_harness.pages.numbers import seconds
from sglang_spec_harness.run.interrupts import interrupts_deferred
from sglang_spec_harness.rundir import RequestRow, TrialSummary, request_line, write_requests
from sglang_spec_harness.scenario import FilePrompts, WorkloadSpec

# Synthetic prompt token ids are drawn from [SYNTHETIC_MIN_ID, vocab limit): low ids are often
# special tokens in real tokenizers; the limit keeps ids valid for small (micro) vocabularies too.
SYNTHETIC_MIN_ID = 3
SYNTHETIC_DEFAULT_VOCAB = 1000
ERROR_TEXT_LIMIT = 300


@dataclass(frozen=True)
class Prompt:
    index: int  # position in the workload: the same prompt for every variant
    warmup: bool
    input_ids: list[int] | None = None
    text: str | None = None

    def payload(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids} if self.input_ids is not None else {"text": self.text}


# ---- prompts ------------------------------------------------------------------------------------


def synthetic_prompt_ids(seed: int, index: int, length: int, vocab_limit: int) -> list[int]:
    # One generator per (seed, index): a prompt does not depend on how many others there are.
    rng = random.Random(f"{seed}:{index}")
    high = max(vocab_limit, SYNTHETIC_MIN_ID + 1)
    return [rng.randrange(SYNTHETIC_MIN_ID, high) for _ in range(length)]


def _read_text_prompts(spec: FilePrompts, scenario_dir: Path) -> list[str]:
    path = Path(spec.path)
    if not path.is_absolute():
        path = scenario_dir / path
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HarnessInputError(f"workload.prompts.path: cannot read {path} ({exc.strerror or exc})") from None
    texts: list[str] = []
    if spec.format == "jsonl":
        for lineno, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise HarnessInputError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            text = item.get("text", item.get("prompt")) if isinstance(item, dict) else None
            if not isinstance(text, str):
                raise HarnessInputError(f"{path}:{lineno}: expected an object with a string `text` or `prompt`")
            texts.append(text)
    else:
        try:
            items = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise HarnessInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(items, list):
            raise HarnessInputError(f"{path}: expected a ShareGPT list of {{\"conversations\": [...]}}")
        for item in items:
            turns = item.get("conversations") if isinstance(item, dict) else None
            first = next(
                (t.get("value") for t in turns or [] if isinstance(t, dict) and t.get("from") in ("human", "user")),
                None,
            )
            if isinstance(first, str) and first.strip():
                texts.append(first)
    if not texts:
        raise HarnessInputError(f"{path}: no prompts found")
    return texts


def build_prompts(
    workload: WorkloadSpec,
    *,
    scenario_dir: Path,
    num_requests: int | None = None,
    vocab_limit: int | None = None,
    first: int = 0,
) -> tuple[list[Prompt], list[Prompt]]:
    """(warmup prompts, measured prompts). Measured prompts have index first..first+n-1 (a prompt is
    a function of its index, so the blocks of the warm modes each get their own prompts and every arm
    the same ones); warmup prompts have negative indices (-w..-1) and their own prompts, so they never
    prime the cache for a measured one."""
    n = workload.num_requests if num_requests is None else num_requests
    w = workload.warmup_requests
    spec = workload.prompts
    indices = range(first, first + n)
    if isinstance(spec, FilePrompts):
        texts = _read_text_prompts(spec, scenario_dir)
        order = list(range(len(texts)))
        random.Random(spec.seed).shuffle(order)
        # Measured prompts in the drawn order (so they do not depend on the warmup count); warmup
        # prompts from the end of the order, away from the first measured ones.
        measured = [Prompt(i, False, text=texts[order[i % len(order)]]) for i in indices]
        warmup = [Prompt(-w + j, True, text=texts[order[(-w + j) % len(order)]]) for j in range(w)]
        return warmup, measured
    limit = min(vocab_limit or SYNTHETIC_DEFAULT_VOCAB, SYNTHETIC_DEFAULT_VOCAB)
    measured = [Prompt(i, False, input_ids=synthetic_prompt_ids(spec.seed, i, workload.input_len, limit)) for i in indices]
    warmup = [
        Prompt(-w + j, True, input_ids=synthetic_prompt_ids(spec.seed, -w + j, workload.input_len, limit))
        for j in range(w)
    ]
    return warmup, measured


# ---- the client ---------------------------------------------------------------------------------


def _finish_reason(value: Any) -> str | None:
    if isinstance(value, dict):  # SGLang: {"type": "length", "length": 48}
        return str(value.get("type")) if value.get("type") is not None else json.dumps(value)
    return None if value is None else str(value)


def _count(value: Any) -> int | None:
    """A token count from the server's meta_info (free-form): an int, or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_TEXT_LIMIT else text[:ERROR_TEXT_LIMIT] + "..."


def _add_output_ids(output_ids: list[int], ids: Any, completion_tokens: Any) -> bool | None:
    """Adds a stream chunk's `output_ids` to those received so far, in place; True where the chunk
    held them all so far (cumulative), False where it held the new ones, None where it held none."""
    if not isinstance(ids, list):
        return None
    before = len(output_ids)
    # SGLang streams cumulative ids by default, incremental ones with
    # --incremental-streaming-output: the completion count tells which.
    if len(ids) == completion_tokens or (len(ids) >= before and ids[:before] == output_ids and before > 0):
        output_ids[:] = ids
        return True
    output_ids.extend(ids)
    return False


def _add_text(record: RequestRow, text: Any, cumulative: bool | None) -> None:
    """The chunk's `text`: all of it so far when its ids were (SGLang's default), else the new part."""
    if not isinstance(text, str):
        return
    record.text = text if cumulative is not False or record.text is None else record.text + text


def _complete_record(record: RequestRow, meta: dict[str, Any], received_tokens: int, e2e_ms: float) -> None:
    """Fills the record's totals from the last meta_info once the stream has ended."""
    record.e2e_ms = e2e_ms
    record.prompt_tokens = _count(meta.get("prompt_tokens"))
    record.completion_tokens = int(meta.get("completion_tokens", received_tokens))
    verify = meta.get("spec_verify_ct")
    record.spec_verify_ct = int(verify) if verify is not None else None
    record.finish_reason = _finish_reason(meta.get("finish_reason"))
    if record.ttft_ms is not None and record.completion_tokens > 1:
        record.tpot_ms = (record.e2e_ms - record.ttft_ms) / (record.completion_tokens - 1)
    if record.error is None and record.completion_tokens == 0:
        record.error = "no tokens generated"


async def send_request(
    client: httpx.AsyncClient,
    base_url: str,
    prompt: Prompt,
    workload: WorkloadSpec,
    *,
    max_new_tokens: int | None = None,
) -> RequestRow:
    """One streamed /generate request, timed chunk by chunk; a failure is the record's error, never raised."""
    record = RequestRow.sent(prompt.index, prompt.warmup)
    output_ids = record.output_ids  # sent() starts it empty; filled in place as the chunks arrive
    assert output_ids is not None
    body = {
        **prompt.payload(),
        "sampling_params": {
            "max_new_tokens": max_new_tokens or workload.output_len,
            "temperature": workload.temperature,
            "ignore_eos": workload.ignore_eos,
        },
        "stream": True,
    }
    start = time.perf_counter()
    last_chunk_at: float | None = None
    meta: dict[str, Any] = {}
    done = False
    try:
        async with client.stream("POST", f"{base_url}/generate", json=body) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode("utf-8", errors="replace")
                record.error = f"HTTP {response.status_code}: {_short(text)}"
                return record
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    record.error = f"malformed stream chunk: {_short(data)}"
                    return record
                if "error" in chunk:
                    record.error = f"server error: {_short(json.dumps(chunk['error']))}"
                    return record
                meta = chunk.get("meta_info") or meta
                before = len(output_ids)
                cumulative = _add_output_ids(output_ids, chunk.get("output_ids"), meta.get("completion_tokens", -1))
                _add_text(record, chunk.get("text"), cumulative)
                if len(output_ids) > before:
                    if record.ttft_ms is None:
                        record.ttft_ms = (now - start) * 1000
                    elif last_chunk_at is not None:
                        record.itl_ms.append((now - last_chunk_at) * 1000)
                    last_chunk_at = now
    except httpx.TimeoutException:
        record.error = f"timed out after {seconds(client.timeout.read)}"
        return record
    except httpx.HTTPError as exc:
        what = "cannot connect" if isinstance(exc, httpx.ConnectError) else "broken stream"
        record.error = f"{what} ({type(exc).__name__}: {_short(str(exc)) or 'no detail'})"
        return record
    end = last_chunk_at if last_chunk_at is not None else time.perf_counter()
    if not done:
        record.error = "stream ended without `data: [DONE]`"
    _complete_record(record, meta, len(output_ids), (end - start) * 1000)
    return record


async def send_requests(
    base_url: str,
    prompts: Sequence[Prompt],
    workload: WorkloadSpec,
    *,
    request_timeout_s: float,
    on_record: Callable[[RequestRow], None] | None = None,
    rate_seed: int = 0,
) -> list[RequestRow]:
    """Send `prompts` with at most `workload.concurrency` in flight; with a request rate, start them
    at Poisson arrival times (seeded). Returns the records in prompt order."""
    limit = asyncio.Semaphore(workload.concurrency)
    rng = random.Random(rate_seed)
    timeout = httpx.Timeout(request_timeout_s, connect=10.0)
    limits = httpx.Limits(max_connections=workload.concurrency + 2, max_keepalive_connections=workload.concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:

        async def one(prompt: Prompt) -> RequestRow:
            async with limit:
                try:
                    # The whole request, not only each read: a server that trickles tokens (or
                    # keeps a connection open without answering) cannot hold the run either.
                    async with asyncio.timeout(request_timeout_s):
                        record = await send_request(client, base_url, prompt, workload)
                except TimeoutError:
                    record = RequestRow.sent(prompt.index, prompt.warmup,
                                             error=f"timed out after {seconds(request_timeout_s)}")
            if on_record is not None:
                on_record(record)
            return record

        tasks: list[asyncio.Task[RequestRow]] = []
        try:
            for prompt in prompts:
                if workload.request_rate is not None and tasks:
                    await asyncio.sleep(rng.expovariate(workload.request_rate))
                tasks.append(asyncio.create_task(one(prompt)))
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()


# ---- summary ------------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(records: Sequence[RequestRow], duration_s: float | None) -> TrialSummary:
    """The per-trial summary of the measured (non-warmup) requests; see docs/internals.md."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.error is None]
    completion = sum(r.completion_tokens or 0 for r in ok)
    verify_known = [r.spec_verify_ct for r in ok if r.spec_verify_ct is not None]
    verify = sum(verify_known) if verify_known else None
    tpots = [r.tpot_ms for r in ok if r.tpot_ms is not None]
    # Recorded as measured, not validated: a number the rules refuse (a TPOT of 0 from a server that
    # sent every token in one chunk) is refused by `harness check` with the reason, not by the run.
    return TrialSummary.model_construct(
        requests=len(measured),
        errors=len(measured) - len(ok),
        completion_tokens=completion,
        spec_verify_ct=verify,
        accept_length=completion / verify if verify else None,
        median_tpot_ms=_median(tpots),
        mean_tpot_ms=statistics.fmean(tpots) if tpots else None,
        median_ttft_ms=_median([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        median_itl_ms=_median([gap for r in ok for gap in r.itl_ms]),
        output_throughput_tok_s=completion / duration_s if duration_s else None,
        duration_s=duration_s,
    )


def first_failed(records: list[RequestRow]) -> str | None:
    """How many requests failed, and the first one's error; None when none did."""
    failed = [r for r in records if r.error is not None]
    if not failed:
        return None
    first = min(failed, key=lambda r: r.index)
    return f"{len(failed)} of {len(records)} requests failed; request {first.index}: {first.error}"


class RequestLog:
    """requests.jsonl of one trial (or a launch's warm-up): appended as each request finishes, so an
    interrupted trial keeps the requests it completed; rewritten in prompt order at the end. A write
    that fails (a full disk) raises WriteError: the run stops, nothing more can be kept."""

    def __init__(self, path: Path, on_measured: Callable[[int], None] | None = None):
        self.path = path
        self.records: list[RequestRow] = []
        self._lock = threading.Lock()
        self._on_measured = on_measured
        try:
            path.touch()
        except OSError as exc:
            raise write_failed(path, exc) from None

    def __call__(self, record: RequestRow) -> None:
        line = request_line(record).encode()
        with self._lock:
            self.records.append(record)
            with interrupts_deferred():  # the line lands whole, or is cut off again
                append_whole(self.path, line)
            done = sum(1 for r in self.records if not r.warmup)
        if not record.warmup and self._on_measured is not None:
            self._on_measured(done)

    def finish(self) -> None:
        """Rewrite in prompt order (atomically: on failure the appended lines stay as they are)."""
        self.records.sort(key=lambda r: r.index)
        write_requests(self.path, self.records)


async def flush_cache(base_url: str, *, attempts: int = 20, pause_s: float = 0.25, timeout_s: float = 30.0) -> bool:
    """POST /flush_cache. SGLang refuses (4xx) while requests are still running: retry a little, all
    within `timeout_s` (a hung server must not hold the run for attempts x timeout)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
                for _ in range(attempts):
                    try:
                        response = await client.post(f"{base_url}/flush_cache")
                    except httpx.HTTPError:
                        response = None
                    if response is not None and response.status_code == 200:
                        return True
                    if response is not None and response.status_code == 404:
                        return False  # the server has no cache to flush
                    await asyncio.sleep(pause_s)
    except TimeoutError:
        pass
    return False
