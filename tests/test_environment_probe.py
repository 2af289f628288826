"""The interpreter probe. SGLang's commit: a git checkout's HEAD only where git tracks sglang itself.
A release unpacked inside another repository (this harness's .sglang-cpu/releases/, ignored there)
once took the harness's own HEAD for SGLang's commit; the history then showed it on every release.
torch's facts: read from torch/version.py without importing torch (~2 s a run waited for)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sglang_spec_harness.history.extract import sglang_commit
from sglang_spec_harness.run.environment import probe_interpreter


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def package(root: Path, version: str) -> Path:
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "version.py").write_text(f'__version__ = "{version}"\n')
    return pkg


def test_a_checkout_of_sglang_gives_its_head_and_a_release_inside_another_repository_none(tmp_path):
    checkout = tmp_path / "sglang-src"
    package(checkout / "python", "0.5.99")
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "sglang")
    facts = probe_interpreter(sys.executable, {"PYTHONPATH": str(checkout / "python")})["sglang"]
    assert (facts["version"], facts["commit"]) == ("0.5.99", git(checkout, "rev-parse", "HEAD"))

    harness = tmp_path / "harness"
    (harness / "src").mkdir(parents=True)
    (harness / "src" / "x.py").write_text("")
    (harness / ".gitignore").write_text("releases/\n")
    git(harness, "init", "-q")
    git(harness, "add", ".")
    git(harness, "commit", "-q", "-m", "harness")
    package(harness / "releases" / "0.5.13", "0.5.13")
    facts = probe_interpreter(sys.executable, {"PYTHONPATH": str(harness / "releases" / "0.5.13")})["sglang"]
    assert (facts["version"], facts["commit"]) == ("0.5.13", None)


def test_the_history_drops_a_commit_that_an_older_probe_took_from_the_harness():
    harness = {"git_commit": "c0ffee" * 6 + "abcd", "source": "/work/main"}
    inside = {"path": "/work/main/.sglang-cpu/releases/sglang/0.5.13/sglang", "version": "0.5.13",
              "commit": harness["git_commit"]}
    assert sglang_commit(inside, harness) is None
    checkout = {"path": "/src/sglang/python/sglang", "commit": "ab" * 20}
    assert sglang_commit(checkout, harness) == "ab" * 20
    # the same commit on a path outside the harness's tree is kept: only the misattribution goes
    assert sglang_commit({"path": "/elsewhere/sglang", "commit": harness["git_commit"]}, harness) == harness["git_commit"]


def test_torch_facts_come_from_its_version_file_without_importing_it(tmp_path):
    torch = tmp_path / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (torch / "version.py").write_text("from typing import Optional\n__version__ = '9.8.7+cu999'\n"
                                      "cuda: Optional[str] = '99.9'\nhip: Optional[str] = None\ngit_version = 'ab12'\n")
    facts = probe_interpreter(sys.executable, {"PYTHONPATH": str(tmp_path)})
    assert (facts["torch"], facts["torch_cuda"], facts["torch_hip"], facts["torch_git"]) == (
        "9.8.7+cu999", "99.9", None, "ab12")
    assert "torch_error" not in facts

    (torch / "version.py").write_text("cuda = None\n")
    facts = probe_interpreter(sys.executable, {"PYTHONPATH": str(tmp_path)})
    assert facts["torch"] is None and "no __version__ literal" in facts["torch_error"]


def test_an_interpreter_without_torch_says_so(tmp_path):
    python = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(python)], check=True)
    facts = probe_interpreter(str(python / "bin" / "python"), {})
    assert facts["torch"] is None and facts["torch_error"] == "ModuleNotFoundError: No module named 'torch'"
