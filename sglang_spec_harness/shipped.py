"""The scenarios that ship with the harness: `harness run NAME` and `harness init DIR`.

A wheel carries them in `sglang_spec_harness/scenarios/` (copied there by setup.py); a source checkout or an
editable install has them in the repository's `scenarios/`, next to the package.

Paths in a scenario that start with `./` or `../` are relative to the scenario file (the SGLang-CPU
scenarios name `../.sglang-cpu/venv/bin/python`). Inside an installed package they would point into
site-packages, so such a scenario runs by name only from a source checkout; elsewhere
`harness init DIR` writes the scenarios to DIR/scenarios/, where `../.sglang-cpu` is DIR/.sglang-cpu
(`python -m sglang_spec_harness.sglang_cpu.install --prefix DIR/.sglang-cpu` builds it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sglang_spec_harness.errors import HarnessInputError

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_SCENARIO = "micro_topk1.yaml"


def shipped_scenarios_dir() -> Path | None:
    """Where the shipped scenarios are: the wheel's copy, else a checkout's `scenarios/`; None without either."""
    for candidate in (PACKAGE_DIR / "scenarios", PACKAGE_DIR.parent / "scenarios"):
        if (candidate / DEFAULT_SCENARIO).is_file():
            return candidate
    return None


def inside_the_package(folder: Path) -> bool:
    return folder.resolve().is_relative_to(PACKAGE_DIR)


def names_relative_paths(value: Any) -> bool:
    """Whether a scenario (as read from YAML) has a value that starts with `./` or `../`."""
    if isinstance(value, dict):
        return any(names_relative_paths(v) for v in value.values())
    if isinstance(value, list):
        return any(names_relative_paths(v) for v in value)
    return isinstance(value, str) and value.startswith(("./", "../"))


def shipped_files() -> list[Path]:
    """The scenario files and their JSON schema, sorted (empty without shipped scenarios)."""
    folder = shipped_scenarios_dir()
    if folder is None:
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".yaml", ".json"))


def shipped_names() -> list[str]:
    return [p.stem for p in shipped_files() if p.suffix == ".yaml"]


def scenario_path(argument: str) -> Path:
    """`harness run`'s SCENARIO: an existing file as given (as always), else a shipped scenario's name
    (`micro_topk1`, or `micro_topk1.yaml`) when it names no folder. Otherwise the path as given, for
    the loader's own message."""
    given = Path(argument)
    if given.exists() or "/" in argument or "\\" in argument:
        return given
    name = argument.removesuffix(".yaml")
    folder = shipped_scenarios_dir()
    shipped = folder / f"{name}.yaml" if folder is not None else None
    if shipped is None or not shipped.is_file():
        names = ", ".join(shipped_names()) or "none in this install"
        raise HarnessInputError(f"{argument}: no such file, nor a shipped scenario of that name (shipped: {names})")
    if inside_the_package(shipped) and names_relative_paths(yaml.safe_load(shipped.read_text(encoding="utf-8"))):
        # ../.sglang-cpu from inside site-packages means nothing: the user's own copy decides where it is
        raise HarnessInputError(
            f"{name}: this scenario names paths relative to its file (../.sglang-cpu/...); write the scenarios "
            f"out with `harness init DIR` and run DIR/scenarios/{name}.yaml")
    return shipped
