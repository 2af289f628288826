"""The mutation suite on the real SGLang 0.5.23 CPU server: every planted bug must end FAIL on an exact rule.

    make sglang-cpu
    .venv/bin/python benchmarks/mutations.py --out benchmarks/sglang_cpu_mutations.json
    .venv/bin/python benchmarks/mutations.py --designs context --mutations verify_prefix_short_1,draft_stale_hidden
    .venv/bin/python benchmarks/mutations.py --designs context --aa 10 --skip-mutations --out FILE   # A/A only
    .venv/bin/python benchmarks/mutations.py --rescore --out FILE   # judge the stored runs again

For each model design (`context`, the CPU scenarios' models; `bigram`, the models before 2026-12,
built on first use into .sglang-cpu/models-bigram), `scenarios/sglang_cpu_mutations.yaml` runs the
baseline arm once (SGLang as installed), then, per mutation (sglang_spec_harness.patches.sglang_mutations),
the candidate arm with that bug planted; the baseline's trials are adopted into every mutation's run
directory (as a sweep adopts them into its points), the scenario's rules are checked and the report
written. A mutation is caught when an exact rule FAILs. Per mutation the JSON keeps the rules that
failed, how many requests' greedy outputs changed, both arms' accept lengths and the shift, the
candidate's invalid-token fraction, and the run directory. `score` = caught / planted, per design.

Targets (issue 39): score 1.0 on the context models; an output-changing mutation changes at least
90% of the requests; an accept-length mutation moves accept length beyond the rule's margin.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_spec_harness.patches.sglang_mutations import MUTATIONS, MUTATION_ENV  # noqa: E402
from sglang_spec_harness.run.combine import adopt_trials  # noqa: E402
from sglang_spec_harness.run.execute import run_scenario  # noqa: E402
from sglang_spec_harness.run.plan import with_run_seed  # noqa: E402
from sglang_spec_harness.scenario import Scenario, load_scenario  # noqa: E402
from sglang_spec_harness.verdict.judge import check_run_dir  # noqa: E402

SCENARIO = ROOT / "scenarios" / "sglang_cpu_mutations.yaml"
SGLANG_CPU = ROOT / ".sglang-cpu"
MODELS = {"context": SGLANG_CPU / "models", "bigram": SGLANG_CPU / "models-bigram"}
OUTPUT_RULES = ("output_identity", "output_validity")


def ensure_models(design: str) -> Path:
    """The design's models: `make sglang-cpu` builds the context ones; the bigram ones are built here."""
    where = MODELS[design]
    manifest = where / "models.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("design", "bigram") == design:
        return where
    if design == "context":
        sys.exit(f"{where}: no context models; run `make sglang-cpu` first")
    python = SGLANG_CPU / "venv" / "bin" / "python"
    print(f"building the {design} models into {where} ...", flush=True)
    subprocess.run([str(python), "-m", "sglang_spec_harness.sglang_cpu.tiny_models", str(where), "--design", design],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return where


def scenario_for(design: str, overrides: list[str], mutation: str | None = None) -> Scenario:
    models = ensure_models(design)
    sets = [f"server.model_path={models / 'target'}", f"server.draft_model_path={models / 'draft'}", *overrides]
    if mutation is not None:
        sets.append(f"variants.candidate.env.{MUTATION_ENV}={mutation}")
    return load_scenario(SCENARIO, sets)


def _rules(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "results.json").read_text())["rules"]


def summarize(run_dir: Path, status: str) -> dict[str, Any]:
    rules = _rules(run_dir)
    by_kind = {rule["kind"]: rule for rule in rules}
    failed = [rule for rule in rules if rule["verdict"] == "FAIL"]
    outputs = by_kind.get("output_identity", {}).get("numbers", {})
    accept = by_kind.get("accept_length", {}).get("numbers", {})
    validity = by_kind.get("output_validity", {}).get("numbers", {})
    base = statistics.fmean(accept["baseline"]) if accept.get("baseline") else None
    cand = statistics.fmean(accept["candidate"]) if accept.get("candidate") else None
    compared = outputs.get("compared") or 0
    return {
        "status": status,
        "verdict": json.loads((run_dir / "results.json").read_text())["verdict"],
        "failed_rules": [f"{rule['name']} ({rule['kind']})" for rule in failed],
        "failed_kinds": sorted({rule["kind"] for rule in failed}),
        "caught": bool(failed),
        "requests_compared": compared,
        "requests_changed": compared - (outputs.get("identical") or 0) if compared else None,
        "changed_fraction": round((compared - outputs.get("identical", 0)) / compared, 4) if compared else None,
        "accept_length": {"baseline": base, "candidate": cand,
                          "shift": round(cand / base - 1, 4) if base and cand is not None else None,
                          "margin": accept.get("rel_tolerance")},
        "invalid_fraction": (validity.get("variants", {}).get("candidate") or {}).get("invalid_fraction"),
        "run_dir": os.path.relpath(run_dir, ROOT),
    }


