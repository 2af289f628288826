"""environment.json: what ran where, so that two runs can be told apart later.

Facts about a variant's software (torch, SGLang) come from that variant's own interpreter and
PYTHONPATH, in a small subprocess: the harness never imports SGLang itself (without a GPU its import
fails), and the variant may use a different install than the harness.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from sglang_spec_harness import __version__
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT, server_python, variant_environment
from sglang_spec_harness.engines.sglang_versions import RESTORE_TOPK1_SOFTMAX_PATCH
from sglang_spec_harness.patches.draft_shape import HarnessPatchError, recognise_source
from sglang_spec_harness.rundir import SCHEMA_VERSION, EnvironmentRecord
from sglang_spec_harness.scenario import Scenario

PROBE_TIMEOUT_S = 60.0

# Run in the variant's interpreter. Locates sglang without importing it.
_PROBE = r"""
import ast, importlib.metadata as md, importlib.util, json, os, re, subprocess, sys, platform
out = {"python": sys.version.split()[0], "executable": sys.executable, "implementation": platform.python_implementation()}
# torch's facts from the literals of its generated torch/version.py (what torch.version reads) without
# importing torch: the import takes ~2 s of CPU, and a run that FAILs on its first profile waits for it.
try:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("No module named 'torch'")
    path = os.path.join(os.path.dirname(spec.origin), "version.py")
    facts = {}
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            facts[target.id] = node.value.value
    if not isinstance(facts.get("__version__"), str):
        raise ValueError(f"no __version__ literal in {path}")
    out["torch"] = facts["__version__"]
    out["torch_cuda"] = facts.get("cuda")
    out["torch_hip"] = facts.get("hip")
    out["torch_git"] = facts.get("git_version")
except Exception as exc:
    out["torch"] = None
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
spec = importlib.util.find_spec("sglang")
if spec is None or not spec.origin:
    out["sglang"] = None
else:
    pkg = os.path.dirname(spec.origin)
    info = {"path": pkg, "version": None, "commit": None}
    # The tree's own version first (the generated _version.py of a wheel or a built tree; a source
    # tree on PYTHONPATH may shadow an installed distribution of another version), then the
    # installed distribution's, then version.py's literal.
    for name in ("_version.py", "version.py"):
        try:
            text = open(os.path.join(pkg, name), encoding="utf-8").read()
        except OSError:
            continue
        m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)", text, re.M)
        if m:
            info["version"] = m.group(1)
            break
    if info["version"] is None:
        try:
            info["version"] = md.version("sglang")
        except md.PackageNotFoundError:
            pass
    # A commit only when git tracks sglang itself: a release unpacked inside another repository (this
    # harness's .sglang-cpu/releases/) would otherwise take that repository's HEAD for SGLang's.
    try:
        tracked = subprocess.run(["git", "-C", pkg, "ls-files", "--error-unmatch", "__init__.py"],
                                 capture_output=True, text=True, timeout=10).returncode == 0
        if tracked:
            r = subprocess.run(["git", "-C", pkg, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
            info["commit"] = r.stdout.strip() or None
    except Exception:
        pass
    out["sglang"] = info
print("HARNESS_PROBE " + json.dumps(out))
"""


def _run(argv: list[str], *, cwd: Path | None = None, timeout: float = 10.0) -> str | None:
    try:
        result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def harness_facts() -> dict[str, Any]:
    commit = _run(["git", "rev-parse", "HEAD"], cwd=HARNESS_SOURCE_ROOT)
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HARNESS_SOURCE_ROOT)
    return {
        "version": __version__,
        "git_commit": commit,
        "git_dirty": bool(dirty) if dirty is not None else None,
        "source": str(HARNESS_SOURCE_ROOT),
    }


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_facts() -> list[dict[str, str]]:
    """One entry per GPU from nvidia-smi (or rocm-smi's product name), empty without one."""
    if shutil.which("nvidia-smi"):
        out = _run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], timeout=30
        )
        gpus = []
        for line in (out or "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2:
                gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2] if len(parts) > 2 else ""})
        return gpus
    if shutil.which("rocm-smi"):
        out = _run(["rocm-smi", "--showproductname", "--json"], timeout=30)
        try:
            cards = json.loads(out or "{}")
        except json.JSONDecodeError:
            return []
        return [{"name": str(v.get("Card series") or v.get("Card model")), "driver": ""} for v in cards.values()]
    return []


def probe_interpreter(python: str, env: dict[str, str]) -> dict[str, Any]:
    """Python, torch and SGLang facts as seen by `python` with `env` added (its PYTHONPATH)."""
    try:
        result = subprocess.run(
            [python, "-c", _PROBE],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"executable": python, "error": f"{type(exc).__name__}: {exc}"}
    for line in result.stdout.splitlines():
        if line.startswith("HARNESS_PROBE "):
            return json.loads(line[len("HARNESS_PROBE ") :])
    last = (result.stderr.strip().splitlines() or ["no output"])[-1]
    return {"executable": python, "error": f"probe exited with {result.returncode}: {last}"}


