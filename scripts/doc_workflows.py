"""The workflows a document shows, checked as the repository's own are: `make lint` runs
`python scripts/doc_workflows.py --check docs/gpu.md`.

A block is a ```yaml fence right after a line `<!-- workflow-check: NAME.yml -->`: the text people
copy is the text checked. Each goes into a temporary .github/workflows/NAME.yml, then actionlint
(with .github/actionlint.yaml: SGLang's runner labels) and zizmor (offline, .github/zizmor.yml) run on
them. A document with no such block is an error, so the check never passes on nothing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARK = re.compile(r"^<!-- workflow-check: ([A-Za-z0-9_.-]+\.ya?ml) -->$")


def workflow_blocks(text: str) -> list[tuple[str, int, str]]:
    """(file name, line of the fence, the YAML) of each marked block."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m:
            continue
        start = i + 1
        while start < len(lines) and not lines[start].strip():
            start += 1
        if start >= len(lines) or lines[start].strip() != "```yaml":
            raise ValueError(f"line {i + 1}: {m.group(1)}: the marker is not followed by a ```yaml block")
        end = next((j for j in range(start + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"line {start + 1}: {m.group(1)}: the ```yaml block is not closed")
        blocks.append((m.group(1), start + 1, "\n".join(lines[start + 1:end]) + "\n"))
    return blocks


def check(doc: Path, bin_dir: Path) -> int:
    blocks = workflow_blocks(doc.read_text())
    if not blocks:
        print(f"{doc}: no workflow to check (a ```yaml block after <!-- workflow-check: NAME.yml -->)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="doc-workflows-") as tmp:
        folder = Path(tmp) / ".github" / "workflows"
        folder.mkdir(parents=True)
        for name, _, text in blocks:
            (folder / name).write_text(text)
        files = [f".github/workflows/{name}" for name, _, _ in blocks]
        lint = subprocess.run([str(bin_dir / "actionlint"), "-config-file", str(REPO / ".github" / "actionlint.yaml"),
                               *files], capture_output=True, text=True, cwd=tmp)
        audit = subprocess.run([str(bin_dir / "zizmor"), "--offline", "--config", str(REPO / ".github" / "zizmor.yml"),
                                ".github/workflows"], capture_output=True, text=True, cwd=tmp)
    for name, line, _ in blocks:
        print(f"{doc}:{line}: {name}")
    if lint.returncode != 0 or audit.returncode != 0:
        for proc in (lint, audit):
            if proc.returncode != 0:
                print((proc.stdout + proc.stderr).replace(".github/workflows/", f"{doc}: the block "), file=sys.stderr)
        return 1
    print(f"{doc}: {len(blocks)} workflow(s): actionlint and zizmor clean")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="doc_workflows.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, required=True, metavar="DOC", help="the document (docs/gpu.md)")
    parser.add_argument("--bin", type=Path, default=Path(sys.executable).parent,
                        help="where actionlint and zizmor are (default: beside this Python)")
    args = parser.parse_args(argv)
    try:
        return check(args.check, args.bin)
    except (OSError, ValueError) as exc:
        print(f"{args.check}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
