"""SGLang installed as SGLang's own CI installs it, and the harness beside it without touching its pins:
scripts/sglang_install.sh (`make sglang-install`, `make sglang-install-kind`) and
scripts/install_harness_beside.py (`make harness-beside`).

The detection and the run of SGLang's script are shown on checkouts laid out as SGLang's (at the
paths of sgl-project/sglang: scripts/ci/cuda/ci_install_dependency.sh, and scripts/ci/ in older
trees), whose script records where and with what it ran. The harness beside an environment is shown
offline (PIP_NO_INDEX) on a stand-in for SGLang's environment: a venv that sees this suite's packages
and holds an `sglang` distribution of its own; the whole chain against the real SGLang CPU server runs
in .ci/gpu-workflow-on-cpu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "sglang_install.sh"
BESIDE = REPO / "scripts" / "install_harness_beside.py"
RECORDER = """#!/bin/bash
set -euo pipefail
[ -f python/pyproject.toml ] || { echo "not at the checkout's root"; exit 1; }
printf '{"cwd": "%s", "args": "%s", "in_ci": "%s", "use_venv": "%s"}' "$PWD" "$*" "${SGLANG_IS_IN_CI:-}" "${USE_VENV:-}" > ran.json
"""


def checkout(root: Path, *scripts: str) -> Path:
    """An SGLang checkout's layout: python/pyproject.toml and the given CI scripts (recorders)."""
    (root / "python").mkdir(parents=True)
    (root / "python" / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.99"\n')
    for script in scripts:
        path = root / script
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(RECORDER)
    return root


def install(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {"SGLANG_REF": "", "SGLANG_SPEC": "", "SGLANG_PATH": "", "SGLANG_INSTALL": "auto"}
    return subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **base, **env})


@pytest.mark.parametrize(("scripts", "kind"), [
    (["scripts/ci/cuda/ci_install_dependency.sh", "scripts/ci/ci_install_dependency.sh"],
     "sglang-ci scripts/ci/cuda/ci_install_dependency.sh"),
    (["scripts/ci/ci_install_dependency.sh"], "sglang-ci scripts/ci/ci_install_dependency.sh"),
    (["scripts/ci/amd/amd_ci_install_dependency.sh"], "sglang-rocm scripts/ci/amd/amd_ci_install_dependency.sh"),
    ([], "harness scripts/install_sglang_gpu.sh"),
])
def test_the_install_follows_the_checkouts_own_ci_script(tmp_path, scripts, kind):
    sglang = checkout(tmp_path / "sglang", *scripts)
    done = install("--kind", SGLANG_PATH=str(sglang))
    assert done.returncode == 0 and done.stdout.strip() == kind, done.stderr


def test_the_harness_own_install_when_asked_or_without_a_checkout(tmp_path):
    sglang = checkout(tmp_path / "sglang", "scripts/ci/cuda/ci_install_dependency.sh")
    assert install("--kind", SGLANG_PATH=str(sglang), SGLANG_INSTALL="harness").stdout.strip() == \
        "harness scripts/install_sglang_gpu.sh"
    assert install("--kind", SGLANG_SPEC="sglang==0.5.23").stdout.strip() == "harness scripts/install_sglang_gpu.sh"
    bare = checkout(tmp_path / "old")
    refused = install(SGLANG_PATH=str(bare), SGLANG_INSTALL="sglang-ci")
    assert refused.returncode == 2 and "SGLANG_INSTALL=sglang-ci but" in refused.stderr
    assert install(SGLANG_INSTALL="pip").returncode == 2


def test_sglangs_script_runs_from_the_checkouts_root_with_the_jobs_environment(tmp_path):
    sglang = checkout(tmp_path / "sglang", "scripts/ci/cuda/ci_install_dependency.sh")
    done = install(SGLANG_PATH=str(sglang), SGLANG_IS_IN_CI="true", USE_VENV="false")
    assert done.returncode == 0, done.stderr
    assert f"sglang-install: SGLang's own CI install: (cd {sglang} && bash scripts/ci/cuda/ci_install_dependency.sh)" in done.stdout
    assert "next, in a new step: make harness-beside" in done.stdout
    ran = json.loads((sglang / "ran.json").read_text())
    assert (ran["cwd"], ran["in_ci"], ran["use_venv"]) == (str(sglang), "true", "false")


