"""Numbers for people: the one place that writes a number, a percentage, a ratio and its interval, a
count or a range of counts, a duration or a size as every page, the Markdown summary, the terminal
and a sentence of an explanation shows it. Standard library only (a leaf: the CLI and the earlier
stages import it without the page machinery).

Anything that is not a number (None, a bool, text from a damaged file) is `MISSING` where a number
was expected, one spelling everywhere; `fmt` alone passes text through, for table cells that may
hold either.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "–"  # a value that is not there (an en dash, never "-", "?" or "n/a")


def _real(value: Any) -> float | int | None:
    """A finite number, or None for anything else (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def fmt(value: Any, digits: int = 3) -> str:
    """A number for people: a fixed number of significant digits; text passes through, None is `MISSING`."""
    if value is None:
        return MISSING
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    text = f"{value:.{digits}g}"
    # a whole number of more digits (1234.5, or 999.6 rounding up to 1e+03) is written out, not as 1e+03
    return f"{value:.0f}" if "e+" in text else text


def signed(value: Any, digits: int = 3) -> str:
    """`fmt` with a `+` on a positive number: a difference, `+12.5`, `-3`, `0`."""
    number = _real(value)
    return fmt(value, digits) if number is None or number <= 0 else "+" + fmt(value, digits)


def fixed(value: Any, decimals: int, unit: str = "") -> str:
    """A fixed number of decimals, then `unit` after a space: `fixed(12.345, 2, "ms")` -> `12.35 ms`."""
    number = _real(value)
    if number is None:
        return MISSING
    return f"{number:.{decimals}f}" + (f" {unit}" if unit else "")


def count(value: Any) -> str:
    """A count, or a median of counts: `2`, `2.5` (no trailing zeros)."""
    number = _real(value)
    if number is None:
        return MISSING
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def count_range(low: Any, high: Any) -> str:
    """Counts from `low` to `high`: `2` when they agree, else `1..3`."""
    return count(low) if low == high else f"{count(low)}..{count(high)}"


def per_replay(low: Any, high: Any, median: Any) -> str:
    """An op's count per replay: `2` when every replay ran it as often, else `1..3 (median 2)`."""
    return count(median) if low == high else f"{count_range(low, high)} (median {count(median)})"


def pct(value: Any, decimals: int = 1) -> str:
    """A fraction as a percentage, `0.0123` -> `1.2%`."""
    number = _real(value)
    return MISSING if number is None else f"{number * 100:.{decimals}f}%"


def signed_pct(value: Any, decimals: int = 1) -> str:
    """A relative change with its sign, `-0.05` -> `-5.0%`, `0.1` -> `+10.0%`."""
    number = _real(value)
    return MISSING if number is None else f"{number * 100:+.{decimals}f}%"


def ratio(value: Any) -> str:
    """A ratio of two measurements (candidate / baseline), four decimals: `0.9460`."""
    return fixed(value, 4)


def interval(low: Any, high: Any) -> str:
    """A ratio's interval: `[0.9340, 0.9590]`."""
    return f"[{ratio(low)}, {ratio(high)}]"


def p_value(value: Any) -> str:
    """A p-value, two significant digits: `0.031`, `1.2e-05`."""
    return fmt(value, 2) if _real(value) is not None else MISSING


def us(value: Any) -> str:
    """A duration given in microseconds: `12.3 µs`, `580 µs`, `9694 µs`, `12.3 ms` from 10 ms on."""
    number = _real(value)
    if number is None:
        return MISSING
    return f"{fmt(number / 1000)} ms" if abs(number) >= 10_000 else f"{fmt(float(number))} µs"


def ms(value: Any, decimals: int = 1) -> str:
    """A duration given in milliseconds: `12.3 ms`."""
    return fixed(value, decimals, "ms")


def seconds(value: Any, decimals: int | None = None) -> str:
    """A duration given in seconds, three significant digits (`0.5 s`, `14.2 s`, `306 s`), or
    `decimals` fixed ones (`14.20 s`)."""
    if decimals is not None:
        return fixed(value, decimals, "s")
    number = _real(value)
    return MISSING if number is None else f"{fmt(float(number))} s"


def megabytes(value: Any) -> str:
    """A size given in bytes, in MB (10^6 bytes): `123 MB`."""
    number = _real(value)
    return MISSING if number is None else f"{number / 1e6:.0f} MB"
