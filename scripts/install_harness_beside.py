"""The harness beside an SGLang that SGLang's own CI install put in place, without touching its pins:
`make harness-beside` runs `python3 scripts/install_harness_beside.py --venv .venv --extras ...`.

SGLang's scripts/ci/cuda/ci_install_dependency.sh installs SGLang and everything it pins (torch,
sglang-kernel, flashinfer, nccl...) into the runner's python3, or into a venv it puts first on PATH
for the later steps. This:
1. reads what that interpreter (`--sglang-python`, default the python3 on PATH) has installed: every
   distribution and its version (and checks that it has sglang);
2. makes `--venv` from that same interpreter, without a pip or setuptools of its own, and a .pth file
   that adds SGLang's site directories after the venv's own (their .pth files, SGLang's editable
   install among them, processed as at SGLang's own start-up);
3. installs the harness there with SGLang's own pip (`pip --python VENV`), editable, with every
   distribution SGLang's interpreter has pinned to its version (a pip constraints file): pip installs
   only what is missing, and a requirement of the harness that SGLang pins otherwise stops the install
   (pip's resolver, one line) instead of moving SGLang's pin;
4. checks it: SGLang's interpreter lists exactly what it listed before (nothing installed, removed,
   up- or downgraded there), and the venv sees every one of SGLang's distributions at SGLang's version
   (nothing shadowed); prints what the venv added. Any difference: exit 1, naming it.
Standard library only: it runs before the harness is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What the interpreter given sees, first occurrence of a name wins (as an import would).
SNAPSHOT = r"""
import importlib.metadata as m, json, re, sys
sys.path = [p for p in sys.path if p]  # not the working directory: a checkout's *.egg-info is not installed
seen = {}
for dist in m.distributions():
    name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
    if name and name not in seen:
        seen[name] = dist.version
print(json.dumps(seen, sort_keys=True))
"""
SITE_DIRS = r"""
import json, site
print(json.dumps([*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]))
"""
PTH_NAME = "zz-sglang-environment.pth"


class BesideError(Exception):
    """One line saying what went wrong."""


def _run(argv: list[str], what: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        # pip's resolver says which requirement met which pin after this line: that is the news
        if "The conflict is caused by:" in lines:
            start = lines.index("The conflict is caused by:") + 1
            cause = [line for line in lines[start:start + 8] if "depends on" in line or "requested" in line]
            raise BesideError(f"{what}: a requirement of the harness meets a pin of SGLang's: {'; '.join(cause)}")
        raise BesideError(f"{what} failed (exit {proc.returncode}): {' / '.join(lines[-3:]) or 'no output'}")
    return proc.stdout


def snapshot(python: str) -> dict[str, str]:
    return json.loads(_run([python, "-c", SNAPSHOT], f"listing the distributions of {python}"))


def make_venv(sglang_python: str, venv: Path) -> Path:
    """The venv, from SGLang's interpreter, without a pip or setuptools of its own (SGLang's pip
    installs into it), with SGLang's site directories after its own."""
    if not (venv / "bin" / "python").exists():
        _run([sglang_python, "-m", "venv", "--without-pip", str(venv)], f"{sglang_python} -m venv {venv}")
    python = venv / "bin" / "python"
    own = json.loads(_run([str(python), "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
                          "the venv's site directory"))[0]
    dirs = json.loads(_run([sglang_python, "-c", SITE_DIRS], "SGLang's site directories"))
    # `import` lines of a .pth file run at start-up: addsitedir also reads the .pth files there
    lines = [f"import site; site.addsitedir({d!r})" for d in dict.fromkeys(dirs)
             if Path(d).is_dir() and Path(d).resolve() != Path(own).resolve()]
    Path(own, PTH_NAME).write_text("\n".join(lines) + "\n")
    return python


def install(sglang_python: str, python: Path, pins: dict[str, str], extras: str) -> None:
    """SGLang's pip installs the harness into the venv (pip --python), every SGLang distribution pinned."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="sglang-pins-", delete=False) as f:
        f.write("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())
                        if name != "sglang-spec-harness"))
    target = f"{REPO}[{extras}]" if extras else str(REPO)
    try:
        _run([sglang_python, "-m", "pip", "--python", str(python), "install", "--disable-pip-version-check",
              "--constraint", f.name, "-e", target],
             f"pip install -e {target} with SGLang's {len(pins)} distributions pinned")
    finally:
        os.unlink(f.name)


def compare(before: dict[str, str], after: dict[str, str], seen: dict[str, str]) -> tuple[list[str], list[str]]:
    """(problems, what the venv added)."""
    problems = [f"SGLang's environment changed: {name} {before.get(name, '-')} -> {after.get(name, '-')}"
                for name in sorted(before.keys() | after.keys()) if before.get(name) != after.get(name)]
    problems += [f"the venv shadows SGLang's {name}=={version} with {seen.get(name, 'nothing')}"
                 for name, version in sorted(before.items()) if seen.get(name) != version]
    added = [f"{name}=={version}" for name, version in sorted(seen.items()) if name not in before]
    return problems, added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install_harness_beside.py", description=__doc__.splitlines()[0])
    parser.add_argument("--sglang-python", default="python3", help="SGLang's interpreter (default: python3 on PATH)")
    parser.add_argument("--venv", type=Path, default=Path(".venv"), help="the harness's venv (default .venv)")
    parser.add_argument("--extras", default="micro,report,history,postgres", help="the harness's extras")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[a-z0-9,]*", args.extras):
        print(f"harness-beside: --extras {args.extras!r}: names and commas only", file=sys.stderr)
        return 2
    try:
        before = snapshot(args.sglang_python)
        if "sglang" not in before:
            raise BesideError(f"{args.sglang_python} has no sglang installed: run SGLang's install first (make sglang-install)")
        python = make_venv(args.sglang_python, args.venv)
        install(args.sglang_python, python, before, args.extras)
        problems, added = compare(before, snapshot(args.sglang_python), snapshot(str(python)))
    except BesideError as exc:
        print(f"harness-beside: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"harness-beside: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"harness-beside: sglang {before['sglang']} and its {len(before)} distributions unchanged (in "
          f"{args.sglang_python}, and as {args.venv} sees them); {args.venv} added {len(added)}: {', '.join(added)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