def meets_target(entry: dict[str, Any], expected_rule: str) -> bool:
    """The issue's bar for this mutation: caught, and loud on the rule its class should trip."""
    if not entry["caught"]:
        return False
    if expected_rule == "accept_length":
        shift, margin = entry["accept_length"]["shift"], entry["accept_length"]["margin"]
        return shift is not None and margin is not None and abs(shift) > margin
    if expected_rule == "output_identity":
        return (entry["changed_fraction"] or 0) >= 0.9
    return expected_rule in entry["failed_kinds"]


def run_design(design: str, names: list[str], overrides: list[str], runs_root: Path) -> dict[str, Any]:
    started = time.monotonic()
    base_scenario = with_run_seed(scenario_for(design, overrides))
    seed = base_scenario.trials.seed
    root = runs_root / f"{time.strftime('%Y%m%d-%H%M%S')}-{design}"
    baseline_dir = root / "baseline"
    print(f"[{design}] baseline ...", flush=True)
    baseline = run_scenario(base_scenario, SCENARIO, select={("baseline", "timed")}, run_dir=baseline_dir)
    if baseline.status != "complete":
        sys.exit(f"[{design}] the baseline did not complete: {baseline.error}")
    from sglang_spec_harness.report import build_report

    results: dict[str, Any] = {}
    for name in names:
        t0 = time.monotonic()
        scenario = scenario_for(design, overrides, name)
        scenario = scenario.model_copy(update={"trials": scenario.trials.model_copy(update={"seed": seed})})
        run_dir = root / name
        run = run_scenario(scenario, SCENARIO, select={("candidate", "timed")}, run_dir=run_dir)
        adopt_trials(run_dir, baseline_dir)
        check_run_dir(run_dir)
        build_report(run_dir)
        entry = summarize(run_dir, run.status)
        mutation = MUTATIONS[name]
        entry.update(bug_class=mutation.bug_class, what=mutation.what, expected_rule=mutation.expected_rule,
                     seconds=round(time.monotonic() - t0, 1))
        entry["meets_target"] = meets_target(entry, mutation.expected_rule)
        results[name] = entry
        print(f"[{design}] {name}: {entry['verdict']} {entry['failed_rules']} changed {entry['requests_changed']}/"
              f"{entry['requests_compared']} accept {entry['accept_length']['baseline']} -> "
              f"{entry['accept_length']['candidate']} ({entry['seconds']} s)", flush=True)
    caught = sum(1 for e in results.values() if e["caught"])
    return {"models": json.loads((MODELS[design] / "models.json").read_text()), "planted": len(results),
            "caught": caught, "score": round(caught / len(results), 4) if results else None,
            "meets_target": sum(1 for e in results.values() if e["meets_target"]),
            "baseline_run_dir": os.path.relpath(baseline_dir, ROOT), "seconds": round(time.monotonic() - started, 1),
            "mutations": results}


def aa_summary(runs: list[dict[str, Any]], count: int) -> dict[str, Any]:
    """The exact rules (every rule but the A/A noise floor, which has no timed evidence here) must PASS
    in every run."""
    for run in runs:
        results = ROOT / run["run_dir"] / "results.json"
        if results.exists():
            run["rules"] = {r["name"]: r["verdict"] for r in json.loads(results.read_text())["rules"]}
            run["exact_rules"] = [r["name"] for r in json.loads(results.read_text())["rules"] if r["kind"] != "aa_noise"]
    exact = sorted({name for run in runs for name in run.get("exact_rules", [])})
    passed = sum(1 for r in runs if r["status"] == "complete" and r.get("exact_rules")
                 and all(r["rules"].get(n) == "PASS" for n in r["exact_rules"]))
    return {"runs": runs, "exact_rules": exact, "passed": passed, "of": count}


