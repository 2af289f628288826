"""The base environment under the prefix (`.sglang-cpu`), what `make sglang-cpu` builds: where its
python is, the stamp (`installed.json`) that says it is built and current, and the imports that prove
it works. `install.py` builds it; `releases.py` builds each release's environment on top of it.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from sglang_spec_harness.releases.environments import read_json_stamp
from sglang_spec_harness.sglang_cpu import PACKAGE_DIR, SGLANG_VERSION

REQUIREMENTS = PACKAGE_DIR / "requirements.txt"
REQUIREMENTS_NO_DEPS = PACKAGE_DIR / "requirements-no-deps.txt"
TINY_MODELS = PACKAGE_DIR / "tiny_models.py"
STAMP = "installed.json"
DEFAULT_PREFIX = Path(".sglang-cpu")
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")
# Imported once the venv is built, with the shims, so that a broken environment fails here, not at
# a server's start: the worker the baseline patch rewrites and the HTTP server.
SMOKE_IMPORTS = ("sglang.srt.speculative.eagle_worker_v2", "sglang.srt.entrypoints.http_server")
# The import check, run by the venv's python with the harness alone on its path.
SMOKE_CODE = "import sglang_spec_harness.sglang_cpu.shims\n" + "".join(f"import {m}\n" for m in SMOKE_IMPORTS)
DEFAULT_SGLANG_SOURCE = f"sglang=={SGLANG_VERSION}"


def venv_python(prefix: Path) -> Path:
    return prefix / "venv" / "bin" / "python"


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def expected_stamp() -> dict:
    return {"sglang": SGLANG_VERSION, "torch": TORCH_SPEC,
            "requirements": _digest(REQUIREMENTS, REQUIREMENTS_NO_DEPS), "tiny_models": _digest(TINY_MODELS)}


def read_stamp(prefix: Path) -> dict | None:
    return read_json_stamp(prefix / STAMP)


def is_current(prefix: Path, sglang_source: str | None = None) -> bool:
    """Built, from these requirement files and models; from `sglang_source` too where one is asked for
    (None: whatever SGLang was installed, as the tests ask)."""
    stamp = read_stamp(prefix)
    return (stamp is not None and venv_python(prefix).exists()
            and all(stamp.get(k) == v for k, v in expected_stamp().items())
            and (sglang_source is None or stamp.get("sglang_source", DEFAULT_SGLANG_SOURCE) == sglang_source))