def test_rocm_is_refused_in_one_line_and_the_fallback_offered(tmp_path):
    sglang = checkout(tmp_path / "sglang", "scripts/ci/amd/amd_ci_install_dependency.sh")
    done = install(SGLANG_PATH=str(sglang))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "runs inside SGLang's CI container" in done.stderr and "SGLANG_INSTALL=harness" in done.stderr
    assert not (sglang / "ran.json").exists()


def test_two_sources_are_bad_input():
    done = install(SGLANG_REF="main", SGLANG_SPEC="sglang==0.5.23")
    assert done.returncode == 2 and "give one of SGLANG_REF, SGLANG_SPEC, SGLANG_PATH (got 2)" in done.stderr


# ---- the harness beside SGLang's environment -------------------------------------------------------


def sglang_environment(root: Path, *dists: tuple[str, str]) -> Path:
    """A stand-in for the interpreter SGLang's install leaves: a venv without pip of its own that sees
    this suite's environment, with `sglang` (and `dists`) installed in its own site directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    own = Path(subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                              capture_output=True, text=True).stdout.strip())
    suite = Path(subprocess.run([sys.executable, "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                                capture_output=True, text=True).stdout.strip())
    (own / "zz-suite.pth").write_text(f"import site; site.addsitedir({str(suite)!r})\n")
    (own / "sglang").mkdir()
    (own / "sglang" / "__init__.py").write_text("__version__ = '0.5.23'\n")
    for name, version in (("sglang", "0.5.23"), *dists):
        info = own / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return python


def beside(sglang_python: Path, venv: Path) -> subprocess.CompletedProcess:
    # offline: every requirement must come from the environment; the editable build uses its setuptools
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}
    return subprocess.run([sys.executable, str(BESIDE), "--sglang-python", str(sglang_python), "--venv", str(venv),
                           "--extras", ""], capture_output=True, text=True, timeout=300, env=env)


def distributions(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import importlib.metadata as m; print(sorted((d.metadata['Name'], "
                           "d.version) for d in m.distributions()))"], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_the_harness_goes_beside_sglang_and_leaves_its_environment_as_it_was(tmp_path):
    sglang = sglang_environment(tmp_path / "sglang-env")
    before = distributions(sglang)
    done = beside(sglang, tmp_path / "venv")
    assert done.returncode == 0, done.stderr
    assert "harness-beside: sglang 0.5.23 and its" in done.stdout and "unchanged" in done.stdout
    assert distributions(sglang) == before
    # the venv: SGLang's packages (its own sglang), the harness, nothing of its own but the harness
    venv_python = tmp_path / "venv" / "bin" / "python"
    seen = subprocess.run([str(venv_python), "-c", "import sglang, sglang_spec_harness; print(sglang.__file__)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert seen == str(sglang.parent.parent / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
                       / "site-packages" / "sglang" / "__init__.py")
    assert not list((tmp_path / "venv").glob("lib/python*/site-packages/pip"))
    assert (tmp_path / "venv" / "bin" / "harness").exists()


@pytest.mark.slow
def test_a_requirement_that_sglang_pins_otherwise_stops_the_install_and_moves_nothing(tmp_path):
    sglang = sglang_environment(tmp_path / "sglang-env", ("numpy", "1.0.0"))
    before = distributions(sglang)
    done = beside(sglang, tmp_path / "venv")
    assert done.returncode == 1
    assert done.stderr.startswith(f"harness-beside: pip install -e {REPO} with SGLang's ")
    assert done.stderr.strip().endswith("distributions pinned: a requirement of the harness meets a pin of SGLang's: "
                                        "sglang-spec-harness 0.2.0 depends on numpy>=1.26; The user requested "
                                        "(constraint) numpy==1.0.0")
    assert distributions(sglang) == before
    assert not (tmp_path / "venv" / "bin" / "harness").exists()


def test_harness_beside_needs_sglang(tmp_path):
    done = subprocess.run([sys.executable, str(BESIDE), "--sglang-python", sys.executable, "--venv", str(tmp_path / "v")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "has no sglang installed: run SGLang's install first" in done.stderr
    assert not (tmp_path / "v").exists()


def test_a_checkouts_egg_info_in_the_working_directory_is_not_an_installed_distribution(tmp_path, monkeypatch):
    """The editable build writes sglang_spec_harness.egg-info into the harness's checkout, the working
    directory of `make harness-beside`: read as installed, it looked like a change to SGLang's environment."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("install_harness_beside", BESIDE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "made_here.egg-info").mkdir()
    (tmp_path / "made_here.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: made-here\nVersion: 1.0\n")
    monkeypatch.chdir(tmp_path)
    assert "made-here" not in module.snapshot(sys.executable)
