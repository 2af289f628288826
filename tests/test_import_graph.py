"""The stages import one another in one direction only: no cycles, no back-imports.

Every module's imports are read with `ast` (module level, inside functions, under TYPE_CHECKING:
all of them), each module is mapped to its stage (the top-level subpackage or module of
sglang_spec_harness it belongs to), and every import of another stage must go to one that comes
earlier in STAGE_ORDER, the pipeline order (docs/internals.md, "Stages and their order"). Inside a
stage, the files import one another without cycles too: a cycle between two modules of one package
(through its `__init__.py` as well) means a shared piece sits in the wrong file. The checkers
themselves are tested on small packages with a planted back-import and planted cycles.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "sglang_spec_harness"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

# Each stage may import only the stages before it. `micro` stands apart: it imports no stage (but the
# package's version) and no stage imports it (the harness talks to it over HTTP, as to SGLang).
STAGE_ORDER = (
    "__init__",  # the package root: __version__
    "errors",  # HarnessInputError, one_line, the exit codes
    "vocabulary",  # verdicts, region names, rule kinds
    "import_root",
    "extras",
    "shipped",
    "files",  # atomic writes, the `latest` link
    "pages",  # numbers for people (every stage that prints one), the page machinery: templates, figure style
    "traces",  # before the scenario: a scenario's region rules are the analysis's RegionRule
    "scenario",
    "patches",
    "engines",
    "rundir",  # the run directory: the contract every later stage reads
    "verdict",
    "run",
    "report",
    "pipeline",  # the run as a library call: run -> check -> report
    "testing",  # the public API for other test suites (run + traces, the pipeline)
    "pytest_plugin",
    "releases",
    "sglang_cpu",
    "points",  # a scenario run at another commit or release: bisect and sweep share it
    "bisect",
    "history",
    "sweep",  # runs its points through points, ingests them into history
    "commands",
    "micro",
)


def stage_of(module: str) -> str:
    """`sglang_spec_harness.run.trial` -> `run`; the package itself -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """The dotted name of a source file under `root` (the folder holding the package), and whether it
    is a package's `__init__.py`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def imported_modules(path: Path, root: Path, package: str) -> Iterator[tuple[str, int]]:
    """(module, line) for every import of `package` in the file, relative ones resolved; `from X
    import name` counts as X.name when that is a module of the package, else as X."""
    name, is_package = module_name(path, root)
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [_submodule_or(base, alias.name, root) for alias in node.names]
        else:
            continue
        for target in targets:
            if target == package or target.startswith(package + "."):
                yield target, node.lineno


def _submodule_or(base: str, name: str, root: Path) -> str:
    candidate = root.joinpath(*base.split("."), name)
    return f"{base}.{name}" if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file() else base


def stage_imports(package_dir: Path) -> dict[tuple[str, str], list[str]]:
    """(importing stage, imported stage) -> where (`module:line`), for imports between stages."""
    root = package_dir.parent
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        name, _ = module_name(path, root)
        for target, line in imported_modules(path, root, package_dir.name):
            source, imported = stage_of(name), stage_of(target)
            if source != imported:
                edges.setdefault((source, imported), []).append(f"{name}:{line}")
    return edges


def module_imports(package_dir: Path) -> dict[tuple[str, str], list[str]]:
    """(importing module, imported module) -> where (`module:line`), for imports between two files
    of one stage (a package's `__init__` is a file of it too). The parent packages Python imports
    on the way are not edges: only what a file names."""
    root = package_dir.parent
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        name, _ = module_name(path, root)
        for target, line in imported_modules(path, root, package_dir.name):
            if target != name and stage_of(target) == stage_of(name):
                edges.setdefault((name, target), []).append(f"{name}:{line}")
    return edges


def back_imports(edges: dict[tuple[str, str], list[str]], order: tuple[str, ...]) -> list[str]:
    """Every import of a stage that is not earlier in `order` (an unlisted stage is always one)."""
    rank = {stage: i for i, stage in enumerate(order)}
    return [f"{source} -> {imported} ({', '.join(where)})" for (source, imported), where in sorted(edges.items())
            if source not in rank or imported not in rank or rank[imported] >= rank[source]]


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The stages (or modules) that reach themselves again: each strongly connected group of more
    than one (Tarjan's algorithm)."""
    graph: dict[str, list[str]] = {}
    for source, imported in edges:
        graph.setdefault(source, []).append(imported)
        graph.setdefault(imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            group.append(node)
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


# ---- the harness --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def edges() -> dict[tuple[str, str], list[str]]:
    return stage_imports(PACKAGE_DIR)


def test_every_stage_is_in_the_declared_order():
    stages = {stage_of(module_name(p, PACKAGE_DIR.parent)[0]) for p in PACKAGE_DIR.rglob("*.py")}
    assert stages == set(STAGE_ORDER)


def test_no_stage_imports_a_later_stage(edges):
    assert back_imports(edges, STAGE_ORDER) == []


def test_no_cycles_between_stages(edges):
    assert cycles(edges) == []


def test_no_cycles_between_the_files_of_a_stage():
    """Each group of modules of one stage that import one another in a circle, with the imports that
    close it (module level, inside functions or under TYPE_CHECKING alike)."""
    edges = module_imports(PACKAGE_DIR)
    found = [(group, sorted(w for (a, b), where in edges.items() if a in group and b in group for w in where))
             for group in cycles(edges)]
    assert found == []


def test_the_micro_engine_stands_apart(edges):
    """It imports only the package's version, and no stage imports it."""
    assert [pair for pair in edges if "micro" in pair] == [("micro", "__init__")]


def test_the_leaves_import_only_the_leaves_before_them(edges):
    """errors and the package root import nothing of the harness; vocabulary only the exit codes."""
    assert sorted(imported for source, imported in edges if source in ("__init__", "errors")) == []
    assert sorted(imported for source, imported in edges if source == "vocabulary") == ["errors"]


# ---- the checker, on a planted package ----------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    package_dir = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = package_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package_dir


def test_a_planted_back_import_inside_a_function_is_found(tmp_path):
    package_dir = _package(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from pkg.high import b\n    return b\n",
        "high/__init__.py": "",
        "high/b.py": "from pkg.low import a\n",
    })
    edges = stage_imports(package_dir)
    assert edges == {("low", "high"): ["pkg.low.a:2"], ("high", "low"): ["pkg.high.b:1"]}
    assert back_imports(edges, ("__init__", "low", "high")) == ["low -> high (pkg.low.a:2)"]
    assert cycles(edges) == [["high", "low"]]


def test_relative_imports_and_type_checking_imports_count(tmp_path):
    package_dir = _package(tmp_path, {
        "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import thing\n",
        "high/__init__.py": "from .. import low\n",
        "high/mid.py": "from ..low import x\nfrom . import other\n",
        "high/other.py": "",
    })
    edges = stage_imports(package_dir)
    assert edges == {("low", "high"): ["pkg.low:3"], ("high", "low"): ["pkg.high:1", "pkg.high.mid:1"]}
    assert back_imports(edges, ("__init__", "low", "high")) == ["low -> high (pkg.low:3)"]


def test_a_stage_left_out_of_the_order_is_a_violation(tmp_path):
    package_dir = _package(tmp_path, {"a.py": "import pkg.b\n", "b.py": ""})
    assert back_imports(stage_imports(package_dir), ("__init__", "b")) == ["a -> b (pkg.a:1)"]
    assert cycles(stage_imports(package_dir)) == []


def test_a_planted_cycle_inside_a_stage_is_found(tmp_path):
    """Between two files, one side under TYPE_CHECKING and the other inside a function; and through a
    package's `__init__`. A chain, and a cycle across stages, are not in-stage cycles."""
    package_dir = _package(tmp_path, {
        "low/__init__.py": "def pick():\n    from pkg.low.engine import run\n    return run\n",
        "low/engine.py": "from pkg.low import pick\n",
        "low/schema.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .analysis import f\n",
        "low/analysis.py": "def f():\n    from pkg.low import schema\n    return schema\n",
        "low/leaf.py": "",
        "low/chain.py": "from pkg.low import leaf\nfrom pkg.high import b\n",
        "high/__init__.py": "",
        "high/b.py": "from pkg.low import chain\n",
    })
    edges = module_imports(package_dir)
    assert edges == {
        ("pkg.low", "pkg.low.engine"): ["pkg.low:2"],
        ("pkg.low.engine", "pkg.low"): ["pkg.low.engine:1"],
        ("pkg.low.schema", "pkg.low.analysis"): ["pkg.low.schema:3"],
        ("pkg.low.analysis", "pkg.low.schema"): ["pkg.low.analysis:2"],
        ("pkg.low.chain", "pkg.low.leaf"): ["pkg.low.chain:1"],
    }
    assert cycles(edges) == [["pkg.low", "pkg.low.engine"], ["pkg.low.analysis", "pkg.low.schema"]]
    assert cycles(stage_imports(package_dir)) == [["high", "low"]]  # the stages' test's, not this one's
