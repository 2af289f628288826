"""The optional parts of the install (pyproject.toml's extras) and the one-line error when one is missing.

The core install (`pip install sglang-spec-harness`) runs `harness validate`, `analyze`, `check`,
`compare` and `run --dry-run`, and the Python API `sglang_spec_harness.traces`. Commands that need more check
for it before they start, so that a missing extra is one line and exit 2, not a traceback halfway.
"""

from __future__ import annotations

import importlib.util

from sglang_spec_harness.errors import HarnessInputError

DISTRIBUTION = "sglang-spec-harness"

# extra -> the modules whose absence means it is not installed (pyproject.toml says the versions)
EXTRAS: dict[str, tuple[str, ...]] = {
    "micro": ("torch", "fastapi", "uvicorn"),  # the built-in micro engine's server
    "report": ("matplotlib", "jinja2"),  # the HTML pages: the run report, the trend page, the bisection page
    "history": ("sqlalchemy",),  # the results database
    "parquet": ("pyarrow",),  # `harness history export --format parquet`
}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install is not an installed one
        return False


def missing_modules(extra: str) -> list[str]:
    return [module for module in EXTRAS[extra] if not installed(module)]


def install_hint(extras: list[str]) -> str:
    """"needs the [report] extra: pip install 'sglang-spec-harness[report]'" (several: "the [a] and [b] extras")."""
    names = " and ".join(f"[{extra}]" for extra in extras)
    return (f"needs the {names} extra{'s' if len(extras) > 1 else ''}: "
            f"pip install '{DISTRIBUTION}[{','.join(extras)}]'")


def require_extras(*extras: str) -> None:
    """HarnessInputError naming every extra of `extras` that is not installed in this interpreter."""
    missing = [extra for extra in extras if missing_modules(extra)]
    if missing:
        raise HarnessInputError(install_hint(missing))


def extra_of_module(module: str) -> str | None:
    """The extra that provides a top-level module (e.g. from ModuleNotFoundError.name), if any."""
    top = module.partition(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)
