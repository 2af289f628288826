"""The run report's figures: matplotlib, returned as inline SVG text (no external fonts or images).

Every function takes plain data (lists, dicts) and returns an SVG string (marked safe for the page
templates by `to_svg`), so that the figures can be tested without a run directory. The style,
colours and SVG writer are the pages' own (`sglang_spec_harness.pages.figures`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt

from sglang_spec_harness.pages import numbers
from sglang_spec_harness.pages.figures import (
    STYLE,
    VARIANT_COLOURS,
    integer_ticks,
    new_figure,
    region_colour,
    to_svg,
    variant_colour,
)

MATCH_COLOUR = "#d62728"  # kernels/ops that match the count pattern (the softmax)


def _two_lines(region: str) -> str:
    """`DRAFT_DECODE` -> `DRAFT\nDECODE`, so that neighbouring tick labels do not collide."""
    return region.replace("_", "\n", 1)


@dataclass(frozen=True)
class CountBar:
    region: str
    variant: str
    per_replay_min: float | None
    per_replay_max: float | None
    total: int
    replays: int


def counts_figure(bars: Sequence[CountBar], pattern: str, variants: Sequence[str]) -> str:
    """Left: pattern matches per replay (bar = max, tick = min); right: total matches; per region."""
    with plt.rc_context(STYLE):
        regions = list(dict.fromkeys(b.region for b in bars))
        fig, (ax_replay, ax_total) = new_figure(9.5, 3.2, 2)
        width = 0.8 / max(len(variants), 1)
        for vi, variant in enumerate(variants):
            colour = variant_colour(variant, variants)
            for ri, region in enumerate(regions):
                bar = next((b for b in bars if b.region == region and b.variant == variant), None)
                x = ri + (vi - (len(variants) - 1) / 2) * width
                if bar is None:
                    ax_replay.text(x, 0, numbers.MISSING, ha="center", va="bottom", fontsize=7, color="#777")
                    continue
                high = bar.per_replay_max or 0
                ax_replay.bar(x, high, width * 0.92, color=colour, label=variant if ri == 0 else None)
                if bar.per_replay_min is not None and bar.per_replay_min != bar.per_replay_max:
                    ax_replay.hlines(bar.per_replay_min, x - width * 0.4, x + width * 0.4, colors="black", linewidth=1)
                ax_replay.text(x, high, numbers.count(high), ha="center", va="bottom", fontsize=8)
                ax_total.bar(x, bar.total, width * 0.92, color=colour, label=variant if ri == 0 else None)
                ax_total.text(x, bar.total, f"{bar.total}\n/{bar.replays}", ha="center", va="bottom", fontsize=7)
        for ax, title in (
            (ax_replay, f"{pattern} per replay (bar: max, line: min)"),
            (ax_total, f"{pattern} in the profile (label: total / replays)"),
        ):
            ax.set_xticks(range(len(regions)), [_two_lines(r) for r in regions])
            ax.set_title(title, fontsize=9)
            ax.margins(y=0.25)
            ax.grid(axis="x", visible=False)
        ax_replay.set_ylabel("matches per replay")
        ax_total.set_ylabel("matches")
        ax_replay.legend(frameon=False, fontsize=8)
        return to_svg(fig, f"{pattern} count per region and replay")


def region_time_figure(
    per_variant: dict[str, dict[str, float]], unit_label: str, regions_order: Sequence[str] = ()
) -> str:
    """Stacked horizontal bars: time per cycle in each region, one bar per variant."""
    with plt.rc_context(STYLE):
        variants = list(per_variant)
        regions = list(dict.fromkeys([*regions_order, *(r for v in variants for r in per_variant[v])]))
        fig, (ax,) = new_figure(9.5, 0.6 + 0.55 * len(variants))
        for yi, variant in enumerate(variants):
            left = 0.0
            for region in regions:
                value = per_variant[variant].get(region, 0.0)
                if value <= 0:
                    continue
                ax.barh(yi, value, left=left, color=region_colour(region, regions), edgecolor="white",
                        label=region if yi == 0 or region not in per_variant[variants[0]] else None)
                if value > 0.06 * max(sum(per_variant[v].values()) for v in variants):
                    ax.text(left + value / 2, yi, numbers.fixed(value, 0), ha="center", va="center", fontsize=7)
                left += value
            ax.text(left, yi, f"  {numbers.fixed(left, 0)} {unit_label}", va="center", fontsize=8)
        ax.set_yticks(range(len(variants)), variants)
        ax.invert_yaxis()
        ax.set_xlabel(f"{unit_label} per cycle (one target verify)")
        ax.margins(x=0.12)
        ax.grid(axis="y", visible=False)
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        ax.legend(unique.values(), unique.keys(), frameon=False, fontsize=8, ncol=min(len(unique), 5),
                  loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(variants) < 3 else -0.2))
        return to_svg(fig, "time per cycle per region")


@dataclass(frozen=True)
class TrialPoint:
    index: int  # run order
    variant: str
    value: float
    launch: str | None = None  # warm modes: the launch that served the block (marker shape)


LAUNCH_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def tpot_figure(points: Sequence[TrialPoint], variants: Sequence[str], ratio: float | None,
                ci: tuple[float, float] | None, min_gain: float | None, confidence: float | None) -> str:
    """Left: median TPOT of each timed trial in run order; middle: per-variant distribution;
    right: the candidate/baseline ratio with its confidence interval against the required gain."""
    with plt.rc_context(STYLE):
        fig, (ax_order, ax_dist, ax_ratio) = new_figure(10, 3.2, 3, gridspec_kw={"width_ratios": [3, 1.6, 1.2]})
        launches = sorted({p.launch for p in points if p.launch is not None})
        for variant in variants:
            pts = [p for p in points if p.variant == variant]
            colour = variant_colour(variant, variants)
            if not launches:
                ax_order.plot([p.index for p in pts], [p.value for p in pts], "o", color=colour, label=variant, ms=6)
                continue
            # Warm modes: one marker shape per launch of the arm (its k-th launch), colour per arm.
            own = sorted({p.launch for p in pts if p.launch is not None})
            for k, launch in enumerate(own):
                lp = [p for p in pts if p.launch == launch]
                ax_order.plot([p.index for p in lp], [p.value for p in lp], LAUNCH_MARKERS[k % len(LAUNCH_MARKERS)],
                              color=colour, ms=5, label=f"{variant} {_launch_label(launch)}")
        order_sorted = sorted(points, key=lambda p: p.index)
        ax_order.plot([p.index for p in order_sorted], [p.value for p in order_sorted], "-", color="#999", lw=0.7, zorder=0)
        unit = "block" if launches else "timed trial"
        ax_order.set_xlabel(f"{unit} index (run order)")
        integer_ticks(ax_order)
        ax_order.set_ylabel("median TPOT (ms)")
        ax_order.legend(frameon=False, fontsize=7, ncol=2 if len(launches) > 2 else 1)
        ax_order.set_title(f"per {unit}, in run order" + (", marker = launch" if launches else ""), fontsize=9)

        data = [[p.value for p in points if p.variant == v] for v in variants]
        present = [i for i, d in enumerate(data) if d]
        if present:
            box = ax_dist.boxplot([data[i] for i in present], positions=present, widths=0.5, patch_artist=True,
                                  showfliers=False, medianprops={"color": "black"})
            for patch, i in zip(box["boxes"], present):
                patch.set_facecolor(variant_colour(variants[i], variants))
                patch.set_alpha(0.35)
            for i in present:
                xs = [i + (k - (len(data[i]) - 1) / 2) * 0.06 for k in range(len(data[i]))]
                ax_dist.plot(xs, data[i], "o", color=variant_colour(variants[i], variants), ms=4)
        ax_dist.set_xticks(range(len(variants)), variants)
        ax_dist.set_xlim(-0.6, len(variants) - 0.4)
        ax_dist.set_title("distribution per variant", fontsize=9)
        ax_dist.grid(axis="x", visible=False)

        title = "candidate / baseline"
        if ratio is not None:
            colour = "#333"
            if ci is not None:
                ax_ratio.errorbar([0], [ratio], yerr=[[max(ratio - ci[0], 0)], [max(ci[1] - ratio, 0)]], fmt="o",
                                  color=colour, capsize=6, lw=1.5)
                conf = f"{numbers.pct(confidence, 0)} CI" if confidence else "CI"
                title += f"\n{numbers.ratio(ratio)}, {conf} {numbers.interval(*ci)}"
            else:
                ax_ratio.plot([0], [ratio], "o", color=colour)
                title += f"\n{numbers.ratio(ratio)} (no interval)"
            ax_ratio.axhline(1.0, color="#777", lw=1, ls="--", label="1.0 = no change")
            if min_gain:
                ax_ratio.axhline(1 - min_gain, color="#2ca02c", lw=1.2, ls=":", label=f"{numbers.ratio(1 - min_gain)} = required")
            ax_ratio.legend(frameon=False, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.02))
            ax_ratio.margins(y=0.3)
        else:
            ax_ratio.text(0, 0.5, "no ratio\n(too few trials)", ha="center", va="center", transform=ax_ratio.transAxes)
        ax_ratio.set_title(title, fontsize=9)
        ax_ratio.set_xlim(-0.5, 0.5)
        ax_ratio.set_xticks([])
        ax_ratio.grid(axis="x", visible=False)
        fig.tight_layout()
        return to_svg(fig, "TPOT per trial and ratio")


def _launch_label(launch: str) -> str:
    """`launches/02-baseline-launch1` -> `launch 1`."""
    tail = launch.rsplit("-launch", 1)
    return f"launch {tail[1]}" if len(tail) == 2 else launch.rsplit("/", 1)[-1]


def pairs_figure(rounds: Sequence[int], ratios: Sequence[float], ratio: float | None,
                 ci: tuple[float, float] | None, min_gain: float | None) -> str:
    """The paired differences: candidate/baseline TPOT of each round (or repetition), in run order,
    with the rule's estimate and interval; log scale, so a 10% gain and a 10% loss look alike."""
    with plt.rc_context(STYLE):
        fig, (ax,) = new_figure(9.5, 2.6)
        ax.plot([r + 1 for r in rounds], ratios, "o-", color="#555", ms=4, lw=0.7, label="candidate / baseline, per pair")
        if ratio is not None:
            ax.axhline(ratio, color="#dd8452", lw=1.5, label=f"estimate {numbers.ratio(ratio)}")
        if ci is not None:
            ax.axhspan(ci[0], ci[1], color="#dd8452", alpha=0.15, label=f"interval {numbers.interval(*ci)}")
        ax.axhline(1.0, color="#777", lw=1, ls="--", label="1.0 = no change")
        if min_gain:
            ax.axhline(1 - min_gain, color="#2ca02c", lw=1.2, ls=":", label=f"{numbers.ratio(1 - min_gain)} = required")
        ax.set_yscale("log")
        from matplotlib.ticker import FormatStrFormatter, LogLocator

        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0)))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.2f"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter(""))
        ax.set_xlabel("round (pair of blocks, same prompts)")
        integer_ticks(ax)
        ax.set_ylabel("TPOT ratio")
        ax.legend(frameon=False, fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.28))
        return to_svg(fig, "paired differences per round")


