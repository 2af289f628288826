"""What the GPU scripts (gpu_record_micro_traces.sh, gpu_checks.sh) need to drive micro-engine servers
by hand: a free port, a wait for /health that notices a dead server, a greedy /generate."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, name: str, timeout_s: float, hint: str = "") -> None:
    """Until GET /health answers 200; exits the script (one line) if the server dies or never answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            sys.exit(f"server {name} exited {proc.returncode}{hint}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"server {name} not healthy after {timeout_s:.0f} s{hint}")
        time.sleep(0.5)


def generate(url: str, text: str, tokens: int) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}
    response = httpx.post(f"{url}/generate", json=body, timeout=300)
    response.raise_for_status()
    return response.json()
