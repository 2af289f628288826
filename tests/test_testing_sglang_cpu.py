"""The `sglang_profile` fixture against the real SGLang 0.5.23 server on this CPU, in the shape of
SGLang's own EAGLE tests (test/srt/test_eagle_infer*.py): a unittest class launches the server in
setUpClass (as their `popen_launch_server` does) and its tests profile it by URL.

The server is scenarios/sglang_cpu_tiny_eagle_topk1.yaml's (flags, environment, CPU shims): the
candidate as installed (argmax in the draft) and the baseline with the harness's patch that restores
the softmax. The fixture comes from the harness's pytest11 entry point, as in any suite that installed
the harness: nothing here imports the plugin. Marked `real_sglang`: skipped without `make sglang-cpu`
(failed where HARNESS_REQUIRE_SGLANG_CPU is set), one server at a time.
"""

from __future__ import annotations

import os
import tempfile
import unittest
from pathlib import Path

import pytest

from sglang_spec_harness.engines import build_server_command
from sglang_spec_harness.run.server import LOOPBACK, ServerProcess, free_port
from sglang_spec_harness.run.workload import synthetic_prompt_ids
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.sglang_cpu.base import is_current
from sglang_spec_harness.testing import assert_kernel, assert_no_kernel

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "sglang_cpu_tiny_eagle_topk1.yaml"
INSTALL = REPO / ".sglang-cpu"
REQUIRED_ENV = "HARNESS_REQUIRE_SGLANG_CPU"
STEPS = 5  # --speculative-num-steps of the scenario: draft_forward selects STEPS - 1 times per span
VOCAB = 128256  # the tiny models' (Llama-3's) vocabulary
# Four prompts of token ids at once (the tiny tokenizer knows only `tN` words), 48 tokens each:
# enough cycles for the 8 profiled steps (SGLang writes a CPU trace with stacks slowly: minutes on a busy VM).
PROMPTS = [synthetic_prompt_ids(0, i, 16, VOCAB) for i in range(4)]
PROFILE = {"num_steps": 8, "prompts": PROMPTS, "max_new_tokens": 48, "activities": ["CPU"]}
STARTUP_TIMEOUT_S = 600


def popen_launch_server(variant: str, base_url: str, *, timeout: float, log_dir: Path) -> ServerProcess:
    """The scenario's server for `variant` at `base_url`, healthy (SGLang's test helper of that name,
    with the harness's server process: stopped with its whole process group)."""
    scenario = load_scenario(SCENARIO)
    port = int(base_url.rsplit(":", 1)[1])
    command = build_server_command(scenario, variant, host=LOOPBACK, port=port, profile_dir=log_dir / "profile")
    process = ServerProcess(command, log_path=log_dir / "server.log", port=port, startup_timeout_s=timeout)
    return process.__enter__()


class _EagleServer(unittest.TestCase):
    variant: str

    @classmethod
    def setUpClass(cls) -> None:
        if not is_current(INSTALL):
            why = f"{INSTALL} is missing or out of date: run `make sglang-cpu`"
            if os.environ.get(REQUIRED_ENV):
                pytest.fail(why)
            raise unittest.SkipTest(why)
        cls.log_dir = Path(tempfile.mkdtemp(prefix=f"sglang-{cls.variant}-"))
        cls.base_url = f"http://{LOOPBACK}:{free_port()}"
        cls.process = popen_launch_server(cls.variant, cls.base_url, timeout=STARTUP_TIMEOUT_S, log_dir=cls.log_dir)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.process.stop()

    @pytest.fixture(autouse=True)
    def _profiler(self, sglang_profile):
        # unittest methods take no fixtures: the plugin's fixture handed to the test as an attribute
        self.profile_server = sglang_profile


@pytest.mark.real_sglang
@pytest.mark.timeout(STARTUP_TIMEOUT_S + 300)
class TestEagleTopk1DraftRunsNoSoftmax(_EagleServer):
    variant = "candidate"

    def test_no_softmax_in_any_draft_span(self):
        profile = self.profile_server(self.base_url, **PROFILE)
        self.assertEqual(profile.unit, "span")  # a CPU trace: each region span is one "replay"
        decode = assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")
        self.assertGreater(decode.replays, 0)
        assert_no_kernel(profile, "softmax", region="DRAFT_EXTEND")
        # and it selects with the argmax instead, once per draft step after the first
        self.assertEqual(set(profile.count(r"^aten::argmax$", region="DRAFT_DECODE")), {STEPS - 1})
        self.assertEqual(set(profile.count(r"^aten::argmax$", region="DRAFT_EXTEND")), {1})


@pytest.mark.real_sglang
@pytest.mark.timeout(STARTUP_TIMEOUT_S + 300)
class TestBaselineDraftRunsTheSoftmax(_EagleServer):
    """The control: with the softmax restored, the same profile sees it in every draft span."""

    variant = "baseline"

    def test_softmax_in_every_draft_span(self):
        profile = self.profile_server(self.base_url, **PROFILE)
        assert_kernel(profile, "softmax", region="DRAFT_DECODE", at_least=STEPS - 1)
        self.assertEqual(set(profile.count("softmax", region="DRAFT_DECODE")), {STEPS - 1})
        self.assertEqual(set(profile.count("softmax", region="DRAFT_EXTEND")), {1})
        with self.assertRaises(AssertionError) as failed:
            assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")
        self.assertIn(f"in DRAFT_DECODE ({len(profile.count('softmax', region='DRAFT_DECODE'))} spans): expected none, "
                      f"found {STEPS - 1} per replay", str(failed.exception))
