"""The baseline patch on every SGLang release of a range, on this CPU: applied or refused, and why;
then, where it applies, whether the baseline really shows the softmax in the draft.

    flock /work/notes/real-sglang.lock .venv/bin/python benchmarks/baseline_patch_releases.py \
        --releases 0.5.13..0.5.23 --out benchmarks/baseline_patch_releases.json

Needs `make sglang-cpu` (the base environment); each release's own is built on first use and cached
under .sglang-cpu/releases/ (sglang_spec_harness.sglang_cpu.releases), as a sweep builds it. It starts
real servers: on a shared machine run it under the lock, as above. Per release:

1. the draft code's shape as `harness run` reads it before any server starts (the variant's SGLang
   files: sglang_spec_harness.patches.draft_shape; environment.json's `draft_shape`);
2. the import: the release's worker module imported in the release's environment with the patch
   active, exactly as a server process gets it (the bootstrap, the CPU shims, then the patch), no
   server: exit 0 and the `harness patch applied:` line, or exit 70 and the `harness patch failed:`
   line;
3. from the same files, what each method's guards let run on CUDA, ROCm and a CPU (not run here: what
   the patch would rewrite there, or refuse where a method has nothing left);
4. where it applied (unless --no-server): one run of scenarios/sglang_cpu_release_sweep.yaml with both
   variants at the release (baseline: the release + the patch; candidate: the release as shipped),
   one launch per arm, only the profiled passes: the softmax and argmax per replay in DRAFT_DECODE
   and DRAFT_EXTEND of each arm, and the verdicts of the kernel rules, the control
   `baseline_has_softmax_*` among them.

Everything comes from the patch's own lines and the runs' own analysis.json and results.json: nothing
here knows what the answer should be.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from sglang_spec_harness.engines import variant_environment
from sglang_spec_harness.engines.sglang_versions import RESTORE_TOPK1_SOFTMAX_PATCH
from sglang_spec_harness.patches.draft_shape import HarnessPatchError, reached, recognise_source
from sglang_spec_harness.releases.versions import registry_releases, releases_in_range
from sglang_spec_harness.run.environment import draft_shape_facts, probe_interpreter
from sglang_spec_harness.run.execute import run_scenario
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.scenario import load_scenario, scenario_to_yaml
from sglang_spec_harness.sglang_cpu.releases import SglangCpuReleases

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "sglang_cpu_release_sweep.yaml"
REGIONS = ("DRAFT_DECODE", "DRAFT_EXTEND")
PATTERNS = ("softmax", "argmax")
IMPORT_TIMEOUT_S = 600
# The worker module's platform flags on each kind of machine, for what its guards say (not run here).
PLATFORM_FLAGS = {"cuda": {"_is_cuda": True, "_is_hip": False}, "rocm": {"_is_cuda": False, "_is_hip": True},
                  "cpu": {"_is_cuda": False, "_is_hip": False}}
# The import as a server's scheduler does it; prints whether the module carries the patch's marker.
IMPORT_CODE = ("import json, sglang.srt.speculative.eagle_worker_v2 as m\n"
               "print('HARNESS_IMPORT ' + json.dumps({'marked': getattr(m, '__harness_patch__', None)}))\n")


class NotesProgress(RunProgress):
    """The run's notes (launches, waits), indented under the release's lines."""

    def note(self, text: str) -> None:
        print(f"    {text}", flush=True)


def release_scenario(release: str, environment: Any, work: Path) -> Path:
    """The release-sweep scenario with both variants at `release` (its interpreter, source first on
    PYTHONPATH, the env and flags it needs here), one launch per arm, and a control rule for the
    draft extend beside the scenario's draft-decode one."""
    data = yaml.safe_load(scenario_to_yaml(load_scenario(SCENARIO)))
    data["name"] = f"baseline_patch_{release.replace('.', '_')}"
    data["server"]["sglang_version"] = release
    for variant in data["variants"].values():
        variant["python"] = environment.python
        variant["pythonpath"] = [*environment.pythonpath, *variant.get("pythonpath", [])]
        variant["env"] = {**variant.get("env", {}), **environment.env}
        variant["args"] = {**variant.get("args", {}), **environment.args}
    data["trials"].update(launches=1, repetitions=1)
    rules_key = "rules" if "rules" in data else "checks"
    if not any(r["name"] == "baseline_has_softmax_draft_extend" for r in data[rules_key]):
        data[rules_key].append({"name": "baseline_has_softmax_draft_extend", "kind": "kernel_count",
                                "region": "DRAFT_EXTEND", "pattern": "softmax", "variants": ["baseline"],
                                "per": "replay", "at_least": 1})
    path = work / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def selections_by_platform(sglang_dir: Path) -> dict[str, str]:
    """Per platform, the selections each method's guards let run (what the patch would rewrite or
    rebind there); `none` where a method has none, which the patch refuses. From the code, not run."""
    try:
        shape = recognise_source(sglang_dir)
    except HarnessPatchError as exc:
        return {platform: f"refused: {exc}" for platform in PLATFORM_FLAGS}
    return {platform: " | ".join(
        f"{m.name}: {' + '.join(s.kind for s in m.selections if reached(s, flags)[0] is not False) or 'none'}"
        for m in shape.methods) for platform, flags in PLATFORM_FLAGS.items()}


