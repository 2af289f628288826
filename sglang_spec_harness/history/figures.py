"""The trend page's chart: one series, one small figure, drawn with the pages' figure machinery
(`sglang_spec_harness.pages.figures`: the run report's style and inline-SVG writer)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt

from sglang_spec_harness.pages import figures

REGRESSION_COLOUR = "#cf222e"
IMPROVEMENT_COLOUR = "#1a7f37"
SEGMENT_COLOUR = "#57606a"
CHANGE_COLOUR = "#57606a"
NOT_CONFIRMED_COLOUR = "#bf8700"
# How a change point reads (history/direction.py) -> its line's colour.
READING_COLOUR = {"regression": REGRESSION_COLOUR, "improvement": IMPROVEMENT_COLOUR, "change": CHANGE_COLOUR,
                  "not confirmed": NOT_CONFIRMED_COLOUR}
ACK_MARK = "✓ intended"


@dataclass(frozen=True)
class ChangeMark:
    """A change point as the chart draws it: where (the index of its first run after), how it reads,
    and whether it was acknowledged as intended."""

    index: int
    reading: str
    acknowledged: bool = False


def series_figure(values: Sequence[float], change_points: Sequence[ChangeMark], *, colour: str,
                  title: str, ylabel: str, label: str, xlabels: Sequence[str] | None = None,
                  xlabel: str = "run (oldest first)") -> str:
    """Values in run order (x: run number, or a sweep's point labels: `xlabels`), segment means
    between change points, and each change point as a vertical line before its first run (red: a
    regression, green: an improvement, amber: a timing change not confirmed side by side, grey: a
    change that is neither, e.g. another output hash, or a count no rule governs); an acknowledged
    one dotted, with its mark at the top."""
    with plt.rc_context(figures.STYLE):
        fig, (ax,) = figures.new_figure(5.6, 2.1)
        xs = list(range(1, len(values) + 1))
        ax.plot(xs, values, "-o", color=colour, markersize=3.5, linewidth=1)
        bounds = [0, *(mark.index for mark in change_points), len(values)]
        for start, end in itertools.pairwise(bounds):
            if end > start:
                mean = sum(values[start:end]) / (end - start)
                ax.hlines(mean, start + 0.7, end + 0.3, colors=SEGMENT_COLOUR, linestyles="-", linewidth=1.6, alpha=0.7)
        for mark in change_points:
            line = READING_COLOUR.get(mark.reading, CHANGE_COLOUR)
            ax.axvline(mark.index + 0.5, color=line, linestyle=":" if mark.acknowledged else "--", linewidth=1.4)
            if mark.acknowledged:
                ax.annotate(ACK_MARK, (mark.index + 0.5, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -9),
                            textcoords="offset points", fontsize=7, color=line)
        ax.set_title(title, fontsize=8.5, loc="left")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_xlim(0.5, max(len(values), 1) + 0.5)
        if xlabels is not None:
            long = len(xlabels) > 6 or max((len(x) for x in xlabels), default=0) > 8
            ax.set_xticks(xs, list(xlabels), rotation=45 if long else 0, ha="right" if long else "center", fontsize=7.5)
        else:
            figures.integer_ticks(ax)
        low, high = min(values), max(values)
        if low == high:  # a flat series: give it some room instead of a zero-height axis
            pad = abs(low) * 0.1 or 1.0
            ax.set_ylim(low - pad, high + pad)
        return figures.to_svg(fig, label)
