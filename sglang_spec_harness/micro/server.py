"""`python -m sglang_spec_harness.micro.server`: the micro engine behind the subset of SGLang's HTTP API the harness uses.

Endpoints (SGLang's names, fields and behaviour): GET /health, GET /health_generate, GET /server_info
(and /get_server_info), GET /get_model_info (and /model_info), POST /generate, POST /flush_cache,
POST /start_profile, POST /stop_profile. Errors are `{"error": {"message": ...}}` with a 4xx status.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from sglang_spec_harness import __version__
from sglang_spec_harness.micro.config import MicroModelConfig

if TYPE_CHECKING:  # the engine imports torch: loaded once the flags are known good
    from sglang_spec_harness.micro.engine import MicroEngine, Request, RequestUpdate, SpecConfig

logger = logging.getLogger("sglang_spec_harness.micro")

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")


class ProfileBody(BaseModel):
    """The fields of SGLang's `ProfileReq` (0.5.23, srt/managers/io_struct.py, with its `BaseReq`),
    with their types and defaults. SGLang validates the /start_profile body through a pydantic
    schema of that msgspec struct, in lax mode: "5" becomes 5, 5.0 becomes 5, "five" or 5.5 is
    refused (SGLang answers 400: its RequestValidationError handler replaces FastAPI's 422), and
    unknown fields are ignored. The micro engine validates the same way
    (tests/test_micro_profiler_client.py compares it with the struct lifted from the wheel)."""

    model_config = ConfigDict(extra="ignore")

    rid: str | None = None
    http_worker_ipc: str | None = None
    req_type: Literal[1, 2] = 1  # ProfileReqType; /start_profile sets START_PROFILE whatever it says
    output_dir: str | None = None
    start_step: int | None = None
    num_steps: int | None = None
    activities: list[str] | None = None
    profile_by_stage: bool = False
    with_stack: bool | None = None
    record_shapes: bool | None = None
    profile_id: str | None = None
    merge_profiles: bool = False
    profile_prefix: str | None = None
    profile_stages: list[str] | None = None
    detailed_annotations: bool = False


# profile_prefix and profile_id become part of the trace's file name: a plain name, never a path.
FILE_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,127}")


def _number_at_least(kind: type[int] | type[float], minimum: float, expected: str) -> Callable[[str], Any]:
    """An argparse `type`: `kind(text)`, refused with `expected ..., got 'text'` below `minimum`."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive_int = _number_at_least(int, 1, "a positive integer")
_non_negative_int = _number_at_least(int, 0, "a whole number >= 0")
_non_negative_float = _number_at_least(float, 0, "a number >= 0")


def build_parser() -> argparse.ArgumentParser:
    defaults = MicroModelConfig()
    parser = argparse.ArgumentParser(
        prog="python -m sglang_spec_harness.micro.server",
        description="The micro engine: a small EAGLE-style speculative decoder served over SGLang's HTTP API.",
    )
    server = parser.add_argument_group("server (SGLang's flags)")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=30000)
    server.add_argument("--model-path", default="micro-target", help="informational; echoed in /server_info")
    server.add_argument("--speculative-algorithm", default="EAGLE", type=str.upper, choices=SPECULATIVE_ALGORITHMS)
    server.add_argument("--speculative-draft-model-path", default="micro-draft", help="informational; echoed in /server_info")
    server.add_argument("--speculative-num-steps", type=_positive_int, default=3)
    server.add_argument("--speculative-eagle-topk", type=_positive_int, default=1)
    server.add_argument(
        "--speculative-num-draft-tokens",
        type=_positive_int,
        default=None,
        help="the chain always verifies num_steps + 1 tokens (SGLang forces this for topk 1); other values are overridden",
    )
    server.add_argument("--cuda-graph-max-bs", type=_positive_int, default=32)
    server.add_argument("--disable-cuda-graph", action="store_true")
    server.add_argument("--max-running-requests", type=_positive_int, default=64)
    server.add_argument("--context-length", type=_positive_int, default=131072)
    server.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    engine = parser.add_argument_group("micro engine")
    engine.add_argument(
        "--disable-topk1-fast-path",
        action="store_true",
        help="select draft tokens by softmax + top-k even when topk == 1 (SGLang before PR #26235)",
    )
    engine.add_argument(
        "--inject-delay-us",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="spin N microseconds of CPU time in every draft-decode cycle: a planted slowdown of known size",
    )
    engine.add_argument(
        "--mmap-threshold",
        type=_non_negative_int,
        default=DEFAULT_MMAP_THRESHOLD,
        metavar="BYTES",
        help="glibc's malloc mmap threshold, fixed (0: glibc's own, which moves with the allocation history)",
    )
    engine.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if available, else cpu")
    engine.add_argument("--seed", type=int, default=defaults.seed)
    engine.add_argument("--vocab-size", type=_positive_int, default=defaults.vocab_size)
    engine.add_argument("--hidden-size", type=_positive_int, default=defaults.hidden_size)
    engine.add_argument("--num-layers", type=_positive_int, default=defaults.num_layers)
    engine.add_argument("--num-heads", type=_positive_int, default=defaults.num_heads)
    engine.add_argument("--window", type=_positive_int, default=defaults.window, help="sliding attention window")
    engine.add_argument("--draft-noise", type=_non_negative_float, default=defaults.draft_noise)
    engine.add_argument("--num-threads", type=_positive_int, default=None, help="torch intra-op threads (default: torch's)")
    return parser


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    args: argparse.Namespace
    model_config: MicroModelConfig
    device: str
    num_draft_tokens: int


