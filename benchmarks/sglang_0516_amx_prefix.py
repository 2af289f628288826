"""The release sweep's output change at SGLang 0.5.16-0.5.18, pinned to its cause on this CPU: 0.5.16 as
released against 0.5.23, and 0.5.16 without the two statements that SGLang's own fix deletes, against
0.5.23, each judged by the harness's greedy-output rule.

    flock /work/notes/real-sglang.lock .venv/bin/python benchmarks/sglang_0516_amx_prefix.py \
        --out benchmarks/sglang_0516_amx_prefix.json

The fix is SGLang PR #36430 ("[CPU] Fix truncated KV prefix in intel_amx spec verify", commit
058f99c561, in 0.5.19): in `intel_amx_backend.py` `forward_extend` and `forward_decode` each
overwrite the `seq_lens` the backend prepared (the committed length plus the draft tokens in target
verify, plus the step in each draft step) with `forward_batch.seq_lens` (the committed length only),
so verify attends over a prefix short by the number of draft tokens: the planted
`verify_prefix_short_draft_tokens` mutation, shipped. Both arms run the release sweep's scenario with
only its output rule; the baseline is the installed 0.5.23 without the softmax patch. Needs
`make sglang-cpu` and the 0.5.16 environment (a sweep that reached it, or `make sglang-cpu-releases`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from figures import harness, project_relative  # benchmarks/ is sys.path[0]

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_spec_harness.points.scenario_at import at_release  # noqa: E402
from sglang_spec_harness.scenario import Scenario, load_scenario, scenario_to_yaml  # noqa: E402
from sglang_spec_harness.sglang_cpu.releases import SglangCpuReleases  # noqa: E402

SCENARIO = REPO / "scenarios" / "sglang_cpu_release_sweep.yaml"
RELEASE, REFERENCE = "0.5.16", "0.5.23"
FILE = "sglang/srt/layers/attention/intel_amx_backend.py"
# The statement PR #36430 deletes, and the line it follows in forward_extend and in forward_decode.
STALE = "seq_lens = forward_batch.seq_lens"
ANCHORS = ("_, max_extend_len = self.forward_metadata", "q = q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)")
SHIMS = "sglang_spec_harness.sglang_cpu.shims"


def fixed_copy(source: Path, dest: Path) -> str:
    """`source` (the release's package folder) copied to `dest` without the two statements; the diff."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    lines = (dest / FILE).read_text().splitlines(keepends=True)
    drop = []
    for anchor in ANCHORS:
        hits = [i for i, line in enumerate(lines) if line.strip() == anchor]
        if len(hits) != 1 or lines[hits[0] + 1].strip() != STALE:
            sys.exit(f"{source / FILE}: expected one line `{anchor}` followed by `{STALE}`, found {len(hits)} "
                     "(not the 0.5.16-0.5.18 code)")
        drop.append(hits[0] + 1)
    fixed = [line for i, line in enumerate(lines) if i not in drop]
    (dest / FILE).write_text("".join(fixed))
    return "".join(difflib.unified_diff(lines, fixed, f"{RELEASE}:{FILE}", f"{RELEASE} without the statements:{FILE}"))


def one_run(base: Scenario, label: str, release_dirs: list[str], environment, work: Path) -> dict:
    scenario = at_release(base, "candidate", environment)
    candidate = scenario.variants["candidate"]
    variants = {
        "baseline": scenario.variants["baseline"].model_copy(update={
            "patches": [SHIMS], "sglang_version": REFERENCE,
            "description": f"SGLang {REFERENCE} as installed (no softmax patch)"}),
        "candidate": candidate.model_copy(update={
            # the release's own source is the first entry (at_release); its dependencies stay
            "pythonpath": [*release_dirs, *candidate.pythonpath[1:]],
            "sglang_version": RELEASE, "description": f"SGLang {RELEASE}: {label.replace('_', ' ')}"}),
    }
    scenario = scenario.model_copy(update={
        "name": f"sglang_{RELEASE.replace('.', '')}_{label}", "variants": variants,
        "server": scenario.server.model_copy(update={"sglang_version": None}),
        "rules": [r for r in scenario.rules if r.kind == "output_identity"]})
    path = work / f"{label}.yaml"
    path.write_text(scenario_to_yaml(scenario))
    code, wall = harness("run", str(path), "--only", "exact", "--out", str(work / label), "--no-progress",
                         log=work / f"{label}.log")
    run_dir = max((p for p in (work / label).iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.name)
    results = json.loads((run_dir / "results.json").read_text())
    (rule,) = [r for r in results["rules"] if r["kind"] == "output_identity"]
    accept = {}
    for trial in sorted(run_dir.glob("trials/*-profiled/trial.json")):
        data = json.loads(trial.read_text())
        accept[data["variant"]] = data["summary"]["accept_length"]
    print(f"{label}: {rule['verdict']}: {rule['reason']}; accept length {accept}", flush=True)
    return {"exit_code": code, "wall_s": wall, "verdict": rule["verdict"], "reason": rule["reason"],
            "identical": rule["numbers"].get("identical"), "compared": rule["numbers"].get("compared"),
            "first_difference": rule["numbers"].get("first_difference"), "accept_length": accept,
            "candidate_pythonpath": variants["candidate"].pythonpath, "run_dir": str(run_dir)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "sglang_0516_amx_prefix.json")
    parser.add_argument("--work", type=Path, default=REPO / "reports" / "sglang-0516-amx-prefix")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    base = load_scenario(SCENARIO)
    environment = SglangCpuReleases(base.variants["candidate"].python).prepare(RELEASE)
    released = Path(environment.pythonpath[0])
    diff = fixed_copy(released, work / "sglang-fixed")
    runs = {"as_released": one_run(base, "as_released", [str(released)], environment, work),
            "without_the_statements": one_run(base, "without_the_statements", [str(work / "sglang-fixed")],
                                              environment, work)}
    record = {
        "what": f"SGLang {RELEASE} against {REFERENCE} on the release sweep's scenario (greedy outputs, 8 requests of "
                f"96 tokens), as released and without the two statements SGLang PR #36430 deletes; produced by "
                "benchmarks/sglang_0516_amx_prefix.py",
        "upstream_fix": {"pr": "https://github.com/sgl-project/sglang/pull/36430", "commit": "058f99c561",
                         "title": "[CPU] Fix truncated KV prefix in intel_amx spec verify", "first_release": "0.5.19"},
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "diff": diff, "runs": runs,
    }
    args.out.write_text(project_relative(json.dumps(record, indent=2), (work, "<work>")) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
