"""Decode TPOT of the micro engine's server with the topk==1 fast path on vs off, interleaved.

Starts two servers (identical flags but `--disable-topk1-fast-path` on one), then runs rounds in ABBA
order: each round sends the same greedy streaming requests, one at a time (decode batch size 1), to
each variant. TPOT of a request = (e2e - time to first chunk) / (completion_tokens - 1), measured by the
client; a round's figure is the median over its requests. Reports the median over rounds, the spread
(min-max and interquartile range), the per-round paired ratio on/off, whether outputs and accept
lengths were identical, and the softmax share of a decode cycle from a CPU profile of the off variant.

    .venv/bin/python benchmarks/bench_micro_tpot.py --rounds 10 --json /tmp/bench.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, name: str, flags: list[str], log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"{name}.log"
        self.command = [sys.executable, "-m", "sglang_spec_harness.micro.server", "--port", str(self.port), *flags]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not become healthy")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def stream_request(url: str, prompt: str, max_new_tokens: int) -> dict[str, Any]:
    payload = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
        "stream": True,
    }
    started = time.perf_counter()
    first_chunk_at = None
    final: dict[str, Any] = {}
    with httpx.stream("POST", f"{url}/generate", json=payload, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if first_chunk_at is None:
                first_chunk_at = time.perf_counter()
            final = json.loads(line[len("data: ") :])
    ended = time.perf_counter()
    assert first_chunk_at is not None
    tokens = final["meta_info"]["completion_tokens"]
    return {
        "tpot_ms": (ended - first_chunk_at) / (tokens - 1) * 1e3,
        "ttft_ms": (first_chunk_at - started) * 1e3,
        "output_ids": final["output_ids"],
        "completion_tokens": tokens,
        "spec_verify_ct": final["meta_info"]["spec_verify_ct"],
    }


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def softmax_share(server: Server, out_dir: Path, num_steps: int, prompt: str) -> dict[str, float]:
    """Share of wall time of decode cycles spent in aten::softmax, from a CPU profile of `server`."""
    body = {"output_dir": str(out_dir), "num_steps": num_steps, "profile_id": "share", "with_stack": False, "record_shapes": False}
    httpx.post(f"{server.url}/start_profile", json=body, timeout=60).raise_for_status()
    stream_request(server.url, prompt, 4 * num_steps * 4)
    trace = out_dir / "share-TP-0.trace.json.gz"
    deadline = time.monotonic() + 60
    while not trace.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    with gzip.open(trace, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    spans = sorted((e for e in events if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    # A cycle runs from a draft-decode span's start to the end of the next draft-extend span.
    cycles, start = [], None
    for span in spans:
        if span["name"].startswith("step[DECODE"):
            start = span["ts"]
        elif span["name"].startswith("step[DRAFT_EXTEND_V2") and start is not None:
            cycles.append((start, span["ts"] + span["dur"]))
            start = None
    softmax = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::softmax"]
    in_cycles = [e for e in softmax if any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in cycles)]
    cycle_us = sum(b - a for a, b in cycles)
    softmax_us = sum(e["dur"] for e in in_cycles)
    return {
        "cycles": len(cycles),
        "cycle_ms": cycle_us / len(cycles) / 1e3,
        "softmax_us_per_cycle": softmax_us / len(cycles),
        "softmax_calls_per_cycle": len(in_cycles) / len(cycles),
        "softmax_share": softmax_us / cycle_us,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of ABBA-interleaved runs (each variant once per round)")
    parser.add_argument("--requests", type=int, default=3, help="sequential requests per variant per round")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--num-threads", type=int, default=1, help="torch threads per server")
    parser.add_argument("--server-args", default="", help="extra server flags, e.g. '--vocab-size 32000'")
    parser.add_argument("--profile-steps", type=int, default=20, help="decode cycles profiled for the softmax share (0: skip)")
    parser.add_argument("--json", type=Path, help="write all figures here")
    args = parser.parse_args()

    common = ["--num-threads", str(args.num_threads), "--log-level", "warning", *args.server_args.split()]
    log_dir = Path(tempfile.mkdtemp(prefix="bench_micro_"))
    servers = {"on": Server("on", common, log_dir), "off": Server("off", [*common, "--disable-topk1-fast-path"], log_dir)}
    try:
        for server in servers.values():
            server.wait_healthy()
        prompts = [f"benchmark prompt {i} about speculative decoding" for i in range(args.requests)]
        for server in servers.values():  # warm-up, not measured
            stream_request(server.url, prompts[0], 16)
        tpot: dict[str, list[float]] = {"on": [], "off": []}
        outputs: dict[str, list[Any]] = {"on": [], "off": []}
        for round_index in range(args.rounds):
            order = ("on", "off") if round_index % 2 == 0 else ("off", "on")
            for name in order:
                results = [stream_request(servers[name].url, p, args.max_new_tokens) for p in prompts]
                tpot[name].append(statistics.median(r["tpot_ms"] for r in results))
                outputs[name].append([(r["output_ids"], r["spec_verify_ct"]) for r in results])
            print(f"round {round_index + 1}/{args.rounds}: on {tpot['on'][-1]:.2f} ms  off {tpot['off'][-1]:.2f} ms", file=sys.stderr)
        completion = sum(len(ids) for run in outputs["on"] for ids, _ in run)
        verifies = sum(ct for run in outputs["on"] for _, ct in run)
        ratios = [a / b for a, b in zip(tpot["on"], tpot["off"])]
        figures: dict[str, Any] = {
            "command": " ".join([os.path.relpath(sys.executable, REPO), *sys.argv]),
            "server_command": " ".join(servers["off"].command[2:]),
            "machine": {
                "platform": platform.platform(),
                "processor": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            "rounds": args.rounds,
            "requests_per_round": args.requests,
            "max_new_tokens": args.max_new_tokens,
            "outputs_identical": outputs["on"] == outputs["off"],
            "accept_length": completion / verifies,
        }
        for name in ("on", "off"):
            low, high = quartiles(tpot[name])
            figures[f"tpot_ms_{name}"] = {
                "median": statistics.median(tpot[name]),
                "min": min(tpot[name]),
                "max": max(tpot[name]),
                "q1": low,
                "q3": high,
                "rounds": tpot[name],
            }
        low, high = quartiles(ratios)
        figures["ratio_on_off"] = {"median": statistics.median(ratios), "q1": low, "q3": high, "min": min(ratios), "max": max(ratios)}
        figures["gain_percent"] = (1 - statistics.median(ratios)) * 100
        figures["rounds_on_faster"] = sum(r < 1 for r in ratios)
        if args.profile_steps:
            with tempfile.TemporaryDirectory() as trace_dir:
                figures["softmax_profile_off"] = softmax_share(servers["off"], Path(trace_dir), args.profile_steps, prompts[0])
        import torch  # only for the record

        figures["machine"]["torch"] = torch.__version__
    finally:
        for server in servers.values():
            server.stop()
    on, off, ratio = figures["tpot_ms_on"], figures["tpot_ms_off"], figures["ratio_on_off"]
    print(f"TPOT fast path on : median {on['median']:.2f} ms (IQR {on['q1']:.2f}-{on['q3']:.2f}, range {on['min']:.2f}-{on['max']:.2f})")
    print(f"TPOT fast path off: median {off['median']:.2f} ms (IQR {off['q1']:.2f}-{off['q3']:.2f}, range {off['min']:.2f}-{off['max']:.2f})")
    print(
        f"paired ratio on/off: median {ratio['median']:.4f} (IQR {ratio['q1']:.4f}-{ratio['q3']:.4f}); "
        f"gain {figures['gain_percent']:.1f}%; on faster in {figures['rounds_on_faster']}/{args.rounds} rounds"
    )
    print(f"accept length {figures['accept_length']:.3f}; outputs identical: {figures['outputs_identical']}")
    if "softmax_profile_off" in figures:
        share = figures["softmax_profile_off"]
        print(
            f"softmax (off variant): {share['softmax_calls_per_cycle']:.1f} calls, {share['softmax_us_per_cycle']:.0f} us "
            f"per {share['cycle_ms']:.2f} ms cycle = {share['softmax_share'] * 100:.1f}% (profiled, {share['cycles']} cycles)"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