def collect_environment(scenario: Scenario, *, variants: list[str] | None = None) -> EnvironmentRecord:
    """The facts for environment.json; `variants` are the configurations that run (default: all)."""
    names = variants if variants is not None else list(scenario.variants)
    probes: dict[tuple[str, str], dict[str, Any]] = {}
    per_variant: dict[str, Any] = {}
    for name in names:
        python = server_python(scenario, name)
        env = variant_environment(scenario, name, profile_dir=Path(os.devnull))
        # Only what decides which packages are found: the interpreter and PYTHONPATH.
        key = (python, env.get("PYTHONPATH", ""))
        if key not in probes:
            probes[key] = probe_interpreter(python, {"PYTHONPATH": key[1]})
        per_variant[name] = probes[key]
        if RESTORE_TOPK1_SOFTMAX_PATCH in scenario.variants[name].patches and (probes[key].get("sglang") or {}).get("path"):
            per_variant[name] = {**probes[key], "draft_shape": draft_shape_facts(probes[key]["sglang"])}
    return EnvironmentRecord(
        schema_version=SCHEMA_VERSION,
        harness=harness_facts(),
        python=sys.version.split()[0],
        python_executable=sys.executable,
        platform=platform.platform(),
        hostname=socket.gethostname(),
        cpu=cpu_model(),
        cpu_count=os.cpu_count(),
        gpus=gpu_facts(),
        engine=scenario.engine,
        variants=per_variant,
    )


def require_interpreters(scenario: Scenario, variants: list[str]) -> None:
    """Every variant's interpreter exists, else one HarnessInputError line."""
    hint = f" (set it up with: {scenario.server.setup})" if scenario.server.setup else ""
    for name in variants:
        python = server_python(scenario, name)
        if not os.path.exists(python) if os.sep in python else shutil.which(python) is None:
            where = f"variants.{name}.python" if scenario.variants[name].python else f"variants.{name}: the harness's interpreter"
            raise HarnessInputError(f"scenario {scenario.name}: {where}: {python} does not exist{hint}")


def require_engine(scenario: Scenario, environment: EnvironmentRecord) -> None:
    """Before any server starts: every variant's interpreter runs and, for `engine: sglang`, has SGLang
    (of `server.sglang_version` where given). Otherwise one HarnessInputError line, with
    `server.setup` (how to install it) where the scenario gives one."""
    hint = f" (set it up with: {scenario.server.setup})" if scenario.server.setup else ""
    for name, facts in environment.variants.items():
        python = facts.get("executable") or server_python(scenario, name)
        if "error" in facts:
            require_interpreters(scenario, [name])
            continue  # a probe that failed otherwise (a slow machine?) proves nothing: the server start will tell
        if scenario.engine != "sglang":
            continue
        sglang = facts.get("sglang")
        if sglang is None:
            raise HarnessInputError(f"scenario {scenario.name}: variants.{name}: SGLang is not installed for {python}{hint}")
        wanted = scenario.variants[name].sglang_version or scenario.server.sglang_version
        if wanted is not None and sglang.get("version") != wanted:
            raise HarnessInputError(
                f"scenario {scenario.name}: variants.{name}: SGLang {sglang.get('version') or '(version unknown)'} "
                f"at {sglang['path']}, but {'variants.' + name if scenario.variants[name].sglang_version else 'server'}"
                f".sglang_version is {wanted}{hint}")
        _require_draft_shape(scenario, name, facts)


# The patch once chose a version-keyed table row by this variable; a scenario that still sets it gets one line.
RETIRED_LAYOUT_ENV = "HARNESS_SGLANG_LAYOUT"


def draft_shape_facts(sglang: dict[str, Any]) -> dict[str, Any]:
    """What the baseline patch recognises in this SGLang's draft code, from its files (environment.json's
    `draft_shape`): the worker, the shape and each selection, or the one line saying what is missing."""
    try:
        return {"patch": RESTORE_TOPK1_SOFTMAX_PATCH, **recognise_source(Path(sglang["path"])).facts()}
    except HarnessPatchError as exc:
        return {"patch": RESTORE_TOPK1_SOFTMAX_PATCH, "error": str(exc)}


def _require_draft_shape(scenario: Scenario, name: str, facts: dict[str, Any]) -> None:
    """A variant with the restore-softmax patch: the patch recognises its SGLang's draft code (the
    checks that need no server; the server's process checks the rest), else the patch would stop
    every server of the run with exit 70."""
    if RESTORE_TOPK1_SOFTMAX_PATCH not in scenario.variants[name].patches:
        return
    where = f"scenario {scenario.name}: variants.{name}"
    if RETIRED_LAYOUT_ENV in {**scenario.server.env, **scenario.variants[name].env}:
        raise HarnessInputError(f"{where}: env {RETIRED_LAYOUT_ENV} is no longer read: the baseline patch recognises "
                                "SGLang's draft code by its shape (docs/gpu.md, 'The baseline patch'); remove it")
    shape = facts.get("draft_shape") or {}
    if "error" in shape:
        sglang = facts.get("sglang") or {}
        raise HarnessInputError(
            f"{where}: SGLang {sglang.get('version') or '(version unknown)'} at {sglang.get('path')}: the baseline "
            f"patch {RESTORE_TOPK1_SOFTMAX_PATCH} does not recognise its draft code: {shape['error']} "
            f"(docs/gpu.md, 'The baseline patch')")