def import_with_patch(scenario_path: Path) -> dict[str, Any]:
    """The release's worker module imported with the baseline's environment (bootstrap, shims, patch)."""
    scenario = load_scenario(scenario_path)
    env = {**os.environ, **variant_environment(scenario, "baseline", profile_dir=Path(os.devnull)), "PYTHONNOUSERSITE": "1"}
    started = time.monotonic()
    proc = subprocess.run([scenario.variants["baseline"].python or sys.executable, "-c", IMPORT_CODE], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S, check=False)
    lines = proc.stderr.splitlines()
    applied = [line for line in lines if line.startswith("harness patch applied:")]
    failed = [line for line in lines if line.startswith("harness patch failed:")]
    marked = next((json.loads(line.split(" ", 1)[1])["marked"] for line in proc.stdout.splitlines()
                   if line.startswith("HARNESS_IMPORT ")), None)
    outcome = "applied" if proc.returncode == 0 and applied and marked else "refused" if failed else "error"
    return {"outcome": outcome, "exit_code": proc.returncode, "seconds": round(time.monotonic() - started, 1),
            "line": (applied or failed or [line for line in lines if line.strip()][-1:] or ["no output"])[0]}


def profiled_run(scenario_path: Path, work: Path) -> dict[str, Any]:
    """Both arms' profiled passes, one launch each; the counts per replay and the kernel rules' verdicts."""
    from sglang_spec_harness.verdict.judge import check_run_dir

    run_dir = work / "runs" / scenario_path.stem
    started = time.monotonic()
    run = run_scenario(load_scenario(scenario_path), scenario_path, run_dir=run_dir, progress=NotesProgress(),
                       select={("baseline", "profiled"), ("candidate", "profiled")})
    seconds = round(time.monotonic() - started, 1)
    out: dict[str, Any] = {"status": run.status, "seconds": seconds, "run_dir": str(run_dir)}
    if run.status != "complete":
        out["error"] = run.error
        return out
    results = check_run_dir(run_dir)
    out["rules"] = {r.name: str(r.verdict) for r in results.rules if r.kind == "kernel_count"}
    analysis = json.loads((run_dir / "analysis.json").read_text())
    out["per_replay"] = {}
    for trial, facts in analysis["trials"].items():
        arm = "baseline" if trial.endswith("-baseline-profiled") else "candidate"
        (files,) = facts["files"]
        out["per_replay"][arm] = {
            region: {pattern: _per_replay(files["regions"].get(region, {}).get("counts", {}).get(pattern))
                     for pattern in PATTERNS} for region in REGIONS}
    environment = json.loads((run_dir / "environment.json").read_text())
    out["draft_shape_in_environment_json"] = environment["variants"]["baseline"].get("draft_shape", {}).get("shape")
    applied = [line for p in sorted((run_dir / "launches").glob("*baseline*/server.log"))
               for line in p.read_text(errors="replace").splitlines() if line.startswith("harness patch applied:")]
    out["server_applied_lines"] = len(applied)
    return out


