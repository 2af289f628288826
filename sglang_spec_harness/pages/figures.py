"""What every page's figures share: matplotlib's style, the colours, the inline-SVG writer.

A figure is drawn with `new_figure` under `plt.rc_context(STYLE)` and returned as inline SVG text
by `to_svg` (no external fonts or images). Colours are fixed per variant and per region so that the
same thing has the same colour in every figure, on every page.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from markupsafe import Markup
from matplotlib.figure import Figure

from sglang_spec_harness.vocabulary import DRAFT_DECODE, DRAFT_EXTEND, NO_REGION, PREFILL, TARGET_VERIFY

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # the rcParams names (a Literal), in matplotlib's stubs

VARIANT_COLOURS = {"baseline": "#4c72b0", "candidate": "#dd8452"}
EXTRA_VARIANT_COLOURS = ["#55a868", "#8172b3", "#937860", "#da8bc3"]
REGION_COLOURS = {
    DRAFT_DECODE: "#6baed6",
    DRAFT_EXTEND: "#fd8d3c",
    TARGET_VERIFY: "#74c476",
    PREFILL: "#9e9ac8",
    NO_REGION: "#bdbdbd",
}
EXTRA_REGION_COLOURS = ["#e7ba52", "#ce6dbd", "#843c39", "#393b79"]

STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # text stays text: searchable, no embedded glyphs, no font files
    "text.parse_math": False,  # names come from files: a `$` is a character, not mathtext
    "svg.hashsalt": "harness-report",  # stable clip-path ids, so a rebuilt report diffs cleanly
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial", "sans-serif"],
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.axisbelow": True,
}


def variant_colour(variant: str, order: Sequence[str] = ()) -> str:
    if variant in VARIANT_COLOURS:
        return VARIANT_COLOURS[variant]
    others = [v for v in order if v not in VARIANT_COLOURS]
    i = others.index(variant) if variant in others else abs(hash(variant))
    return EXTRA_VARIANT_COLOURS[i % len(EXTRA_VARIANT_COLOURS)]


def region_colour(region: str, order: Sequence[str] = ()) -> str:
    if region in REGION_COLOURS:
        return REGION_COLOURS[region]
    others = [r for r in order if r not in REGION_COLOURS]
    i = others.index(region) if region in others else 0
    return EXTRA_REGION_COLOURS[i % len(EXTRA_REGION_COLOURS)]


_svg_counter = 0


def to_svg(fig: Figure, label: str) -> Markup:
    """The figure as an <svg> element for inlining: no XML prolog, ids unique within the page."""
    global _svg_counter
    _svg_counter += 1
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]
    # Several SVGs share one HTML document, where ids are global: prefix them per figure.
    prefix = f"f{_svg_counter}-"
    svg = re.sub(r'id="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", svg)
    svg = re.sub(r'xlink:href="#([^"]+)"', lambda m: f'xlink:href="#{prefix}{m.group(1)}"', svg)
    svg = svg.replace("<svg ", f'<svg role="img" aria-label="{html.escape(label, quote=True)}" class="figure-svg" ', 1)
    # The one piece of markup the page templates take as is (every other value is escaped): safe by
    # construction, as it is made here, in this process, by matplotlib's SVG writer, which escapes
    # every text it draws (names from run directories included: `text.parse_math` is off, so they
    # stay plain text), plus ids and the label escaped above.
    return Markup(svg)


def new_figure(width: float, height: float, ncols: int = 1, **kwargs) -> tuple[Figure, list]:
    """A figure of `ncols` axes side by side, in the pages' style."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False, **kwargs)
    return fig, list(axes[0])


def integer_ticks(ax) -> None:
    """Whole numbers only on the x axis (run, trial and round numbers)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