def run_aa(design: str, count: int, overrides: list[str], runs_root: Path) -> dict[str, Any]:
    """`count` A/A runs of the unmodified server (harness run --aa: both arms SGLang as installed, the
    baseline's patches; each run its own seed): the exact rules must PASS every time."""
    from sglang_spec_harness.pipeline import run_pipeline

    root = runs_root / f"{time.strftime('%Y%m%d-%H%M%S')}-{design}-aa"
    runs = []
    for i in range(count):
        t0 = time.monotonic()
        outcome = run_pipeline(with_run_seed(scenario_for(design, overrides)), SCENARIO, out_root=root, aa=True)
        rules = {r["name"]: r["verdict"] for r in _rules(outcome.run_dir)} if outcome.run_dir else {}
        runs.append({"status": outcome.status, "verdict": str(outcome.verdict), "rules": rules,
                     "seconds": round(time.monotonic() - t0, 1), "run_dir": os.path.relpath(outcome.run_dir, ROOT)})
        print(f"[{design}] A/A {i + 1}/{count}: {outcome.verdict} {rules} ({runs[-1]['seconds']} s)", flush=True)
    return aa_summary(runs, count)


def rescore(path: Path) -> dict[str, Any]:
    """The stored suite judged again from its run directories with today's rules and today's table of
    mutations (their expected rules): a separate pass over stored results, no server started."""
    report = json.loads(path.read_text())
    for design in report["designs"].values():
        for name, entry in design.get("mutations", {}).items():
            run_dir = ROOT / entry["run_dir"]
            check_run_dir(run_dir)
            mutation = MUTATIONS[name]
            entry.update(summarize(run_dir, entry["status"]), bug_class=mutation.bug_class, what=mutation.what,
                         expected_rule=mutation.expected_rule)
            entry["meets_target"] = meets_target(entry, mutation.expected_rule)
        if design.get("aa"):
            design["aa"] = aa_summary(design["aa"]["runs"], design["aa"]["of"])
        if design.get("mutations"):
            entries = design["mutations"].values()
            design.update(caught=sum(e["caught"] for e in entries), meets_target=sum(e["meets_target"] for e in entries))
            design["score"] = round(design["caught"] / design["planted"], 4)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", default="context,bigram")
    parser.add_argument("--mutations", default="all", help="comma-separated names, or all")
    parser.add_argument("--models", action="append", default=[], metavar="DESIGN=DIR",
                        help="a design's models from DIR instead of .sglang-cpu (built there if missing)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--runs-root", type=Path, default=ROOT / "reports" / "mutations")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--aa", type=int, default=0, metavar="N",
                        help="also N A/A runs of the unmodified server per design (the exact rules must pass N of N)")
    parser.add_argument("--skip-mutations", action="store_true", help="only the A/A runs")
    parser.add_argument("--rescore", action="store_true",
                        help="judge --out's stored runs again with today's rules and expected rules (no server)")
    args = parser.parse_args()
    for item in args.models:
        design, _, where = item.partition("=")
        MODELS[design] = Path(where).resolve()
    if args.rescore:
        args.out.write_text(json.dumps(rescore(args.out), indent=1) + "\n")
        return 0
    names = list(MUTATIONS) if args.mutations == "all" else args.mutations.split(",")
    unknown = [n for n in names if n not in MUTATIONS]
    if unknown:
        parser.error(f"unknown mutations {unknown}; known: {', '.join(MUTATIONS)}")
    # designs run apart (or earlier) accumulate in one --out file: a design run again replaces its entry
    earlier = json.loads(args.out.read_text()).get("designs", {}) if args.out and args.out.exists() else {}
    report = {"scenario": os.path.relpath(SCENARIO, ROOT), "overrides": args.overrides,
              "date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()} CPUs", "designs": earlier}
    for design in args.designs.split(","):
        entry = report["designs"].get(design, {})
        if not args.skip_mutations:
            entry = {**run_design(design, names, args.overrides, args.runs_root), "aa": entry.get("aa")}
        if args.aa:
            entry["aa"] = run_aa(design, args.aa, args.overrides, args.runs_root)
        report["designs"][design] = entry
        if args.out:  # written as soon as a design is done
            args.out.write_text(json.dumps(report, indent=1) + "\n")
    for design, r in report["designs"].items():
        if "score" in r:
            print(f"{design}: score {r['score']} ({r['caught']}/{r['planted']}), meets the targets {r['meets_target']}/{r['planted']}")
        if r.get("aa"):
            print(f"{design}: A/A {r['aa']['passed']}/{r['aa']['of']} passed {', '.join(r['aa']['exact_rules'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
