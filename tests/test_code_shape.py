"""The package's functions stay readable: none longer than MAX_FUNCTION_LINES (a long one is split
where a reader would split it, not wrapped in an exception list)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sglang_spec_harness"
MAX_FUNCTION_LINES = 80


def long_functions(root: Path, limit: int) -> list[str]:
    """`path:line name (N lines)` for every function or method in `root` longer than `limit` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_the_limit():
    assert long_functions(PACKAGE, MAX_FUNCTION_LINES) == []


def test_the_check_counts_nested_functions_and_methods_and_spares_the_limit(tmp_path):
    def body(n: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(n))

    source = ("def at_limit():\n" + body(79, "    ")                          # lines 1-80: 80 lines
              + "def over():\n" + body(80, "    ")                            # 81-161: 81 lines
              + "class C:\n    def method(self):\n        def inner():\n"   # 162, 163, 164
              + body(80, "            ") + "        return inner\n")          # method 163-245: 83 lines
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(source)
    assert long_functions(tmp_path / "pkg", 80) == [
        "pkg/m.py:81 over (81 lines)", "pkg/m.py:163 method (83 lines)", "pkg/m.py:164 inner (81 lines)"]
