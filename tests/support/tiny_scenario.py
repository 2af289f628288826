"""A tiny micro-engine scenario for whole `harness run`s (seconds on a CPU), and the fake server
(tests/support/fake_servers/fake_server.py) that stands in for a server that misbehaves on demand
(FAKE_SERVER_MODE)."""

from __future__ import annotations

from pathlib import Path

import yaml

FAKE_SERVER = Path(__file__).parent / "fake_servers" / "fake_server.py"
TINY_SERVER_ARGS = {
    "--speculative-num-steps": 3,
    "--speculative-eagle-topk": 1,
    "--vocab-size": 512,
    "--hidden-size": 32,
    "--device": "cpu",
    "--num-threads": 1,
}
NUM_REQUESTS, OUTPUT_LEN, WARMUP = 4, 16, 1


def write_scenario(directory: Path, name: str = "tiny", *, baseline: dict | None = None, candidate: dict | None = None,
                   workload: dict | None = None, trials: dict | None = None, server: dict | None = None) -> Path:
    data = {
        "name": name,
        "engine": "micro",
        "server": {"args": dict(TINY_SERVER_ARGS), "startup_timeout_s": 60, "request_timeout_s": 60, **(server or {})},
        "variants": {
            "baseline": baseline if baseline is not None else {"args": {"--disable-topk1-fast-path": True}},
            "candidate": candidate if candidate is not None else {},
        },
        "workload": {"num_requests": NUM_REQUESTS, "input_len": 16, "output_len": OUTPUT_LEN, "concurrency": 2,
                     "warmup_requests": WARMUP, **(workload or {})},
        # a fixed order: the tests name the trial directories they expect
        "trials": {"repetitions": 1, "profiled": 1, "order": "abba", **(trials or {})},
        "profile": {"num_steps": 6, "activities": ["CPU"]},
        "rules": [
            {"name": "no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
             "variants": ["candidate"], "equals": 0},
            {"name": "same_outputs", "kind": "output_identity"},
        ],
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