def looks_figure(rounds: Sequence[int], ratios: Sequence[float], lows: Sequence[float], highs: Sequence[float],
                 min_gain: float | None) -> str:
    """An adaptive run's looks: the TPOT ratio and its interval at each look (each at that look's own
    level), narrowing as rounds are added, against the required ratio and 1.0."""
    with plt.rc_context(STYLE):
        fig, (ax,) = new_figure(9.5, 2.6)
        lower = [r - lo for r, lo in zip(ratios, lows)]
        upper = [hi - r for r, hi in zip(ratios, highs)]
        ax.errorbar(list(rounds), list(ratios), yerr=[lower, upper], fmt="o", color="#dd8452", ms=5, capsize=4,
                    lw=1.2, label="ratio and interval at the look's level")
        ax.axhline(1.0, color="#777", lw=1, ls="--", label="1.0 = no change")
        if min_gain:
            ax.axhline(1 - min_gain, color="#2ca02c", lw=1.2, ls=":", label=f"{numbers.ratio(1 - min_gain)} = required")
        ax.set_xlabel("rounds at the look")
        integer_ticks(ax)
        ax.set_ylabel("TPOT ratio")
        ax.legend(frameon=False, fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.28))
        return to_svg(fig, "the interval at each look")


def accept_figure(points: Sequence[TrialPoint], variants: Sequence[str], tolerance: float | None) -> str:
    """Accept length of every timed trial in run order, per variant, with the baseline's band."""
    with plt.rc_context(STYLE):
        fig, (ax,) = new_figure(9.5, 2.8)
        for variant in variants:
            pts = [p for p in points if p.variant == variant]
            ax.plot([p.index for p in pts], [p.value for p in pts], "o-", color=variant_colour(variant, variants),
                    label=variant, ms=6, lw=0.8)
        base = sorted(p.value for p in points if p.variant == "baseline")
        if base and tolerance:
            mid = base[len(base) // 2] if len(base) % 2 else (base[len(base) // 2 - 1] + base[len(base) // 2]) / 2
            ax.axhspan(mid * (1 - tolerance), mid * (1 + tolerance), color=VARIANT_COLOURS["baseline"], alpha=0.12,
                       label=f"baseline median ±{numbers.pct(tolerance)}")
        ax.set_xlabel("timed trial or block index (run order)")
        integer_ticks(ax)
        ax.set_ylabel("accept length (tokens / verify)")
        ax.margins(y=0.3)
        ax.legend(frameon=False, fontsize=8, ncol=3)
        return to_svg(fig, "accept length per trial")


@dataclass(frozen=True)
class TimelineBar:
    lane: str  # "region" or a stream/thread name
    name: str
    start_us: float  # relative to the cycle start
    dur_us: float
    region: str
    matched: bool = False  # matches the count pattern


def _merge_close(ranges: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, width) ranges with gaps below `gap` (under a pixel) merged: the same picture,
    a fraction of the SVG."""
    merged: list[list[float]] = []
    for start, width in sorted(ranges):
        if merged and start <= merged[-1][0] + merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], start + width - merged[-1][0])
        else:
            merged.append([start, width])
    return [(start, width) for start, width in merged]


def timeline_figure(per_variant: dict[str, list[TimelineBar]], pattern: str, unit: str) -> str:
    """One panel per variant, a shared time axis: regions on the top lane, kernels/ops below,
    pattern matches in red."""
    with plt.rc_context(STYLE):
        variants = list(per_variant)
        lanes_of = {v: list(dict.fromkeys(b.lane for b in bars)) for v, bars in per_variant.items()}
        heights = [max(len(lanes_of[v]), 1) + 0.6 for v in variants]
        fig, axes = plt.subplots(len(variants), 1, figsize=(10, 0.45 * sum(heights) + 0.9), sharex=True,
                                 squeeze=False, gridspec_kw={"height_ratios": heights})
        regions_all = list(dict.fromkeys(b.region for bars in per_variant.values() for b in bars))
        span_us = max((b.start_us + b.dur_us for bars in per_variant.values() for b in bars), default=1.0)
        for ax, variant in zip(axes[:, 0], variants):
            lanes = lanes_of[variant]
            # One broken_barh per lane and colour (thousands of CPU ops stay one SVG path each);
            # matches drawn last and at least 0.3% of the axis wide: a 5 µs softmax must stay visible.
            groups: dict[tuple[int, str, bool], list[tuple[float, float]]] = {}
            for bar in per_variant[variant]:
                is_region = bar.lane == "regions"
                colour = region_colour(bar.region, regions_all) if is_region else (
                    MATCH_COLOUR if bar.matched else "#7f7f7f")
                width = max(bar.dur_us, span_us * (0.003 if bar.matched else 0.0005))
                groups.setdefault((lanes.index(bar.lane), colour, bar.matched), []).append((bar.start_us, width))
                if is_region:
                    ax.text(bar.start_us + bar.dur_us / 2, lanes.index(bar.lane), bar.region, ha="center",
                            va="center", fontsize=7, clip_on=True)
            for (y, colour, matched), ranges in sorted(groups.items(), key=lambda item: item[0][2]):
                height = 0.8 if lanes[y] == "regions" else 0.6
                if lanes[y] != "regions":
                    ranges = _merge_close(ranges, gap=span_us * 0.001)
                ax.broken_barh(ranges, (y - height / 2, height), facecolors=colour,
                               edgecolor="white" if lanes[y] == "regions" else "none", linewidth=0.5,
                               zorder=3 if matched else 2)
            ax.set_yticks(range(len(lanes)), lanes)
            ax.invert_yaxis()
            ax.set_title(variant, fontsize=9, loc="left", color=variant_colour(variant, variants), fontweight="bold")
            ax.grid(axis="y", visible=False)
        axes[-1, 0].set_xlim(0, span_us * 1.01)
        axes[-1, 0].set_xlabel(f"µs from the start of the cycle ({unit}; red = {pattern})")
        fig.tight_layout()
        return to_svg(fig, "timeline of one cycle")
