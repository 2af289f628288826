"""EAGLE with --speculative-eagle-topk 1 selects draft tokens without a full-vocabulary softmax
(SGLang PR #26235), seen in the server's own profile: the draft spans run an argmax and no softmax.

Written as SGLang's registered tests are (test/registered/spec/eagle/test_eagle_infer_beta.py):
a CustomTestCase whose setUpClass starts the server with popen_launch_server, run as `python3 FILE`.
This copy is the harness's (.ci/run puts it in a local repository in SGLang's layout) and runs on a
CPU: SGLang's real server with tiny local models and the harness's CPU shims (their environment comes
from the harness's CPU scenario). On a GPU the same test takes a real model and no shims.

SPEC_HARNESS_VARIANT=baseline starts the server with the harness's patch that restores the softmax:
the test must then fail, which is how .ci/run shows that it can.

Written against the harness's API of today (sglang_spec_harness.testing.profile_server, and the
server environment from sglang_spec_harness.engines.variant_environment); helper i41-testing is making
`sglang_spec_harness.testing` work in this style, and this file moves to that once it lands.
"""

import os
import tempfile
import unittest
from pathlib import Path

# On a CPU only, before SGLang loads: the harness's shims (PyPI's torchvision is a CUDA build, and no
# CPU build of sgl-kernel exists). A GPU runner needs neither, and this test drops the line there.
import sglang_spec_harness.sglang_cpu.shims  # noqa: F401
from sglang.srt.utils import kill_process_tree
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import (
    DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
    DEFAULT_URL_FOR_TEST,
    CustomTestCase,
    popen_launch_server,
)

from sglang_spec_harness.engines import variant_environment
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.shipped import scenario_path
from sglang_spec_harness.testing import assert_kernel, assert_no_kernel, profile_server

register_cpu_ci(est_time=300, suite="stage-a-test-cpu")

SCENARIO = load_scenario(scenario_path("sglang_cpu_tiny_eagle_topk1"))
VARIANT = os.environ.get("SPEC_HARNESS_VARIANT", "candidate")
STEPS = 5


def cpu_model(path: str) -> str:
    """The scenario's model paths are relative to the scenario file."""
    return str((scenario_path("sglang_cpu_tiny_eagle_topk1").parent / path).resolve())


class TestEagleTopk1DraftKernels(CustomTestCase):
    model = cpu_model(SCENARIO.server.model_path)
    draft_model = cpu_model(SCENARIO.server.draft_model_path)

    @classmethod
    def setUpClass(cls):
        cls.base_url = DEFAULT_URL_FOR_TEST
        cls.profile_dir = Path(tempfile.mkdtemp(prefix="sglang-profile-"))
        other_args = [
            "--speculative-algorithm", "EAGLE",
            "--speculative-draft-model-path", cls.draft_model,
            "--speculative-num-steps", STEPS,
            "--speculative-eagle-topk", 1,
            "--speculative-num-draft-tokens", STEPS + 1,
            "--device", "cpu",
            "--attention-backend", "intel_amx",
            "--cuda-graph-backend-decode", "disabled",
            "--cuda-graph-backend-prefill", "disabled",
            "--sampling-backend", "pytorch",
            "--grammar-backend", "none",
            "--mem-fraction-static", "0.5",
            "--max-total-tokens", "8192",
            "--max-running-requests", "8",
        ]
        cls.process = popen_launch_server(
            cls.model,
            cls.base_url,
            timeout=DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
            other_args=other_args,
            env=variant_environment(SCENARIO, VARIANT, profile_dir=cls.profile_dir),
            device="cpu",
        )

    @classmethod
    def tearDownClass(cls):
        kill_process_tree(cls.process.pid)

    def test_draft_selects_without_softmax(self):
        profile = profile_server(
            self.base_url,
            num_steps=8,
            prompts=[[100 + 7 * i + j for j in range(16)] for i in range(4)],
            max_new_tokens=48,
            activities=["CPU"],
            output_dir=self.profile_dir / "trace",
        )
        decode = assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")
        self.assertGreater(decode.replays, 0)
        assert_no_kernel(profile, "softmax", region="DRAFT_EXTEND")
        # the control: the same profile sees the argmax that replaced it, once per draft step after the first
        assert_kernel(profile, r"^aten::argmax$", region="DRAFT_DECODE", at_least=STEPS - 1)


if __name__ == "__main__":
    unittest.main()
