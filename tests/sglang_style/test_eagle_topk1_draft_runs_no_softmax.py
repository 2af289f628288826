"""SGLang's EAGLE topk-1 draft runs no softmax: the real server profiled by `sglang_spec_harness.testing`.

Written as SGLang's own EAGLE tests are (test/registered/spec/eagle/test_eagle_infer_beta.py): a
CustomTestCase launches the server with `popen_launch_server` in setUpClass and kills it in
tearDownClass, and the file runs as `python3 FILE` in SGLang's environment with the harness
installed beside it.

Here on a CPU: SGLang 0.5.23's CPU engine with the tiny models of `make sglang-cpu`
(scenarios/sglang_cpu_tiny_eagle_topk1.yaml's flags; SGLANG_CPU_MODELS says where the models are),
the CPU shims and environment that scenario gives its servers set by whoever runs the file
(tests/test_testing_sglang_cpu.py). With the harness's baseline patch in that environment
(HARNESS_PATCHES=...sglang_restore_topk1_softmax) the softmax is back in the draft and the test
fails, saying what it found. On a GPU, profile with activities ["CPU", "GPU"]: each CUDA graph
replay is then the unit.
"""

import os
import unittest

from sglang.srt.utils import kill_process_tree
from sglang.test.test_utils import (
    DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
    DEFAULT_URL_FOR_TEST,
    CustomTestCase,
    popen_launch_server,
)

from sglang_spec_harness.testing import assert_eager_kernel, assert_no_kernel, assert_replays, profile_server

MODELS = os.environ.get("SGLANG_CPU_MODELS", ".sglang-cpu/models")
SPEC_STEPS = 5
# Four prompts of token ids (the tiny tokenizer knows only `tN` words), 48 tokens each: enough
# cycles for 8 profiled steps.
PROMPTS = [[1000 + 100 * i + j for j in range(16)] for i in range(4)]


class TestEagleTopk1DraftRunsNoSoftmax(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.base_url = DEFAULT_URL_FOR_TEST
        cls.process = popen_launch_server(
            f"{MODELS}/target",
            cls.base_url,
            timeout=DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
            device="cpu",
            other_args=[
                "--speculative-algorithm", "EAGLE",
                "--speculative-draft-model-path", f"{MODELS}/draft",
                "--speculative-num-steps", SPEC_STEPS,
                "--speculative-eagle-topk", 1,
                "--speculative-num-draft-tokens", 6,
                "--device", "cpu",
                "--attention-backend", "intel_amx",
                "--cuda-graph-backend-decode", "disabled",
                "--cuda-graph-backend-prefill", "disabled",
                "--sampling-backend", "pytorch",
                "--grammar-backend", "none",
                "--mem-fraction-static", 0.5,
                "--max-total-tokens", 8192,
                "--max-running-requests", 8,
                "--sleep-on-idle",
            ],
        )

    @classmethod
    def tearDownClass(cls):
        kill_process_tree(cls.process.pid)

    def test_no_softmax_in_the_draft(self):
        profile = profile_server(self.base_url, num_steps=8, activities=["CPU"], prompts=PROMPTS, max_new_tokens=48)
        # the controls: the draft ran while profiled, and the analysis sees the softmax where it
        # stays (the draft extend after a prefill keeps it in every variant)
        assert_replays(profile, "DRAFT_DECODE")
        assert_eager_kernel(profile, "softmax", region="PREFILL")
        assert_no_kernel(profile, "softmax", region="DRAFT_DECODE")
        assert_no_kernel(profile, "softmax", region="DRAFT_EXTEND")
        # it selects with the argmax instead, once per draft step after the first
        self.assertEqual(set(profile.count(r"^aten::argmax$", region="DRAFT_DECODE")), {SPEC_STEPS - 1})


if __name__ == "__main__":
    unittest.main()
