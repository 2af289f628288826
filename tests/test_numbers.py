"""Numbers for people (sglang_spec_harness/pages/numbers.py) read as documented, and it is the one
place that writes them: no other module formats a number with a format spec of its own, and no other
spells a missing value."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sglang_spec_harness.pages import numbers as n

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "sglang_spec_harness"
# A format spec that writes a number its own way: a precision with a type, a percentage, a sign, grouping.
NUMBER_SPEC = re.compile(r"[eEfFgG%+,]|\.\d")
# Modules that still format numbers themselves, and why.
NOT_YET = {
    "verdict/": "the rules' and statistics' reasons (i39-rules' area): to route through pages/numbers.py",
    "history/analyze.py": "the op mix's hash key, not for people",
}
# The missing value as a literal, where MISSING belongs: none left
LITERAL_NOT_YET: set[str] = set()


def test_numbers_for_people():
    assert [n.fmt(x) for x in (None, True, "x", 12, 0.0, 0.012345, 1234.5, float("nan"))] == [
        "–", "True", "x", "12", "0", "0.0123", "1234", "nan"]
    assert n.fmt(3.14159, 2) == "3.1" and n.fmt(999.6) == "1000" and n.fmt(-12345.6) == "-12346" and n.fmt(1.2e-05) == "1.2e-05"
    assert [n.signed(x) for x in (12.5, -3, 0, None)] == ["+12.5", "-3", "0", "–"]
    assert [n.fixed(x, 2, "ms") for x in (12.345, 0, None, True)] == ["12.35 ms", "0.00 ms", "–", "–"]


def test_percentages_ratios_and_intervals():
    assert [n.pct(x) for x in (0.0123, 1, None, True, float("nan"))] == ["1.2%", "100.0%", "–", "–", "–"]
    assert n.pct(0.05412, 2) == "5.41%" and n.pct(0.95, 0) == "95%"
    assert [n.signed_pct(x) for x in (-0.05, 0.1, 0.0, None)] == ["-5.0%", "+10.0%", "+0.0%", "–"]
    assert n.signed_pct(0.159, 0) == "+16%"
    assert [n.ratio(x) for x in (0.946, 1, None)] == ["0.9460", "1.0000", "–"]
    assert n.interval(0.934, 0.959) == "[0.9340, 0.9590]" and n.interval(None, 1.0) == "[–, 1.0000]"
    assert [n.p_value(x) for x in (0.0312, 1.2e-05, 0.5, None)] == ["0.031", "1.2e-05", "0.5", "–"]


def test_counts_and_ranges():
    assert [n.count(x) for x in (2, 2.0, 2.5, None)] == ["2", "2", "2.5", "–"]
    assert [n.count_range(lo, hi) for lo, hi in ((2, 2), (1, 3), (None, None))] == ["2", "1..3", "–"]
    assert n.per_replay(2, 2, 2.0) == "2" and n.per_replay(1, 3, 2) == "1..3 (median 2)"


def test_durations_and_sizes():
    assert [n.us(x) for x in (12.345, 500, 580.0, 999.6, 9694.013, 12_345, None)] == [
        "12.3 µs", "500 µs", "580 µs", "1000 µs", "9694 µs", "12.3 ms", "–"]
    assert [n.ms(x) for x in (12.345, None)] == ["12.3 ms", "–"]
    assert [n.seconds(x) for x in (0.5, 4.0, 14.23, 305.7, None)] == ["0.5 s", "4 s", "14.2 s", "306 s", "–"]
    assert n.seconds(14.23, 1) == "14.2 s"
    assert [n.megabytes(x) for x in (123_456_789, None)] == ["123 MB", "–"]


def _sources() -> list[tuple[str, ast.Module]]:
    return [(path.relative_to(PACKAGE_DIR).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(PACKAGE_DIR.rglob("*.py")) if path.relative_to(PACKAGE_DIR).as_posix() != "pages/numbers.py"]


def _number_specs(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, spec) of each f-string field that formats a number itself (`{x:.2f}`, `{x:+.1%}`); a
    precision on a `!r` or `!s` field cuts text, not a number."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None and node.conversion == -1:
            spec = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.format_spec.values)
            if NUMBER_SPEC.search(spec):
                found.append((node.lineno, spec))
    return found


def test_no_module_formats_a_number_on_its_own():
    found = [f"{name}:{line}: {spec}" for name, tree in _sources() for line, spec in _number_specs(tree)
             if not any(name.startswith(prefix) for prefix in NOT_YET)]
    assert found == []


def test_the_check_finds_a_planted_format_spec():
    tree = ast.parse('a = f"{x:.2f} {y:+.1%} {z:,} {w:>8} {k:02d} {t!r:.60} {u:g}"\n')
    assert _number_specs(tree) == [(1, ".2f"), (1, "+.1%"), (1, ","), (1, "g")]


def test_a_missing_value_has_one_spelling():
    """Python code says MISSING, templates `{{ missing }}`: no literal en dash, `n/a`, or a lone `-` or
    `?` standing in for a value."""
    literals = [f"{name}:{node.lineno}" for name, tree in _sources() if name not in LITERAL_NOT_YET
                for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in ("–", "n/a")]
    assert literals == []
    templates = PACKAGE_DIR / "pages" / "templates"
    cells = [f"{path.name}: {hit}" for path in sorted(templates.glob("*.html"))
             for hit in re.findall(r"%\}\s*[-–?]\s*\{%|>\s*[–?]\s*<", path.read_text(encoding="utf-8"))]
    assert cells == []
