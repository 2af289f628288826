"""The micro engine: EAGLE-style chain speculative decoding with continuous batching.

One decode cycle for the running batch (SGLang's spec-v2 EAGLE worker, topk == 1, as a chain):
1. draft decode, `step[DECODE bs=N]`: `num_steps - 1` draft forwards, each followed by token
   selection (site 1). The first draft token of the chain comes from the previous draft extend, as in
   SGLang's `draft_forward`, so a draft-decode span holds `num_steps - 1` selections (none, and no span,
   when num_steps == 1).
2. target verify, `step[TARGET_VERIFY bs=N]`: one target forward over the last accepted token and the
   `num_steps` draft tokens; the target's greedy token at each position.
3. accept (eager, outside any span): the longest prefix of draft tokens that the target agrees with,
   plus the target's bonus token.
4. draft extend, `step[DRAFT_EXTEND_V2 bs=N]`: one draft forward over the accepted tokens (padded to
   `num_steps + 1` per request) and token selection over all its rows (site 3, the graph body), then,
   still inside the span but eagerly, selection on the row of each request's last accepted token
   (site 2, `_draft_extend_for_decode`): the first draft token of the next cycle.

Prefill (a new request) is one target forward and one draft forward, both `step[EXTEND bs=N]` and both
eager; the draft-prefill selection always uses softmax, as SGLang's `_draft_extend_for_prefill` does.

Softmax ops per span with the fast path off: `num_steps - 1` per `step[DECODE ...]`, 2 per
`step[DRAFT_EXTEND_V2 ...]` (1 in the graph body, 1 eager), 0 per `step[TARGET_VERIFY ...]`, and 1 in the
second of the two `step[EXTEND ...]` spans of a prefill. With the fast path on (topk == 1): 0 in the
draft-decode and draft-extend spans; prefill unchanged.

On CUDA the draft-decode, target-verify and draft-extend functions are captured as CUDA graphs per
batch size and replayed (batch padded up to the next captured size); on CPU they run eagerly. Either
way the call sits inside the `record_function` span of its region.

A profiler step is one scheduler iteration that ran model work: one prefill batch or one decode cycle.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import gzip
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, record_function

from sglang_spec_harness.micro.model import MicroModelConfig, MicroModels, argmax_keepdim, select_draft_tokens
from sglang_spec_harness.micro.tokenizer import WordTokenizer

logger = logging.getLogger("sglang_spec_harness.micro")

PROFILE_ACTIVITIES = ("CPU", "GPU", "MEM", "CUDA_PROFILER")


class EngineRequestError(ValueError):
    """A request or command the engine refuses; the server answers it with a 400."""


def burn_cpu_time(microseconds: int) -> None:
    """Spin until this thread has used `microseconds` of CPU time: work of a known size. Not a sleep (it
    frees the core, and its length depends on the scheduler), and not a wait on the wall clock: that
    takes its nominal time however busy the machine is, while the cycle's real work slows, so load
    shrank a planted slowdown against the cycle around it (tests/test_runner.py's planted slowdown
    on a loaded 2-CPU VM: TPOT ratios 3.2-4.4 with the wall clock, 7.8-11.4 with CPU time)."""
    end = time.thread_time_ns() + microseconds * 1000
    while time.thread_time_ns() < end:
        pass


@dataclass(frozen=True)
class SpecConfig:
    num_steps: int = 3
    topk: int = 1
    fast_path: bool = True  # the topk == 1 fast path; False is --disable-topk1-fast-path
    cuda_graph: bool = True  # only meaningful on CUDA
    cuda_graph_max_bs: int = 32
    max_running_requests: int = 64
    # A planted slowdown of known size (--inject-delay-us): this much CPU time spun in every draft-decode
    # cycle, so that the harness's sensitivity can be measured against a known effect.
    inject_delay_us: int = 0

    @property
    def num_draft_tokens(self) -> int:
        return self.num_steps + 1

    @property
    def uses_fast_path(self) -> bool:
        return self.fast_path and self.topk == 1


class SpecFunctions:
    """The region bodies as pure tensor functions with static shapes: what a CUDA graph captures."""

    def __init__(self, models: MicroModels, spec: SpecConfig) -> None:
        self.models = models
        self.num_steps = spec.num_steps
        self.topk = spec.topk
        self.fast_path = spec.uses_fast_path
        self.context_len = models.config.context_len

    def draft_decode(
        self, ctx_ids: torch.Tensor, ctx_valid: torch.Tensor, first_new_pos: torch.Tensor, first_draft: torch.Tensor
    ) -> torch.Tensor:
        """Draft tokens [B, num_steps]: `first_draft` then num_steps - 1 draft forwards (site 1)."""
        window = self.context_len + 1
        first = first_draft.unsqueeze(1)
        tokens = torch.cat([ctx_ids, first], dim=1)
        ones = torch.ones_like(first, dtype=torch.bool)
        valid = torch.cat([ctx_valid, ones], dim=1)
        drafts = [first]
        for step in range(1, self.num_steps):
            logits = self.models.forward(
                self.models.draft_layers, tokens[:, -window:], valid[:, -window:], first_new_pos + (step - 1), 1
            )[:, 0]
            _, topk_index = select_draft_tokens(logits, self.topk, self.fast_path)
            next_token = topk_index[:, :1]  # a chain follows the top-1 candidate
            drafts.append(next_token)
            tokens = torch.cat([tokens, next_token], dim=1)
            valid = torch.cat([valid, ones], dim=1)
        return torch.cat(drafts, dim=1)

    def target_verify(
        self, ctx_ids: torch.Tensor, ctx_valid: torch.Tensor, first_new_pos: torch.Tensor, chain: torch.Tensor
    ) -> torch.Tensor:
        """Target greedy tokens [B, num_steps + 1] after each token of `chain` (last token + drafts)."""
        ids = torch.cat([ctx_ids, chain], dim=1)
        valid = torch.cat([ctx_valid, torch.ones_like(chain, dtype=torch.bool)], dim=1)
        logits = self.models.forward(self.models.target_layers, ids, valid, first_new_pos, chain.shape[1])
        return argmax_keepdim(logits).squeeze(-1)

    def draft_extend(
        self,
        ctx_ids: torch.Tensor,
        ctx_valid: torch.Tensor,
        first_new_pos: torch.Tensor,
        accepted: torch.Tensor,
        accepted_valid: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draft forward over the accepted tokens; selection on every row (site 3, the graph body).

        Returns the logits [B, T, V] (for site 2) and the per-row (topk_p, topk_index) [B, T, topk].
        """
        ids = torch.cat([ctx_ids, accepted], dim=1)
        valid = torch.cat([ctx_valid, accepted_valid], dim=1)
        num_new = accepted.shape[1]
        logits = self.models.forward(self.models.draft_layers, ids, valid, first_new_pos, num_new)
        topk_p, topk_index = select_draft_tokens(logits.view(-1, logits.shape[-1]), self.topk, self.fast_path)
        batch = accepted.shape[0]
        return logits, topk_p.view(batch, num_new, -1), topk_index.view(batch, num_new, -1)

    def select_after_draft_extend(self, logits: torch.Tensor, last_index: torch.Tensor) -> torch.Tensor:
        """Site 2 (eager): selection on the row of each request's last accepted token -> next draft [B]."""
        rows = logits[torch.arange(logits.shape[0], device=logits.device), last_index]
        _, topk_index = select_draft_tokens(rows, self.topk, self.fast_path)
        return topk_index[:, 0]

    def target_prefill(
        self, ctx_ids: torch.Tensor, ctx_valid: torch.Tensor, first_new_pos: torch.Tensor, last_prompt: torch.Tensor
    ) -> torch.Tensor:
        """The target's first output token [B] after the prompt."""
        return self.target_verify(ctx_ids, ctx_valid, first_new_pos, last_prompt.unsqueeze(1))[:, 0]

    def draft_prefill(
        self, ctx_ids: torch.Tensor, ctx_valid: torch.Tensor, first_new_pos: torch.Tensor, first_output: torch.Tensor
    ) -> torch.Tensor:
        """The first draft token [B]; softmax on every variant, as `_draft_extend_for_prefill`."""
        ids = torch.cat([ctx_ids, first_output.unsqueeze(1)], dim=1)
        valid = torch.cat([ctx_valid, torch.ones_like(first_output, dtype=torch.bool).unsqueeze(1)], dim=1)
        logits = self.models.forward(self.models.draft_layers, ids, valid, first_new_pos, 1)[:, 0]
        _, topk_index = select_draft_tokens(logits, self.topk, fast_path=False)
        return topk_index[:, 0]