def parse_args(argv: list[str] | None) -> ServerSettings:
    """Parses and validates the command line; a bad flag exits 2 with a usage line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error(f"argument --port: expected 1-65535, got {args.port}")
    try:
        model_config = MicroModelConfig(
            vocab_size=args.vocab_size,
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            num_heads=args.num_heads,
            window=args.window,
            draft_noise=args.draft_noise,
            seed=args.seed,
        )
    except ValueError as exc:
        parser.error(f"model size flags: {exc}")
    import torch  # only once the flags are known good: usage errors stay instant

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("argument --device: cuda requested but torch.cuda.is_available() is False")
    num_draft_tokens = args.speculative_num_steps + 1
    if args.speculative_num_draft_tokens not in (None, num_draft_tokens):
        # SGLang does the same for topk == 1; the micro engine drafts a chain for any topk.
        print(
            f"warning: --speculative-num-draft-tokens {args.speculative_num_draft_tokens} overridden to "
            f"num_steps + 1 = {num_draft_tokens} (chain drafting)",
            file=sys.stderr,
        )
    return ServerSettings(args=args, model_config=model_config, device=device, num_draft_tokens=num_draft_tokens)


class BadRequest(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class GenerateInput:
    prompt_ids: list[int]
    max_new_tokens: int
    ignore_eos: bool
    rid: str


def _int_field(container: dict[str, Any], name: str, default: int, minimum: int, where: str) -> int:
    value = container.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{where}.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise BadRequest(f"{where}.{name} must be >= {minimum}, got {value}")
    return value


def parse_generate(body: Any, tokenizer: Any, vocab_size: int, context_length: int) -> tuple[list[GenerateInput], bool, bool]:
    """(inputs, is_batch, stream) from a /generate body; BadRequest with SGLang-like messages."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise BadRequest("Either text or input_ids should be provided (exactly one of them).")
    if text is not None:
        if isinstance(text, str):
            prompts, is_batch = [tokenizer.encode(text)], False
        elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            prompts, is_batch = [tokenizer.encode(t) for t in text], True
        else:
            raise BadRequest("text must be a string or a non-empty list of strings")
    else:
        if isinstance(input_ids, list) and input_ids and all(isinstance(t, int) and not isinstance(t, bool) for t in input_ids):
            prompts, is_batch = [list(input_ids)], False
        elif isinstance(input_ids, list) and input_ids and all(isinstance(row, list) for row in input_ids):
            prompts, is_batch = [list(row) for row in input_ids], True
            for row in prompts:
                if not row or not all(isinstance(t, int) and not isinstance(t, bool) for t in row):
                    raise BadRequest("input_ids rows must be non-empty lists of integers")
        else:
            raise BadRequest("input_ids must be a non-empty list of integers or a list of such lists")
        for row in prompts:
            bad = [t for t in row if not 0 <= t < vocab_size]
            if bad:
                raise BadRequest(f"input_ids contain token ids outside [0, {vocab_size}): {bad[:5]}")
    sampling = body.get("sampling_params") or {}
    sampling_list = sampling if isinstance(sampling, list) else [sampling] * len(prompts)
    if len(sampling_list) != len(prompts) or not all(isinstance(s, dict) for s in sampling_list):
        raise BadRequest("sampling_params must be an object (or a list of objects, one per prompt)")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be a boolean, got {stream!r}")
    if stream and is_batch:
        raise BadRequest("stream is not supported for a batch of prompts by the micro engine")
    rids = body.get("rid")
    inputs = []
    for i, (prompt, params) in enumerate(zip(prompts, sampling_list)):
        max_new_tokens = _int_field(params, "max_new_tokens", 128, 0, "sampling_params")
        temperature = params.get("temperature", 0.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise BadRequest(f"sampling_params.temperature must be a number >= 0, got {temperature!r}")
        if temperature > 0:
            raise BadRequest("the micro engine decodes greedily only: sampling_params.temperature must be 0")
        ignore_eos = params.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise BadRequest(f"sampling_params.ignore_eos must be a boolean, got {ignore_eos!r}")
        if len(prompt) + max_new_tokens > context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
                f"You requested a total of {len(prompt) + max_new_tokens} tokens: {len(prompt)} tokens from the input "
                f"messages and {max_new_tokens} tokens for the completion."
            )
        rid = rids[i] if isinstance(rids, list) and i < len(rids) else rids if isinstance(rids, str) and not is_batch else None
        inputs.append(GenerateInput(prompt, max_new_tokens, ignore_eos, str(rid) if rid else uuid.uuid4().hex))
    return inputs, is_batch, stream


