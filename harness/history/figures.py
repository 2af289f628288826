"""The trend page's chart: one series, one small figure, drawn with the run report's figure
machinery (`harness.report.figures`: same style, same inline-SVG writer)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import matplotlib.pyplot as plt

from harness.report import figures

REGRESSION_COLOUR = "#cf222e"
IMPROVEMENT_COLOUR = "#1a7f37"
SEGMENT_COLOUR = "#57606a"


def series_figure(values: Sequence[float], change_points: Sequence[tuple[int, bool]], *, colour: str,
                  title: str, ylabel: str, label: str) -> str:
    """Values in run order (x: run number), segment means between change points, and each change
    point as a vertical line before its first run (red: a regression, green: an improvement)."""
    with plt.rc_context(figures.STYLE):
        fig, (ax,) = figures.new_figure(5.6, 2.1)
        xs = list(range(1, len(values) + 1))
        ax.plot(xs, values, "-o", color=colour, markersize=3.5, linewidth=1)
        bounds = [0, *(i for i, _ in change_points), len(values)]
        for start, end in itertools.pairwise(bounds):
            if end > start:
                mean = sum(values[start:end]) / (end - start)
                ax.hlines(mean, start + 0.7, end + 0.3, colors=SEGMENT_COLOUR, linestyles="-", linewidth=1.6, alpha=0.7)
        for index, regression in change_points:
            ax.axvline(index + 0.5, color=REGRESSION_COLOUR if regression else IMPROVEMENT_COLOUR, linestyle="--",
                       linewidth=1.4)
        ax.set_title(title, fontsize=8.5, loc="left")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xlabel("run (oldest first)", fontsize=8)
        ax.set_xlim(0.5, max(len(values), 1) + 0.5)
        figures.integer_ticks(ax)
        low, high = min(values), max(values)
        if low == high:  # a flat series: give it some room instead of a zero-height axis
            pad = abs(low) * 0.1 or 1.0
            ax.set_ylim(low - pad, high + pad)
        return figures.to_svg(fig, label)
