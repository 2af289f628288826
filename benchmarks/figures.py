"""What every benchmark's committed JSON shares: paths that read the same on any machine."""

from __future__ import annotations

import json
import re
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