def capture_batch_sizes(max_bs: int) -> list[int]:
    """SGLang's default shape of the list: 1, 2, 4, 8, then steps of 8, up to max_bs."""
    sizes = [bs for bs in (1, 2, 4, 8) if bs <= max_bs] + list(range(16, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sorted(sizes)


@dataclass(frozen=True)
class InputSpec:
    """One graph input: shape after the batch dimension, dtype, and the fill of unused (padding) rows."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    fill: int | bool = 0


class GraphRunner:
    """Runs one region function: replays a CUDA graph per captured batch size, or eagerly on CPU."""

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        input_specs: list[InputSpec],
        device: torch.device,
        batch_sizes: list[int] | None,
        pool: Any = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.input_specs = input_specs
        self.device = device
        self.batch_sizes = sorted(batch_sizes) if batch_sizes else []
        self.pool = pool
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], tuple[torch.Tensor, ...]]] = {}
        self.replays = 0

    def capture(self) -> None:
        # Largest first, so that smaller graphs reuse the shared pool's blocks (as SGLang does).
        for bs in reversed(self.batch_sizes):
            static_inputs = [
                torch.full((bs, *spec.shape), spec.fill, dtype=spec.dtype, device=self.device) for spec in self.input_specs
            ]
            # Warm-up on a side stream: lazy initialization (cuBLAS handles, allocator) must not be captured.
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.fn(*static_inputs)
            torch.cuda.current_stream(self.device).wait_stream(side)
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                outputs = self.fn(*static_inputs)
            if not isinstance(outputs, tuple):
                outputs = (outputs,)
            self.graphs[bs] = (graph, static_inputs, outputs)
        torch.cuda.synchronize(self.device)

    def run(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Outputs for the real batch rows; views into static buffers, valid until the next replay."""
        batch = inputs[0].shape[0]
        index = bisect.bisect_left(self.batch_sizes, batch)
        if not self.graphs or index == len(self.batch_sizes):
            outputs = self.fn(*inputs)
            return outputs if isinstance(outputs, tuple) else (outputs,)
        graph, static_inputs, static_outputs = self.graphs[self.batch_sizes[index]]
        # Padding rows keep whatever valid data they last held: rows are independent.
        for static, value in zip(static_inputs, inputs):
            static[:batch].copy_(value, non_blocking=True)
        graph.replay()
        self.replays += 1
        return tuple(out[:batch] for out in static_outputs)


@dataclass(frozen=True)
class RequestUpdate:
    """What the engine thread hands to the HTTP layer after each step that touched a request."""

    output_ids: tuple[int, ...]
    spec_verify_ct: int
    finished: bool
    finish_reason: dict[str, Any] | None
    error: str | None = None


@dataclass
class Request:
    rid: str
    prompt_ids: list[int]
    max_new_tokens: int
    ignore_eos: bool
    on_update: Callable[[RequestUpdate], object]  # called from the engine thread; its result is ignored
    tokens: list[int] = field(default_factory=list)  # prompt + output
    output_ids: list[int] = field(default_factory=list)
    next_draft: int = 0  # first draft token of the next cycle, from the last draft extend
    spec_verify_ct: int = 0
    finish_reason: dict[str, Any] | None = None
    aborted: bool = False

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt_ids)


@dataclass(frozen=True)
class ProfileRequest:
    output_dir: str
    num_steps: int | None = None
    start_step: int | None = None
    activities: tuple[str, ...] = ("CPU", "GPU")
    with_stack: bool = True
    record_shapes: bool = True
    profile_prefix: str | None = None
    profile_id: str | None = None

    def trace_path(self, profile_id: str) -> Path:
        prefix = f"{self.profile_prefix}-" if self.profile_prefix else ""
        return Path(self.output_dir) / f"{prefix}{profile_id}-TP-0.trace.json.gz"


@dataclass
class _ProfileSession:
    request: ProfileRequest
    path: Path
    steps_before_start: int
    profiler: torch.profiler.profile | None = None
    steps_left: int | None = None
    cuda_profiler: bool = False


def _env_flag(name: str, default: bool = True) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


class MicroEngine:
    """Owns the models and one scheduler thread; everything touching tensors runs on that thread."""

    def __init__(
        self, model_config: MicroModelConfig, spec: SpecConfig, device: str = "cpu", num_threads: int | None = None
    ) -> None:
        self.model_config = model_config
        # Intra-op threads are a per-thread OpenMP setting: the engine thread must set its own, or it
        # runs with the OpenMP default whatever torch.set_num_threads said on the main thread.
        self.num_threads = num_threads or torch.get_num_threads()
        self.spec = spec
        self.device = torch.device(device)
        self.tokenizer = WordTokenizer(model_config.vocab_size, model_config.bos_token_id, model_config.eos_token_id)
        self.models: MicroModels | None = None
        self.functions: SpecFunctions | None = None
        self.runners: dict[str, GraphRunner] = {}
        self._waiting: list[Request] = []
        self._running: list[Request] = []
        self._commands: list[tuple[Callable[[], Any], concurrent.futures.Future]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self._profile: _ProfileSession | None = None
        self.forward_steps = 0
        self.decode_cycles = 0
        self.prefill_steps = 0
        self.last_decode_batch_size = 0
        self._reset_counters()

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._thread_main, name="micro-engine", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        if not self.ready.wait(timeout):
            raise TimeoutError("micro engine did not become ready")
        if self.startup_error is not None:
            raise RuntimeError(f"micro engine failed to start: {self.startup_error}") from self.startup_error

    def stop(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.ready.is_set() and self.startup_error is None

    def _thread_main(self) -> None:
        torch.set_num_threads(self.num_threads)
        try:
            with torch.inference_mode():
                self._build()
                self._warmup()
        except BaseException as exc:  # report to the starter instead of dying silently
            logger.exception("micro engine start-up failed")
            self.startup_error = exc
            self.ready.set()
            return
        self.ready.set()
        with torch.inference_mode():
            self._loop()
        self._finish_on_shutdown()

    def _build(self) -> None:
        started = time.perf_counter()
        self.models = MicroModels(self.model_config, self.device)
        self.functions = SpecFunctions(self.models, self.spec)
        logger.info(
            "Load weight end. vocab_size=%d hidden_size=%d num_layers=%d (seed %d, %.1f s)",
            self.model_config.vocab_size,
            self.model_config.hidden_size,
            self.model_config.num_layers,
            self.model_config.seed,
            time.perf_counter() - started,
        )
        c, t = self.model_config.context_len, self.spec.num_draft_tokens
        ctx = [InputSpec((c,), torch.long), InputSpec((c,), torch.bool, True), InputSpec((), torch.long)]
        use_graphs = self.device.type == "cuda" and self.spec.cuda_graph
        sizes = capture_batch_sizes(self.spec.cuda_graph_max_bs) if use_graphs else None
        pool = torch.cuda.graph_pool_handle() if use_graphs else None
        f = self.functions
        # All graphs share one memory pool, as SGLang's do. A graph captured later may place its
        # outputs in blocks that an earlier graph freed during its capture, and replaying that earlier
        # graph overwrites them. So the graphs are captured in the order a cycle replays them (draft
        # decode, target verify, draft extend): each graph's outputs then survive the rest of the cycle.
        # (Captured the other way round, a draft-decode replay's draft tokens were overwritten by the
        # target-verify replay: on the first GPU run accept length fell from ~2.5 to ~1.2 and a few
        # greedy outputs changed, caught by the accept-length rule.)
        self.runners = {}
        if self.spec.num_steps > 1:  # SGLang has no draft-decode graph for a single step either
            self.runners["draft_decode"] = GraphRunner(
                "draft_decode", f.draft_decode, [*ctx, InputSpec((), torch.long)], self.device, sizes, pool
            )
        self.runners["target_verify"] = GraphRunner(
            "target_verify", f.target_verify, [*ctx, InputSpec((t,), torch.long)], self.device, sizes, pool
        )
        self.runners["draft_extend"] = GraphRunner(
            "draft_extend",
            f.draft_extend,
            [*ctx, InputSpec((t,), torch.long), InputSpec((t,), torch.bool, True)],
            self.device,
            sizes,
            pool,
        )
        if use_graphs:
            started = time.perf_counter()
            for runner in self.runners.values():
                runner.capture()
            logger.info(
                "Capture cuda graph end. bs=%s graphs=%s (%.1f s)", sizes, sorted(self.runners), time.perf_counter() - started
            )

    def _warmup(self) -> None:
        """One short greedy request through every region, before the server reports healthy."""
        done = threading.Event()
        request = Request(
            rid="warmup",
            prompt_ids=self.tokenizer.encode("the micro engine warms up"),
            max_new_tokens=4 * self.spec.num_draft_tokens,
            ignore_eos=True,
            on_update=lambda update: done.set() if update.finished else None,
        )
        self._waiting.append(request)
        while not done.is_set():
            self._step()
        self._reset_counters()
        logger.info("Warm-up done (%d tokens).", len(request.output_ids))

    # ---- public API (any thread) ------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        with self._cond:
            if self._stopping:
                raise EngineRequestError("the server is shutting down")
            self._waiting.append(request)
            self._cond.notify_all()

    def generate(self, prompts: list[list[int]], max_new_tokens: int, timeout: float = 600.0) -> list[Request]:
        """Submits all prompts at once (ignore_eos) and waits: the finished requests, in order."""
        remaining = threading.Semaphore(0)
        requests = [
            Request(
                rid=f"sync-{i}",
                prompt_ids=list(prompt),
                max_new_tokens=max_new_tokens,
                ignore_eos=True,
                on_update=lambda update: remaining.release() if update.finished else None,
            )
            for i, prompt in enumerate(prompts)
        ]
        with self._cond:
            self._waiting.extend(requests)
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for _ in requests:
            if not remaining.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError("generate timed out")
        return requests

    def abort(self, request: Request) -> None:
        request.aborted = True  # the engine thread drops it before its next step

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Runs `fn` on the engine thread between two steps; its result or exception in the future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            self._commands.append((fn, future))
            self._cond.notify_all()
        return future

    # ---- commands (engine thread) -----------------------------------------------------------------

    def flush_cache(self) -> None:
        if self._waiting or self._running:
            raise EngineRequestError("Cache not flushed because there are pending requests.")
        self._reset_counters()

    def start_profile(self, request: ProfileRequest) -> str:
        if self._profile is not None:
            raise EngineRequestError("Profiling is already in progress. Call /stop_profile first.")
        unknown = [a for a in request.activities if a not in PROFILE_ACTIVITIES]
        if unknown:
            raise EngineRequestError(f"unsupported profiler activities {unknown}; supported: {list(PROFILE_ACTIVITIES)}")
        if "CUDA_PROFILER" in request.activities and self.device.type != "cuda":
            raise EngineRequestError("activity CUDA_PROFILER needs --device cuda")
        if not any(a in request.activities for a in ("CPU", "GPU", "CUDA_PROFILER")):
            raise EngineRequestError("activities must include CPU, GPU or CUDA_PROFILER")
        if request.num_steps is not None and request.num_steps < 1:
            raise EngineRequestError(f"num_steps must be >= 1, got {request.num_steps}")
        profile_id = request.profile_id or str(time.time())
        path = request.trace_path(profile_id)
        if path.parent != Path(request.output_dir) or path.name in (".", ".."):  # the server checks names; keep it so
            raise EngineRequestError(f"profile_prefix/profile_id must not form a path, got {path.name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._profile = _ProfileSession(request=request, path=path, steps_before_start=request.start_step or 0)
        if self._profile.steps_before_start == 0:
            self._begin_profiler()
        logger.info("Profiling starts. Traces will be saved to: %s (num_steps=%s)", path, request.num_steps)
        return str(path)

    def stop_profile(self) -> str:
        if self._profile is None:
            raise EngineRequestError("Profiling is not in progress. Call /start_profile first.")
        return self._end_profiler()

    # ---- profiler (engine thread) -----------------------------------------------------------------

    def _begin_profiler(self) -> None:
        session = self._profile
        assert session is not None
        req = session.request
        activities = []
        if "CPU" in req.activities:
            activities.append(ProfilerActivity.CPU)
        if "GPU" in req.activities and self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        if activities:
            session.profiler = torch.profiler.profile(
                activities=activities,
                with_stack=req.with_stack and _env_flag("SGLANG_PROFILE_WITH_STACK"),
                record_shapes=req.record_shapes and _env_flag("SGLANG_PROFILE_RECORD_SHAPES"),
                profile_memory="MEM" in req.activities,
            )
            session.profiler.start()
        if "CUDA_PROFILER" in req.activities:
            torch.cuda.cudart().cudaProfilerStart()
            session.cuda_profiler = True
        session.steps_left = req.num_steps

    def _end_profiler(self) -> str:
        session = self._profile
        assert session is not None
        self._profile = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if session.cuda_profiler:
            torch.cuda.cudart().cudaProfilerStop()
        if session.profiler is None:  # stopped before it began (start_step not reached) or nvtx only
            logger.info("Profiling stopped; no torch trace was recorded.")
            return str(session.path)
        session.profiler.stop()
        raw = session.path.with_name(session.path.name + ".tmp.json")
        session.profiler.export_chrome_trace(str(raw))
        partial = session.path.with_name(session.path.name + ".tmp")
        with open(raw, "rb") as src, gzip.open(partial, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        os.replace(partial, session.path)  # the trace appears whole or not at all
        logger.info("Profiling done. Traces are saved to: %s", session.path)
        return str(session.path)

    def _count_profile_step(self) -> None:
        session = self._profile
        if session is None:
            return
        if session.steps_before_start > 0:
            session.steps_before_start -= 1
            if session.steps_before_start == 0:
                self._begin_profiler()
            return
        if session.steps_left is not None:
            session.steps_left -= 1
            if session.steps_left <= 0:
                self._end_profiler()

    # ---- scheduling (engine thread) ---------------------------------------------------------------

    def _reset_counters(self) -> None:
        self.spec_verify_ct = 0  # (request, verify) pairs
        self.spec_accepted_tokens = 0  # accepted drafts + bonus, summed over those pairs
        self.max_decode_batch_size = 0
        self.generated_tokens = 0

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._commands or self._waiting or self._running):
                    self._cond.wait()
                if self._stopping:
                    return
                commands, self._commands = self._commands, []
            for fn, future in commands:
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)
            self._step()

    def _step(self) -> None:
        with self._cond:
            for queue in (self._waiting, self._running):
                for req in [r for r in queue if r.aborted]:
                    queue.remove(req)
            room = self.spec.max_running_requests - len(self._running)
            admitted, self._waiting = self._waiting[:room], self._waiting[room:]
            running = list(self._running)
        batch = admitted or running
        if not batch:
            return
        try:
            if admitted:
                self._prefill(admitted)
                self.prefill_steps += 1
            else:
                self._decode_cycle(running)
                self.decode_cycles += 1
        except Exception as exc:  # fail the batch, keep serving
            logger.exception("step failed")
            for req in batch:
                req.finish_reason = {"type": "abort", "message": f"engine error: {exc}"}
                self._emit(req, error=f"engine error: {exc}")
                with self._cond:
                    if req in self._running:
                        self._running.remove(req)
        self.forward_steps += 1
        try:
            self._count_profile_step()
        except Exception:  # e.g. the trace cannot be written (disk full): keep serving, say so
            logger.exception("could not write the profiler trace")

    def _tensor(self, rows: Sequence[Sequence[int]] | Sequence[int], dtype: torch.dtype = torch.long) -> torch.Tensor:
        return torch.tensor(rows, dtype=dtype).to(self.device, non_blocking=True)

    def _context(self, histories: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The last context_len tokens of each history, left-padded: ids [B, C], valid [B, C]."""
        c = self.model_config.context_len
        ids, valid = [], []
        for history in histories:
            tail = history[-c:] if c else []
            pad = c - len(tail)
            ids.append([0] * pad + tail)
            valid.append([False] * pad + [True] * len(tail))
        if c == 0:
            return (
                torch.zeros(len(histories), 0, dtype=torch.long, device=self.device),
                torch.zeros(len(histories), 0, dtype=torch.bool, device=self.device),
            )
        return self._tensor(ids), self._tensor(valid, torch.bool)

    def _append(self, req: Request, new_tokens: list[int]) -> bool:
        """Appends tokens up to a stop condition; True when the request finished."""
        eos = self.model_config.eos_token_id
        for token in new_tokens:
            req.output_ids.append(token)
            req.tokens.append(token)
            self.generated_tokens += 1
            if token == eos and not req.ignore_eos:
                req.finish_reason = {"type": "stop", "matched": token}
                return True
            if len(req.output_ids) >= req.max_new_tokens:
                req.finish_reason = {"type": "length", "length": req.max_new_tokens}
                return True
        return False

    def _emit(self, req: Request, error: str | None = None) -> None:
        finished = req.finish_reason is not None
        update = RequestUpdate(tuple(req.output_ids), req.spec_verify_ct, finished, req.finish_reason, error)
        try:
            req.on_update(update)
        except Exception:  # a vanished client must not take the engine down
            logger.exception("request %s: update callback failed", req.rid)

    def _prefill(self, batch: list[Request]) -> None:
        f = self.functions
        assert f is not None
        for req in [r for r in batch if r.max_new_tokens == 0]:
            req.finish_reason = {"type": "length", "length": 0}
            self._emit(req)
        batch = [r for r in batch if r.max_new_tokens > 0]
        if not batch:
            return
        ctx_ids, ctx_valid = self._context([r.prompt_ids[:-1] for r in batch])
        first_new_pos = self._tensor([len(r.prompt_ids) - 1 for r in batch])
        last_prompt = self._tensor([r.prompt_ids[-1] for r in batch])
        with record_function(f"step[EXTEND bs={len(batch)}]"):
            first_output = f.target_prefill(ctx_ids, ctx_valid, first_new_pos, last_prompt)
        continuing = []
        for req, token in zip(batch, first_output.tolist()):
            if self._append(req, [token]):
                self._emit(req)
            else:
                continuing.append(req)
        if not continuing:
            return
        ctx_ids, ctx_valid = self._context([r.prompt_ids for r in continuing])
        first_new_pos = self._tensor([len(r.prompt_ids) for r in continuing])
        outputs = self._tensor([r.output_ids[-1] for r in continuing])
        with record_function(f"step[EXTEND bs={len(continuing)}]"):
            first_drafts = f.draft_prefill(ctx_ids, ctx_valid, first_new_pos, outputs)
        for req, draft in zip(continuing, first_drafts.tolist()):
            req.next_draft = draft
            self._emit(req)
        with self._cond:
            self._running.extend(continuing)

    def _decode_cycle(self, batch: list[Request]) -> None:
        f = self.functions
        assert f is not None
        bs = len(batch)
        steps = self.spec.num_steps
        self.last_decode_batch_size = bs
        self.max_decode_batch_size = max(self.max_decode_batch_size, bs)

        # 1. draft decode
        first_drafts = self._tensor([r.next_draft for r in batch])
        if steps > 1:
            ctx_ids, ctx_valid = self._context([r.tokens for r in batch])
            first_new_pos = self._tensor([len(r.tokens) for r in batch])
            with record_function(f"step[DECODE bs={bs}]"):
                self._inject_delay()
                (drafts,) = self.runners["draft_decode"].run(ctx_ids, ctx_valid, first_new_pos, first_drafts)
        else:
            self._inject_delay()
            drafts = first_drafts.unsqueeze(1)

        # 2. target verify of [last token, drafts...]
        ctx_ids, ctx_valid = self._context([r.tokens[:-1] for r in batch])
        first_new_pos = self._tensor([len(r.tokens) - 1 for r in batch])
        chain = torch.cat([self._tensor([[r.tokens[-1]] for r in batch]), drafts], dim=1)
        with record_function(f"step[TARGET_VERIFY bs={bs}]"):
            (target_tokens,) = self.runners["target_verify"].run(ctx_ids, ctx_valid, first_new_pos, chain)
        target_rows = target_tokens.tolist()
        draft_rows = drafts.tolist()

        # 3. accept the longest agreeing prefix plus the bonus token
        continuing: list[tuple[Request, int, int]] = []  # (request, tokens before this cycle, accepted)
        for req, draft_row, target_row in zip(batch, draft_rows, target_rows):
            agreed = 0
            while agreed < steps and draft_row[agreed] == target_row[agreed]:
                agreed += 1
            accepted = target_row[: agreed + 1]
            req.spec_verify_ct += 1
            self.spec_verify_ct += 1
            self.spec_accepted_tokens += len(accepted)
            history_len = len(req.tokens)
            if self._append(req, accepted) or req.aborted:
                with self._cond:
                    self._running.remove(req)
                self._emit(req)
            else:
                continuing.append((req, history_len, len(accepted)))
        if not continuing:
            return

        # 4. draft extend over the accepted tokens, padded to num_steps + 1
        width = self.spec.num_draft_tokens
        ctx_ids, ctx_valid = self._context([req.tokens[:n] for req, n, _ in continuing])
        first_new_pos = self._tensor([n for _, n, _ in continuing])
        accepted_ids = self._tensor([req.tokens[n : n + k] + [0] * (width - k) for req, n, k in continuing])
        accepted_valid = self._tensor([[True] * k + [False] * (width - k) for _, _, k in continuing], torch.bool)
        last_index = self._tensor([k - 1 for _, _, k in continuing])
        with record_function(f"step[DRAFT_EXTEND_V2 bs={len(continuing)}]"):
            logits, _, _ = self.runners["draft_extend"].run(ctx_ids, ctx_valid, first_new_pos, accepted_ids, accepted_valid)
            next_drafts = f.select_after_draft_extend(logits, last_index)
        for (req, _, _), draft in zip(continuing, next_drafts.tolist()):
            req.next_draft = draft
            self._emit(req)

    def _inject_delay(self) -> None:
        """The planted slowdown, on the engine thread, which every decode cycle waits for, on CPU and on
        CUDA alike: `burn_cpu_time`."""
        if self.spec.inject_delay_us <= 0:
            return
        with record_function("micro::inject_delay"):
            burn_cpu_time(self.spec.inject_delay_us)

    def _finish_on_shutdown(self) -> None:
        if self._profile is not None and self._profile.profiler is not None:
            try:
                self._end_profiler()
            except Exception:
                logger.exception("could not write the trace on shutdown")
        with self._cond:
            pending = self._waiting + self._running
            self._waiting, self._running = [], []
            commands, self._commands = self._commands, []
        for req in pending:
            req.finish_reason = {"type": "abort", "message": "server shut down"}
            self._emit(req, error="server shut down")
        for _, future in commands:
            future.set_exception(EngineRequestError("the server is shutting down"))

    # ---- introspection ----------------------------------------------------------------------------

    @property
    def avg_spec_accept_length(self) -> float | None:
        return self.spec_accepted_tokens / self.spec_verify_ct if self.spec_verify_ct else None

    def internal_state(self) -> dict[str, Any]:
        with self._cond:
            num_running, num_waiting = len(self._running), len(self._waiting)
        sizes = next((r.batch_sizes for r in self.runners.values() if r.graphs), [])
        return {
            "avg_spec_accept_length": self.avg_spec_accept_length,
            "spec_verify_ct": self.spec_verify_ct,
            "spec_accepted_tokens": self.spec_accepted_tokens,
            "generated_tokens": self.generated_tokens,
            "max_decode_batch_size": self.max_decode_batch_size,
            "last_decode_batch_size": self.last_decode_batch_size,
            "num_running_reqs": num_running,
            "num_waiting_reqs": num_waiting,
            "forward_steps": self.forward_steps,
            "decode_cycles": self.decode_cycles,
            "prefill_steps": self.prefill_steps,
            "profiling": self._profile is not None,
            "cuda_graph_batch_sizes": sizes,
            "cuda_graph_replays": {name: r.replays for name, r in self.runners.items()},
        }
