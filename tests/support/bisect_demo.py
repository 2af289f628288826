"""A git repository whose commits plant a regression in the micro engine, for `harness bisect` and
`harness sweep` over revisions (tests/test_bisect.py, tests/test_sweep.py).

The repository's commits carry `python/bisect_demo_patch.py`, which the candidate imports through
`pythonpath:` and `patches:`: CLEAN changes nothing, SOFTMAX_BACK makes the micro server select draft
tokens without the fast path (the softmax is back in the draft), BROKEN does not import (the server
cannot start), SLOWER makes every draft-decode cycle 20 ms slower (a timing change, no kernel moves).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml
from support.proc_helpers import group_gone, process_gone

CLEAN = '"""bisect demo patch, revision {i}: changes nothing."""\nREVISION = {i}\n'
SOFTMAX_BACK = '''"""bisect demo patch, revision {i}: selects draft tokens without the topk==1 fast path."""
import sglang_spec_harness.micro.engine as _engine
import sglang_spec_harness.micro.model as _model

REVISION = {i}
_select = _model.select_draft_tokens


def _softmax_always(logits, topk, fast_path):
    return _select(logits, topk, False)


_engine.select_draft_tokens = _softmax_always
'''
BROKEN = '"""bisect demo patch, revision {i}: does not import."""\nraise ImportError("revision {i} is broken")\n'
SLOWER = '''"""bisect demo patch, revision {i}: every draft-decode cycle 20 ms slower (a busy wait)."""
import time

import sglang_spec_harness.micro.engine as _engine

REVISION = {i}


def _twenty_ms(self):
    end = time.perf_counter_ns() + 20_000_000
    while time.perf_counter_ns() < end:
        pass


_engine.MicroEngine._inject_delay = _twenty_ms
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit_revision(repo: Path, i: int, date: str) -> str:
    """Everything in the work tree as commit `revision i`, authored and committed at `date` (fixed
    dates: the same hashes on every run); its hash."""
    (repo / "README").write_text(f"revision {i}\n")
    git(repo, "add", "-A")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=Dev", "-c", "user.email=dev@example.com",
                    "commit", "-q", "-m", f"revision {i}"], check=True,
                   env={**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return git(repo, "rev-parse", "HEAD").strip()


def make_repo(root: Path, modules: list[str]) -> tuple[Path, list[str]]:
    """One commit per module text; returns the repository and the commit hashes, oldest first."""
    repo = root / "src"
    (repo / "python").mkdir(parents=True)
    git(repo, "init", "-q")
    hashes = []
    for i, text in enumerate(modules):
        (repo / "python" / "bisect_demo_patch.py").write_text(text.format(i=i))
        hashes.append(commit_revision(repo, i, f"2025-01-{i + 1:02d}T12:00:00+00:00"))
    return repo, hashes


def scenario_data(repo: Path, trials: dict | None = None, **candidate) -> dict:
    """The micro engine's scenario whose candidate runs the repository's `python/` with `candidate`'s fields."""
    return {
        "name": "tiny_bisect",
        "engine": "micro",
        "server": {"args": {"--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--vocab-size": 512,
                            "--hidden-size": 32, "--device": "cpu", "--num-threads": 1},
                   "startup_timeout_s": 60, "request_timeout_s": 60},
        "variants": {
            "baseline": {"args": {"--disable-topk1-fast-path": True}},
            "candidate": {"pythonpath": [str(repo / "python")], "patches": ["bisect_demo_patch"], **candidate},
        },
        "workload": {"num_requests": 2, "input_len": 16, "output_len": 16, "concurrency": 2, "warmup_requests": 1},
        "trials": trials or {"repetitions": 6, "profiled": 1},
        "profile": {"num_steps": 6, "activities": ["CPU"]},
        "rules": [
            {"name": "no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
             "variants": ["candidate"], "equals": 0},
            {"name": "same_outputs", "kind": "output_identity"},
            {"name": "baseline_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
             "variants": ["baseline"], "at_least": 1},
            {"name": "faster", "kind": "tpot_gain", "min_gain": 0.01},
        ],
    }


def write_scenario(root: Path, repo: Path, trials: dict | None = None, **candidate) -> Path:
    data = scenario_data(repo, trials, **candidate)
    path = root / "tiny_bisect.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def server_pids(out: Path) -> list[int]:
    # adopted trials are hard-linked copies: count each file once
    records = {(p.stat().st_dev, p.stat().st_ino): p for p in out.rglob("trial.json")}.values()
    return [pid for p in records if (pid := json.loads(p.read_text()).get("server_pid"))]


def same_file(a: Path, b: Path) -> bool:
    return a.stat().st_ino == b.stat().st_ino and a.stat().st_dev == b.stat().st_dev


def worktrees_used(out: Path) -> set[Path]:
    """The worktrees the step servers ran from (their PYTHONPATH, on the first line of server.log: a
    trial's in restart mode, a launch's in the warm modes)."""
    paths = set()
    logs = [*out.glob("*/steps/*/trials/*-candidate-profiled/server.log"), *out.glob("*/steps/*/launches/*-candidate-*/server.log")]
    for log in logs:
        first = log.read_text().splitlines()[0]
        entry = first.split("PYTHONPATH=", 1)[1].split(":", 1)[0]
        paths.add(Path(entry).parent)
    return paths


def assert_nothing_left(repo: Path, out: Path) -> None:
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1, git(repo, "worktree", "list")
    assert git(repo, "status", "--porcelain") == "" and not git(repo, "for-each-ref", "refs/bisect")
    used = worktrees_used(out)
    assert used and not any(p.exists() for p in used) and not any(p.parent.exists() for p in used)
    pids = server_pids(out)
    assert pids and all(process_gone(pid) and group_gone(pid) for pid in pids)
