"""Build what the CPU SGLang scenario needs: `python -m sglang_spec_harness.sglang_cpu.install [--prefix .sglang-cpu]`.

`make sglang-cpu` runs it. It makes, under the prefix:
- `venv/`: torch 2.13.0 (the CPU build on this machine's disk), sglang 0.5.23 and the three packages
  whose declared dependencies would pull a CUDA torch, all without their dependencies
  (`requirements-no-deps.txt`), then what they import, pinned (`requirements.txt`);
- `models/`: the tiny target and EAGLE draft (`sglang_spec_harness.sglang_cpu.tiny_models`);
- `installed.json`: what was installed, written last. While it matches the requirement files and
  the model builder, running again only checks (about a second).

`--sglang SPEC_OR_PATH` installs SGLang from elsewhere than the registry's `sglang==0.5.23` (a pip
spec, a wheel, a folder holding one, an unpacked sdist, or an SGLang checkout, whose `python/` is the
project): the GPU workflows' `make sglang-install SGLANG_SPEC=... | SGLANG_PATH=...` on a CPU.
Nothing here touches the harness's own environment. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sglang_spec_harness.import_root import harness_import_root
from sglang_spec_harness.pages.numbers import seconds
from sglang_spec_harness.sglang_cpu import SGLANG_VERSION
from sglang_spec_harness.sglang_cpu.base import (
    DEFAULT_PREFIX,
    DEFAULT_SGLANG_SOURCE,
    REQUIREMENTS,
    REQUIREMENTS_NO_DEPS,
    SMOKE_CODE,
    STAMP,
    TORCH_SPEC,
    expected_stamp,
    is_current,
    venv_python,
)


class InstallError(Exception):
    """A step failed: one line, with the command's last output line."""


def sglang_requirement(source: str) -> list[str]:
    """pip arguments that install SGLang from `source`: a pip spec, a wheel or sdist file, a folder
    holding one wheel (what `pip download --no-deps sglang==X` leaves), a project folder (an
    unpacked sdist), or an SGLang checkout (its project is `python/`)."""
    path = Path(source)
    if not path.exists():
        return [source]  # a pip spec (sglang==0.5.23, a URL, git+https://...)
    if path.is_file():
        return [str(path.resolve())]
    if (path / "python" / "pyproject.toml").is_file():
        return ["-e", str((path / "python").resolve())]
    if (path / "pyproject.toml").is_file() or (path / "setup.py").is_file():
        return [str(path.resolve())]
    wheels = sorted(path.glob("sglang-*.whl"))
    if len(wheels) == 1:
        return [str(wheels[0].resolve())]
    raise InstallError(f"--sglang {source}: a folder with no SGLang project (python/pyproject.toml or pyproject.toml) "
                       f"and {len(wheels)} sglang-*.whl files in it (need exactly one)")


def _run(step: str, argv: list[str], *, env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    print(f"sglang-cpu: {step} ...", flush=True)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"{step}: {exc}") from None
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        tail = "; ".join(lines[-3:]) if lines else "no output"
        raise InstallError(f"{step} failed (exit {proc.returncode}): {tail}")
    print(f"sglang-cpu: {step}: done in {seconds(time.monotonic() - started)}", flush=True)
    return proc.stdout


def install(prefix: Path, *, python: str = sys.executable, sglang_source: str = DEFAULT_SGLANG_SOURCE) -> dict:
    prefix = Path(os.path.abspath(prefix))
    py = venv_python(prefix)
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if not py.exists():
        _run("virtual environment", [python, "-m", "venv", str(prefix / "venv")])
    _run(f"{TORCH_SPEC} (CPU)", [*pip, TORCH_SPEC])
    _run(f"sglang=={SGLANG_VERSION} and friends without their dependencies", [*pip, "--no-deps", "-r", str(REQUIREMENTS_NO_DEPS)])
    if sglang_source != DEFAULT_SGLANG_SOURCE:
        # over the registry's: the same pins around it, so only SGLang's own code differs
        _run(f"sglang from {sglang_source} without its dependencies",
             [*pip, "--no-deps", "--force-reinstall", *sglang_requirement(sglang_source)])
    _run("what they import (requirements.txt)", [*pip, "-r", str(REQUIREMENTS)])
    # the harness alone on the venv's path, never the harness environment's site-packages
    env = {**os.environ, "PYTHONPATH": str(harness_import_root()), "PYTHONNOUSERSITE": "1"}
    _run("import check (sglang with the CPU shims)", [str(py), "-c", SMOKE_CODE], env=env)
    models = prefix / "models"
    out = _run("tiny models", [str(py), "-m", "sglang_spec_harness.sglang_cpu.tiny_models", str(models)], env=env)
    stamp = {**expected_stamp(), "sglang_source": sglang_source, "models": json.loads(out.strip().splitlines()[-1]),
             "python": str(py), "installed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (prefix / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    return stamp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_spec_harness.sglang_cpu.install", description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=DEFAULT_PREFIX, help="where to build (default: .sglang-cpu)")
    parser.add_argument("--force", action="store_true", help="build again even when installed.json is current")
    parser.add_argument("--release", action="append", default=[], metavar="X",
                        help="also prepare SGLang release X's environment (sglang_spec_harness.sglang_cpu.releases; repeatable), "
                             "then check that its EAGLE worker imports with the shims")
    parser.add_argument("--sglang", metavar="SPEC_OR_PATH", default=DEFAULT_SGLANG_SOURCE,
                        help=f"where SGLang comes from (default {DEFAULT_SGLANG_SOURCE}): a pip spec, a wheel, a folder "
                        "with one wheel, an unpacked sdist or an SGLang checkout; installed without its dependencies")
    args = parser.parse_args(argv)
    if not args.force and is_current(args.prefix, args.sglang):
        print(f"sglang-cpu: {args.prefix / STAMP} is current (sglang {SGLANG_VERSION}, models built); nothing to do")
    else:
        started = time.monotonic()
        try:
            stamp = install(args.prefix, sglang_source=args.sglang)
        except InstallError as exc:
            print(f"sglang-cpu: {exc}", file=sys.stderr)
            return 1
        print(f"sglang-cpu: ready in {seconds(time.monotonic() - started)}: {venv_python(args.prefix)}, models "
              f"{args.prefix / 'models'} (vocab {stamp['models']['vocab_size']}, draft agreement {stamp['models']['agreement']})")
    if args.release:
        from sglang_spec_harness.sglang_cpu.releases import main_release

        return main_release(args.release, args.prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
