"""The micro engine's server as a real process on loopback, for tests that talk to it over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.http_helpers import get, post

REPO = Path(__file__).resolve().parents[2]
SMALL_FLAGS = ["--vocab-size", "8192", "--num-threads", "1", "--log-level", "warning"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningServer:
    process: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


def start_server(log_dir: Path, *flags: str, env: dict[str, str] | None = None) -> RunningServer:
    port = _free_port()
    log_path = log_dir / f"server-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "sglang_spec_harness.micro.server", "--port", str(port), *flags],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    server = RunningServer(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log()}")
        try:
            if get(f"{server.url}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.terminate()
    raise RuntimeError(f"server did not become healthy:\n{server.log()}")


def generate(url: str, payload: dict, timeout: float = 120) -> httpx.Response:
    """POST /generate."""
    return post(f"{url}/generate", json=payload, timeout=timeout)


def greedy(max_new_tokens: int, **more: object) -> dict:
    """Greedy sampling parameters for exactly `max_new_tokens` tokens."""
    return {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True, **more}
