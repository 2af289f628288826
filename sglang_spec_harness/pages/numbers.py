"""Numbers for people, as every page and the Markdown summary write them."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    """A number for people: a fixed number of significant digits; text and None pass through."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"


def pct(value: Any) -> str:
    """A fraction as a percentage, `0.0123` -> `1.2%`; anything not a number is a dash."""
    return f"{value * 100:.1f}%" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def signed_pct(value: float | None) -> str:
    """A relative change with its sign, `-0.05` -> `-5.0%`, `0.1` -> `+10.0%`; None is a dash."""
    return "–" if value is None else f"{value * 100:+.1f}%"
