"""`harness scenario-info FILE...`: what machine each scenario needs, and the CI jobs that follow.

CI builds its job matrix from this (`make runner-matrix`), so a scenario's runner labels live in the
scenario (`hardware:`), next to the model and flags that decide them, not in each workflow.
"""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="scenario YAML files, or shipped scenarios' names (e.g. micro_topk1), as `harness run` takes them")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
                        help="change a field first, as `harness run --set` does (e.g. hardware.runners=[b200])")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one JSON object per scenario, in a list")
    form.add_argument("--github-matrix", action="store_true",
                      help='one line: {"include": [...]}, a job per scenario and runner label, for a GitHub Actions '
                      "matrix (fromJSON); each entry has scenario, name, runner, runs_on, accelerator and gpus")
    parser.add_argument("--runner", action="append", default=[], metavar="LABEL", dest="runners",
                        help="only these runner labels (repeatable); a label no scenario lists is an error")


def describe(path: str, overrides: list[str]) -> dict:
    """`scenario` is the argument as given: what `harness run` is then given (a name resolves there too)."""
    from sglang_spec_harness.scenario import load_scenario
    from sglang_spec_harness.shipped import scenario_path

    s = load_scenario(scenario_path(path), overrides)
    hw = s.hardware
    return {"scenario": path, "name": s.name, "engine": s.engine, "accelerator": hw.accelerator, "gpus": hw.gpus,
            "sglang_version": s.server.sglang_version,
            "jobs": [{"runner": label, "runs_on": runs_on} for label, runs_on in hw.runs_on()]}


def run(args: argparse.Namespace) -> int:
    from sglang_spec_harness.errors import HarnessInputError

    infos = [describe(path, args.overrides) for path in args.files]
    if args.runners:
        listed = {job["runner"] for info in infos for job in info["jobs"]}
        unknown = [label for label in args.runners if label not in listed]
        if unknown:
            raise HarnessInputError(f"--runner {', '.join(unknown)}: no scenario given runs there (they list: "
                                    f"{', '.join(sorted(listed)) or 'nothing'}); add the label to the scenario's "
                                    "hardware.runners if that machine meets its needs")
        for info in infos:
            info["jobs"] = [job for job in info["jobs"] if job["runner"] in args.runners]
    if args.github_matrix:
        include = [{"scenario": info["scenario"], "name": info["name"], "runner": job["runner"],
                    "runs_on": job["runs_on"], "accelerator": info["accelerator"], "gpus": info["gpus"]}
                   for info in infos for job in info["jobs"]]
        if not include:
            raise HarnessInputError("no job: none of the scenarios runs on the runners asked for")
        print(json.dumps({"include": include}, separators=(",", ":")))
    elif args.json:
        print(json.dumps(infos, indent=2))
    else:
        for info in infos:
            needs = "a CPU" if info["accelerator"] == "cpu" else f"{info['gpus']} {info['accelerator']} GPU(s)"
            jobs = "; ".join(f"{job['runner']}: runs-on {job['runs_on']}" for job in info["jobs"]) or "no runner"
            print(f"{info['scenario']}: {info['name']} needs {needs}; {jobs}")
    return 0
