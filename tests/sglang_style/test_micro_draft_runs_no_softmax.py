"""The micro engine's EAGLE topk-1 draft runs no softmax, profiled through its HTTP API.

Written as SGLang's own EAGLE tests are (test/registered/spec/eagle/): a unittest class launches
the server in setUpClass and stops it in tearDownClass, a test method profiles it by URL with
`sglang_spec_harness.testing`, and the file runs as `python3 FILE` (no pytest). The harness's
micro engine stands in for SGLang's server here (its `/start_profile` and `/generate` are SGLang's);
tests/sglang_style/test_eagle_topk1_draft_runs_no_softmax.py is the same against the real server.

MICRO_SERVER_ARGS adds server flags: `--disable-topk1-fast-path` puts the softmax back in the draft,
and the test fails, saying what it found.
"""

import os
import shlex
import socket
import subprocess
import sys
import time
import unittest

import httpx

from sglang_spec_harness.testing import assert_eager_kernel, assert_no_kernel, assert_replays, profile_server

NUM_STEPS = 5  # profiled forward steps: a prefill, then one EAGLE cycle each (4 draft-decode spans)
SERVER_ARGS = ["--vocab-size", "8192", "--num-threads", "1", "--log-level", "warning"]


def free_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def popen_launch_micro_server(base_url, timeout, other_args=()):
    """The micro engine's server at `base_url`, once healthy (SGLang's `popen_launch_server`'s shape)."""
    port = base_url.rsplit(":", 1)[1]
    process = subprocess.Popen([sys.executable, "-m", "sglang_spec_harness.micro.server", "--port", port,
                                *other_args])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{base_url}/health_generate", timeout=5).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise TimeoutError(f"the server at {base_url} was not healthy within {timeout} s")


class TestMicroDraftRunsNoSoftmax(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base_url = free_url()
        extra = shlex.split(os.environ.get("MICRO_SERVER_ARGS", ""))
        cls.process = popen_launch_micro_server(cls.base_url, timeout=120, other_args=SERVER_ARGS + extra)

    @classmethod
    def tearDownClass(cls):
        cls.process.terminate()
        cls.process.wait(30)

    def test_no_softmax_in_the_draft(self):
        profile = profile_server(self.base_url, num_steps=NUM_STEPS, prompts=[[11, 12, 13, 14]], max_new_tokens=64)
        # the controls: the draft ran while profiled, and the analysis sees the softmax where it stays
        self.assertEqual(assert_replays(profile, "DRAFT_DECODE"), NUM_STEPS - 1)
        assert_eager_kernel(profile, "softmax", region="PREFILL")
        assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")
        assert_no_kernel(profile, "softmax", region="DRAFT_EXTEND")


if __name__ == "__main__":
    unittest.main()
