"""`harness init [DIR]`: write the shipped scenarios to DIR/scenarios/, to edit and run.

Their paths relative to the file keep their meaning there: `../.sglang-cpu` is DIR/.sglang-cpu, where
`python -m sglang_spec_harness.sglang_cpu.install --prefix DIR/.sglang-cpu` builds the SGLang CPU environment.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=".", metavar="DIR", help="where scenarios/ goes (default: here)")
    parser.add_argument("--force", action="store_true", help="overwrite scenario files that differ from the shipped ones")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sglang_spec_harness.errors import HarnessInputError
    from sglang_spec_harness.shipped import DEFAULT_SCENARIO, shipped_files

    sources = shipped_files()
    if not sources:
        raise HarnessInputError("this install has no shipped scenarios (a wheel built without setup.py?)")
    root = Path(args.dir)
    if root.exists() and not root.is_dir():
        raise HarnessInputError(f"{root}: not a directory")
    target = root / "scenarios"
    # Never lose a user's edits silently: files that differ are named, and kept unless --force.
    differing = [s.name for s in sources if (target / s.name).is_file()
                 and (target / s.name).read_bytes() != s.read_bytes()]
    if differing and not args.force:
        raise HarnessInputError(f"{target}: {', '.join(differing)} differ from the shipped scenarios; "
                                "keep them, or overwrite them with --force")
    target.mkdir(parents=True, exist_ok=True)
    written = 0
    for source in sources:
        destination = target / source.name
        if destination.is_file() and destination.read_bytes() == source.read_bytes():
            continue
        destination.write_bytes(source.read_bytes())
        written += 1
    print(f"{target}: {written} file(s) written, {len(sources) - written} already there")
    print(f"next: harness run {target / DEFAULT_SCENARIO}  (runs go to ./reports/runs)")
    return 0