def parse_profile(body: Any) -> Any:
    """A /start_profile body as SGLang 0.5.23 reads it (see ProfileBody), then what the micro engine
    cannot do: per-stage or merged profiles (one rank), negative step counts (SGLang takes them and
    stops at once), a file name that is not one."""
    from sglang_spec_harness.micro.engine import ProfileRequest

    try:
        req = ProfileBody.model_validate(body if body is not None else {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise BadRequest(f"{where}: {first['msg']} (got {first.get('input')!r})") from None
    ignored = sorted(set(body or {}) - set(ProfileBody.model_fields)) if isinstance(body, dict) else []
    if ignored:
        logger.warning("start_profile: ignoring unknown fields %s (as SGLang does)", ignored)
    for flag in ("profile_by_stage", "merge_profiles"):
        if getattr(req, flag):
            raise BadRequest(f"{flag} is not supported by the micro engine (one rank, one trace file)")
    for name in ("num_steps", "start_step"):
        value = getattr(req, name)
        if value is not None and value < 0:
            raise BadRequest(f"{name} must be a non-negative integer, got {value}")
    output_dir = req.output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp"
    if "\x00" in output_dir or ".." in output_dir.replace("\\", "/").split("/"):
        raise BadRequest(f"output_dir must be a directory path without '..' or NUL, got {output_dir[:200]!r}")
    for name in ("profile_prefix", "profile_id"):
        value = getattr(req, name)
        if (value and not FILE_NAME_PART.fullmatch(value)) or (name == "profile_id" and value == ""):
            raise BadRequest(
                f"{name} must be a plain file-name part (letters, digits, '.', '_', '+', '=', '-'; "
                f"at most 128, not starting with a dot), got {value[:200]!r}"
            )
    return ProfileRequest(
        output_dir=str(output_dir),
        num_steps=req.num_steps or None,  # 0 = no step limit, as in SGLang (`if num_steps:`)
        start_step=req.start_step,
        activities=tuple(a.upper() for a in (req.activities or ["CPU", "GPU"])),
        with_stack=req.with_stack is not False,
        record_shapes=req.record_shapes is not False,
        profile_prefix=req.profile_prefix or None,
        profile_id=req.profile_id,
    )


def error_response(status: int, message: str) -> JSONResponse:
    """SGLang's error shape: `{"error": {"message": ..., "code": status}}`."""
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


async def _validation_error(_request: HttpRequest, exc: Exception) -> JSONResponse:
    return error_response(400, str(exc))  # SGLang answers 400 where FastAPI would answer 422


async def read_json_body(request: HttpRequest, allow_empty: bool = False) -> Any:
    """The request body parsed as JSON (None for an empty body where `allow_empty`); BadRequest otherwise."""
    raw = await request.body()
    if not raw.strip():
        if allow_empty:
            return None
        raise BadRequest("the request body is empty; expected a JSON object")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None


def server_info(engine: Any, settings: ServerSettings) -> dict[str, Any]:
    """/server_info: SGLang's speculative-decoding fields, then what the micro engine adds."""
    args = settings.args
    return {
        "engine": "micro",
        "version": f"micro-{__version__}",
        "model_path": args.model_path,
        "speculative_algorithm": args.speculative_algorithm,
        "speculative_draft_model_path": args.speculative_draft_model_path,
        "speculative_num_steps": args.speculative_num_steps,
        "speculative_eagle_topk": args.speculative_eagle_topk,
        "speculative_num_draft_tokens": settings.num_draft_tokens,
        "topk1_fast_path": engine.spec.uses_fast_path,
        "disable_topk1_fast_path": args.disable_topk1_fast_path,
        "inject_delay_us": args.inject_delay_us,
        "mmap_threshold": args.mmap_threshold,
        # where the process may run (server.cpus pins it): evidence, not the flag
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cuda_graph_max_bs": args.cuda_graph_max_bs,
        "disable_cuda_graph": args.disable_cuda_graph,
        "cuda_graph": engine.device.type == "cuda" and not args.disable_cuda_graph,
        "device": engine.device.type,
        "host": args.host,
        "port": args.port,
        "max_running_requests": args.max_running_requests,
        "context_length": args.context_length,
        "micro_model": {
            **dataclasses.asdict(engine.model_config),
            "context_window_tokens": engine.model_config.context_len,
            "bos_token_id": engine.model_config.bos_token_id,
            "eos_token_id": engine.model_config.eos_token_id,
        },
        "internal_states": [engine.internal_state()],
    }


class Generations:
    """Hands /generate requests to the engine thread and turns its updates into SGLang response bodies."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer

    def response_body(self, item: GenerateInput, update: RequestUpdate, created: float) -> dict[str, Any]:
        completion = len(update.output_ids)
        verify_ct = update.spec_verify_ct
        return {
            "text": self.tokenizer.decode(list(update.output_ids)),
            "output_ids": list(update.output_ids),
            "meta_info": {
                "id": item.rid,
                "finish_reason": update.finish_reason,
                "prompt_tokens": len(item.prompt_ids),
                "completion_tokens": completion,
                "cached_tokens": 0,
                "spec_verify_ct": verify_ct,
                "spec_accept_length": completion / verify_ct if verify_ct else None,
                "e2e_latency": time.perf_counter() - created,
            },
        }

    def submit(self, item: GenerateInput) -> tuple[Request, asyncio.Queue]:
        """Queues the request on the engine; its updates arrive, from the engine thread, on the queue."""
        from sglang_spec_harness.micro.engine import Request

        loop = asyncio.get_running_loop()
        updates: asyncio.Queue = asyncio.Queue()
        request = Request(
            rid=item.rid,
            prompt_ids=item.prompt_ids,
            max_new_tokens=item.max_new_tokens,
            ignore_eos=item.ignore_eos,
            on_update=lambda update: loop.call_soon_threadsafe(updates.put_nowait, update),
        )
        self.engine.submit(request)
        return request, updates

    async def run_to_end(self, item: GenerateInput) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) once the request finishes or fails; a cancelled caller aborts it."""
        created = time.perf_counter()
        request, updates = self.submit(item)
        try:
            while True:
                update = await updates.get()
                if update.error:
                    return 500, {"error": {"message": update.error, "code": 500}}
                if update.finished:
                    return 200, self.response_body(item, update, created)
        except asyncio.CancelledError:
            self.engine.abort(request)
            raise

    async def stream_events(
        self, item: GenerateInput, request: Request, updates: asyncio.Queue, created: float
    ) -> AsyncIterator[bytes]:
        """Server-sent events, one per update, then `[DONE]`; a client that goes away aborts the request."""
        try:
            while True:
                update = await updates.get()
                if update.error:
                    yield b"data: " + json.dumps({"error": {"message": update.error, "code": 500}}).encode() + b"\n\n"
                    break
                yield b"data: " + json.dumps(self.response_body(item, update, created)).encode() + b"\n\n"
                if update.finished:
                    break
            yield b"data: [DONE]\n\n"
        finally:
            if not request.finish_reason:
                self.engine.abort(request)  # the client went away


def _add_health_routes(app: FastAPI, engine: Any, generations: Generations) -> None:
    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200) if engine.alive else error_response(503, "engine is not running")

    @app.get("/health_generate")
    async def health_generate() -> Response:
        if not engine.alive:
            return error_response(503, "engine is not running")
        item = GenerateInput(engine.tokenizer.encode("health"), 1, True, f"HEALTH_CHECK_{uuid.uuid4().hex}")
        try:
            status, _ = await asyncio.wait_for(generations.run_to_end(item), timeout=20)
        except TimeoutError:
            return error_response(503, "health_generate timed out")
        return Response(status_code=200) if status == 200 else error_response(503, "health_generate failed")


def _add_info_routes(app: FastAPI, engine: Any, settings: ServerSettings) -> None:
    @app.get("/server_info")
    @app.get("/get_server_info")
    async def get_server_info() -> JSONResponse:
        return JSONResponse(server_info(engine, settings))

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def get_model_info() -> JSONResponse:
        # the vocabulary's sizes, which SGLang leaves to its model files: the micro engine has none
        vocab = engine.model_config.vocab_size
        return JSONResponse({"model_path": settings.args.model_path, "tokenizer_path": None, "is_generation": True,
                             "vocab_size": vocab, "tokenizer_size": engine.tokenizer.vocab_size})


def _add_generate_route(app: FastAPI, engine: Any, settings: ServerSettings, generations: Generations) -> None:
    from sglang_spec_harness.micro.engine import EngineRequestError

    @app.post("/generate")
    async def generate(http_request: HttpRequest) -> Response:
        try:
            body = await read_json_body(http_request)
            items, is_batch, stream = parse_generate(
                body, engine.tokenizer, engine.model_config.vocab_size, settings.args.context_length
            )
        except BadRequest as exc:
            return error_response(400, str(exc))
        try:
            if stream:
                created = time.perf_counter()
                request, updates = generations.submit(items[0])
                events = generations.stream_events(items[0], request, updates, created)
                return StreamingResponse(events, media_type="text/event-stream")
            results = await asyncio.gather(*(generations.run_to_end(item) for item in items))
        except EngineRequestError as exc:
            return error_response(503, str(exc))
        failed = [body for status, body in results if status != 200]
        if failed:
            return JSONResponse(failed[0], status_code=500)
        bodies = [body for _, body in results]
        return JSONResponse(bodies if is_batch else bodies[0])


def _add_control_routes(app: FastAPI, engine: Any) -> None:
    """/flush_cache and the profiler: each runs on the engine thread, between decode steps."""
    from sglang_spec_harness.micro.engine import EngineRequestError

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        try:
            await asyncio.wrap_future(engine.call(engine.flush_cache))
        except EngineRequestError as exc:
            return error_response(400, str(exc))
        return PlainTextResponse("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")

    @app.api_route("/start_profile", methods=["GET", "POST"])
    async def start_profile(http_request: HttpRequest) -> Response:
        try:
            profile = parse_profile(await read_json_body(http_request, allow_empty=True))
            await asyncio.wrap_future(engine.call(lambda: engine.start_profile(profile)))
        except (BadRequest, EngineRequestError) as exc:
            return error_response(400, str(exc))
        return PlainTextResponse("Start profiling.\n")

    @app.api_route("/stop_profile", methods=["GET", "POST"])
    async def stop_profile() -> Response:
        try:
            await asyncio.wrap_future(engine.call(engine.stop_profile))
        except EngineRequestError as exc:
            return error_response(400, str(exc))
        return PlainTextResponse("Stop profiling. This will take some time.\n")


def create_app(engine: Any, settings: ServerSettings) -> FastAPI:
    """The FastAPI app serving `engine` (started, running on its own thread)."""
    app = FastAPI(title="micro engine", version=__version__)
    app.add_exception_handler(RequestValidationError, _validation_error)
    generations = Generations(engine)
    _add_health_routes(app, engine, generations)
    _add_info_routes(app, engine, settings)
    _add_generate_route(app, engine, settings, generations)
    _add_control_routes(app, engine)
    return app


# glibc raises its mmap threshold each time a mapped block is freed, so where the large buffers of a
# decode step (logits, probabilities: MBs each) land depends on the process's allocation history: on
# a 2-core VM that made two launches of one configuration differ by 5-15% in TPOT. A fixed threshold
# gives every launch the same placement (fresh page-aligned mappings); A/A runs with 4 launches per
# arm: launch-to-launch sd 0-1.2% (benchmarks/README.md).
DEFAULT_MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def fix_mmap_threshold(threshold: int) -> str:
    """mallopt(M_MMAP_THRESHOLD): fixes the threshold (turning the dynamic one off). Returns what was done."""
    if threshold <= 0:
        return "glibc's dynamic mmap threshold"
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1
    except (OSError, AttributeError):  # not glibc
        ok = False
    return f"mmap threshold fixed at {threshold} bytes" if ok else "mmap threshold left as it is (no glibc mallopt)"


def _shutdown_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    shutdown = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        shutdown.set()  # also re-raised here by uvicorn after its graceful shutdown

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return shutdown


def _spec_config(args: argparse.Namespace) -> SpecConfig:
    from sglang_spec_harness.micro.engine import SpecConfig

    return SpecConfig(
        num_steps=args.speculative_num_steps,
        topk=args.speculative_eagle_topk,
        fast_path=not args.disable_topk1_fast_path,
        cuda_graph=not args.disable_cuda_graph,
        cuda_graph_max_bs=args.cuda_graph_max_bs,
        max_running_requests=args.max_running_requests,
        inject_delay_us=args.inject_delay_us,
    )


def _log_configuration(settings: ServerSettings, spec: SpecConfig, malloc_note: str) -> None:
    import torch

    logger.info(
        "micro engine %s: device=%s speculative_algorithm=%s num_steps=%d eagle_topk=%d num_draft_tokens=%d "
        "topk1_fast_path=%s cuda_graph=%s torch=%s threads=%d malloc: %s",
        __version__,
        settings.device,
        settings.args.speculative_algorithm,
        spec.num_steps,
        spec.topk,
        spec.num_draft_tokens,
        spec.uses_fast_path,
        settings.device == "cuda" and spec.cuda_graph,
        torch.__version__,
        torch.get_num_threads(),
        malloc_note,
    )


def serve(engine: MicroEngine, settings: ServerSettings) -> int:
    """Serves the started engine over HTTP until a signal; the exit code (1: the port could not be bound)."""
    import uvicorn

    args = settings.args
    config = uvicorn.Config(
        create_app(engine, settings),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        lifespan="off",
    )
    server = uvicorn.Server(config)

    def announce_ready_then_watch_exit() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.02)
        if server.started:
            logger.info("The server is fired up and ready to roll! (http://%s:%d)", args.host, args.port)
        while not server.should_exit:
            time.sleep(0.05)
        # Ends in-flight requests (streams get an error chunk and [DONE]) so that uvicorn's graceful
        # shutdown does not wait for long generations.
        logger.info("Shutting down: aborting running requests.")
        engine.stop()

    threading.Thread(target=announce_ready_then_watch_exit, name="watch-server", daemon=True).start()
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 1 when it cannot bind
        engine.stop()
        return int(exc.code or 1)
    engine.stop()
    if not server.started:
        return 1
    logger.info("Server shut down.")
    return 0


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    args = settings.args
    malloc_note = fix_mmap_threshold(args.mmap_threshold)  # before torch allocates anything
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
    )
    shutdown = _shutdown_on_signals()

    import torch

    from sglang_spec_harness.micro.engine import MicroEngine

    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    spec = _spec_config(args)
    _log_configuration(settings, spec, malloc_note)
    engine = MicroEngine(settings.model_config, spec, settings.device, num_threads=args.num_threads)
    engine.start()
    while not engine.ready.wait(0.1):
        if shutdown.is_set():
            logger.info("Shutdown requested during start-up.")
            return 0
    if engine.startup_error is not None:
        logger.error("micro engine failed to start: %s", engine.startup_error)
        return 1
    if shutdown.is_set():
        engine.stop()
        return 0
    return serve(engine, settings)


if __name__ == "__main__":
    sys.exit(main())
