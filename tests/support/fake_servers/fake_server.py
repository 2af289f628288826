#!/usr/bin/env python3
"""A misbehaving stand-in for a server, used as a variant's `python` in failure tests.

It is called like an interpreter (`fake_server.py -m sglang_spec_harness.micro.server --host H --port P ...`)
and behaves as $FAKE_SERVER_MODE says:
  unhealthy      listens, but GET /health answers 503 forever
  broken_stream  healthy; /generate sends one chunk, then drops the connection mid-body
  term_signals_parent  serves /generate properly (4 tokens); on SIGTERM it sends
                 $FAKE_SERVER_PARENT_SIGNAL (default SIGTERM) to its parent, the harness, then takes
                 a second to exit: a signal that reaches the harness while it stops a server
Standard library only, so any python3 runs it.
"""

import http.server
import json
import os
import signal
import sys
import time


def arg(name: str, default: str) -> str:
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else default


MODE = os.environ.get("FAKE_SERVER_MODE", "unhealthy")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:
        sys.stdout.write(f"fake_server: {fmt % args}\n")
        sys.stdout.flush()

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(503 if MODE == "unhealthy" else 200, b"")
        elif self.path == "/server_info":
            self._send(200, json.dumps({"fake": MODE}).encode())
        else:
            self._send(404, b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        if self.path == "/flush_cache":
            self._send(200, b"ok")
            return
        if self.path != "/generate":
            self._send(404, b"")
            return
        if MODE == "term_signals_parent":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for n in range(1, 5):
                meta = {"completion_tokens": n, "prompt_tokens": 4, "spec_verify_ct": n,
                        "finish_reason": {"type": "length", "length": 4} if n == 4 else None}
                self.wfile.write(b"data: " + json.dumps({"output_ids": list(range(5, 5 + n)), "meta_info": meta}).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(0.01)
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True
            return
        chunk = b'data: {"output_ids": [5], "meta_info": {"completion_tokens": 1}}\n\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", "100000")  # promises more than it sends
        self.end_headers()
        self.wfile.write(chunk)
        self.wfile.flush()
        self.close_connection = True


if __name__ == "__main__":
    if sys.argv[1:2] == ["-c"]:  # asked to run code, as the harness's environment probe does: be Python
        exec(compile(sys.argv[2], "<string>", "exec"))
        sys.exit(0)
    if MODE == "term_signals_parent":

        def on_term(signum, frame):
            print("fake_server: SIGTERM; signalling the parent", flush=True)
            os.kill(os.getppid(), getattr(signal, os.environ.get("FAKE_SERVER_PARENT_SIGNAL", "SIGTERM")))
            time.sleep(1.0)
            print("fake_server: exiting", flush=True)
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)
    server = http.server.ThreadingHTTPServer((arg("--host", "127.0.0.1"), int(arg("--port", "0"))), Handler)
    print(f"fake_server: mode {MODE} on port {server.server_address[1]}", flush=True)
    server.serve_forever()