def _per_replay(row: dict[str, Any] | None) -> str | None:
    """`min` or `min-max` per replay, over how many replays; None where the region has no row."""
    if not row or not row.get("replays"):
        return None
    low, high = row["per_replay_min"], row["per_replay_max"]
    return f"{low if low == high else f'{low}-{high}'} ({row['replays']} replays)"


def measure(release: str, provider: SglangCpuReleases, work: Path, *, server: bool) -> dict[str, Any]:
    started = time.monotonic()
    environment = provider.prepare(release, progress=lambda line: print(f"  {line}", flush=True))
    scenario_path = release_scenario(release, environment, work)
    scenario = load_scenario(scenario_path)
    env = variant_environment(scenario, "baseline", profile_dir=Path(os.devnull))
    facts = probe_interpreter(environment.python, {"PYTHONPATH": env["PYTHONPATH"]})
    shape = draft_shape_facts(facts["sglang"]) if facts.get("sglang") else {"error": f"no sglang: {facts}"}
    record: dict[str, Any] = {"release": release, "environment_s": round(time.monotonic() - started, 1),
                              "sglang_path": (facts.get("sglang") or {}).get("path"), "draft_shape": shape}
    if facts.get("sglang"):
        record["by_platform_guards"] = selections_by_platform(Path(facts["sglang"]["path"]))
    print(f"{release}: shape {shape.get('shape') or shape.get('error')}", flush=True)
    record["import"] = import_with_patch(scenario_path)
    print(f"{release}: import {record['import']['outcome']} in {record['import']['seconds']} s: "
          f"{record['import']['line'][:300]}", flush=True)
    if server and record["import"]["outcome"] == "applied":
        record["run"] = profiled_run(scenario_path, work)
        print(f"{release}: run {record['run']['status']} in {record['run']['seconds']} s: "
              f"{record['run'].get('rules') or record['run'].get('error')}", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default="0.5.13..0.5.23", help="the range (default 0.5.13..0.5.23)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "baseline_patch_releases.json")
    parser.add_argument("--work", type=Path, default=REPO / "reports" / "baseline-patch-releases",
                        help="where the derived scenarios and the runs go (default: reports/baseline-patch-releases)")
    parser.add_argument("--no-server", action="store_true", help="only the shape and the import, no server run")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    releases = releases_in_range(args.releases, registry_releases())
    provider = SglangCpuReleases(str(REPO / ".sglang-cpu" / "venv" / "bin" / "python"))
    started = time.monotonic()
    record: dict[str, Any] = {
        "what": f"the baseline patch ({RESTORE_TOPK1_SOFTMAX_PATCH}) on every SGLang release of {args.releases} on "
                "this CPU; produced by benchmarks/baseline_patch_releases.py",
        "scenario": str(SCENARIO.relative_to(REPO)),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
        "harness_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                         check=False).stdout.strip() or None,
        "machine_shared": "other sessions' tests ran beside it; the import and run seconds are not timings",
        "releases": [],
    }
    for release in releases:
        print(f"{release}: preparing its environment", flush=True)
        record["releases"].append(measure(release, provider, args.work, server=not args.no_server))
        record["wall_s"] = round(time.monotonic() - started, 1)
        args.out.write_text(json.dumps(record, indent=2) + "\n")  # after each release: nothing measured is lost
    print(f"wrote {args.out} ({len(releases)} releases, {record.get('wall_s', 0):.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
