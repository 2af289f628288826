"""Run the test files written in SGLang's style (tests/sglang_style/) as SGLang's CI runs them:
`python3 FILE`, a process of its own, unittest's exit status and output.

`sglang_test_python(install)` is the interpreter for the ones that import SGLang: SGLang's test
environment with the harness's requirements in it, as `pip install sglang-spec-harness` would make
it. `make sglang-cpu` builds a server's environment (what the server imports); SGLang's test
utilities (`sglang.test.test_utils`) also import `datasets` (a requirement of sglang's that the
server never loads). So a virtual environment is made on top of it, once, in the cache
(HARNESS_CACHE_DIR): its own site-packages first with only what is missing (pip skips what SGLang's
has), then SGLang's, whose pins stay as they are. The harness package itself comes from the
PYTHONPATH the scenario gives servers (sglang_spec_harness.import_root), so the source is current.
The server that `popen_launch_server` starts is SGLang's `sglang` command: SGLang's own environment.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from support.proc_helpers import group_gone
from support.sglang_wheel import cache_dir

STYLE_DIR = Path(__file__).resolve().parents[1] / "sglang_style"
# What SGLang 0.5.23's test utilities import that its server does not (pinned: the registry's
# release when this was written).
SGLANG_TEST_REQUIREMENTS = ("datasets==5.2.0",)


@dataclass(frozen=True)
class FileRun:
    returncode: int
    output: str  # stdout and stderr together, as a CI log shows them
    leftover: bool  # processes of its group were still alive after it exited (then killed)


def run_test_file(python: str | Path, name: str, *, env: dict[str, str], cwd: Path, timeout: float) -> FileRun:
    """`python tests/sglang_style/NAME` in a new session (so that a server it leaves, or one it
    starts before a timeout, is killed with its group)."""
    process = subprocess.Popen([str(python), str(STYLE_DIR / name)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise AssertionError(f"{name} ran over {timeout:g} s:\n{output[-4000:]}") from None
    deadline = time.monotonic() + 30
    while not group_gone(process.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    leftover = not group_gone(process.pid)
    if leftover:
        os.killpg(process.pid, signal.SIGKILL)
    return FileRun(process.returncode, output, leftover)


def harness_requirements() -> list[str]:
    """The harness's core requirements (no extras), as its installed metadata states them."""
    return [line for line in importlib.metadata.distribution("sglang-spec-harness").requires or []
            if "extra ==" not in line]


def sglang_test_python(install: Path) -> Path:
    """The python of SGLang's test environment on top of `install` (a `make sglang-cpu` prefix), built
    once per install and requirement list. Raises RuntimeError (pip's last lines) where it cannot be
    built (no registry)."""
    site_packages = next((install / "venv" / "lib").glob("python3.*/site-packages"))
    requirements = [*SGLANG_TEST_REQUIREMENTS, *harness_requirements()]
    key = hashlib.sha256("\n".join([(install / "installed.json").read_text(), *requirements]).encode()).hexdigest()[:16]
    target = cache_dir() / f"sglang-test-env-{key}"
    if (target / "bin" / "python").exists():
        return target / "bin" / "python"
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built aside, then renamed into place: a build that stops half-way is never taken for one (only
    # bin/python is used, which finds its environment from where it is).
    building = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
    try:
        subprocess.run([str(install / "venv" / "bin" / "python"), "-m", "venv", "--clear", str(building)],
                       check=True, capture_output=True, timeout=300)
        own = next((building / "lib").glob("python3.*/site-packages"))
        (own / "zz-sglang-environment.pth").write_text(f"{site_packages}\n")  # after the venv's own entries
        pip = subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              *requirements], capture_output=True, text=True, timeout=1200)
        if pip.returncode != 0:
            raise RuntimeError(f"pip could not install {' '.join(requirements)}: {(pip.stderr or pip.stdout)[-2000:]}")
        try:
            building.rename(target)
        except OSError:  # another build finished first: use it
            pass
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target / "bin" / "python"
