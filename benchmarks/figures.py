"""What the benchmarks share: paths in committed JSON that read the same on any machine, and running the
harness's command line with its output in a log."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def project_relative(text: str, *roots: tuple[Path, str]) -> str:
    """`text` (JSON) with this checkout's absolute path made relative to the project, each (root, name)
    of `roots` (a sweep's folder, say) replaced by its name, and the release environments named from
    `.sglang-cpu/`, wherever the checkout that built them was."""
    for root, name in (*roots, (REPO, ".")):
        text = text.replace(json.dumps(str(root.resolve()) + "/")[1:-1], "" if name == "." else f"{name}/")
        text = text.replace(json.dumps(str(root.resolve()))[1:-1], name)
    return re.sub(r"/[^\"\s]*?/(\.sglang-cpu/)", r"\1", text)


def harness(*args: str, log: Path) -> tuple[int, float]:
    """`harness ARGS...` from this checkout, its output in `log`: (exit code, seconds)."""
    started = time.monotonic()
    with log.open("w") as sink:
        proc = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=REPO, stdout=sink,
                              stderr=subprocess.STDOUT, check=False)
    return proc.returncode, round(time.monotonic() - started, 1)
