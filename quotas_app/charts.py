"""Charts as server-side SVG, for the admin's Usage dashboard: geometry only, here; the
template ``admin/quotas_app/stacked_bars.svg`` draws it with presentation attributes (the
Content-Security-Policy forbids inline styles and scripts), and each bar carries a ``<title>``
that the browser shows as its tooltip."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

# Tableau 10: distinct on a light and a dark background alike.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")
OTHERS_FILL = "#9c9c9c"

WIDTH, HEIGHT = 760, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 8, 10, 24
X_LABELS_MAX = 8
Y_TICKS = 4

Number = int | float | Decimal


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    fill: str
    title: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class Chart:
    title: str
    width: int
    height: int
    rects: list[Rect]
    x_labels: list[Label]
    y_ticks: list[Label]
    legend: list[tuple[str, str]]  # (name, fill)
    plot_left: int
    plot_right: int
    empty: bool
    axis_prefix: str = ""  # "$": a chart of money, whose emptiness may be a price of $0
    note: str = ""  # what the chart says when empty, if not about model calls

    @property
    def money(self) -> bool:
        return self.axis_prefix == "$"

    @property
    def middle(self) -> tuple[float, float]:
        """The plot's centre, where an empty chart says so."""
        return (self.plot_left + self.plot_right) / 2, (TOP + self.height - BOTTOM) / 2


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k not below ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def compact(value: float, prefix: str = "") -> str:
    """An axis label: ``0``, ``750``, ``1.5k``, ``2M``; ``$0.25`` with a prefix."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{prefix}{value / size:.3g}{suffix}"
    return f"{prefix}{value:.3g}"


def fills(series: list[str], others: str) -> dict[str, str]:
    return {
        name: OTHERS_FILL if name == others else PALETTE[i % len(PALETTE)]
        for i, name in enumerate(series)
    }


def _day_labels(days: list[date], slot: float, most: int = X_LABELS_MAX) -> list[Label]:
    """The days under the bars, at most ``most`` of them, evenly spread."""
    step = max(1, math.ceil(len(days) / most))
    return [
        Label(round(LEFT + (i + 0.5) * slot, 2), HEIGHT - 6, f"{day:%b} {day.day}")
        for i, day in enumerate(days)
        if i % step == 0
    ]


def _value_ticks(top: float, plot_h: float, axis_prefix: str) -> list[Label]:
    """``Y_TICKS`` + 1 values up the left side, from 0 to ``top``."""
    return [
        Label(
            LEFT - 6,
            round(TOP + plot_h - k / Y_TICKS * plot_h, 2),
            compact(top * k / Y_TICKS, axis_prefix),
        )
        for k in range(Y_TICKS + 1)
    ]


def stacked_days(
    *,
    title: str,
    days: list[date],
    series: list[str],
    values: Mapping[str, Mapping[date, Number]],
    fmt: Callable[[Number], str],
    axis_prefix: str = "",
    others: str = "",
    width: int = WIDTH,
    whole: bool = False,
) -> Chart:
    """One bar per day, its series stacked in ``series`` order from the bottom up; ``width``
    units wide (a narrower chart for a phone keeps its labels readable)."""
    colour = fills(series, others)
    day_totals = [sum(float(values.get(s, {}).get(d, 0)) for s in series) for d in days]
    most = max(day_totals, default=0)
    # Counts (``whole``): ticks on whole numbers, not 0.25 of a run.
    top = math.ceil(nice_ceiling(most / Y_TICKS)) * Y_TICKS if whole else nice_ceiling(most)
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(days), 1)
    gap = slot * 0.15 if slot > 4 else 0
    rects: list[Rect] = []
    for i, day in enumerate(days):
        base = float(TOP + plot_h)
        for name in series:
            value = values.get(name, {}).get(day, 0)
            if not value:
                continue
            height = float(value) / top * plot_h
            base -= height
            rects.append(
                Rect(
                    x=round(LEFT + i * slot + gap / 2, 2),
                    y=round(base, 2),
                    width=round(max(slot - gap, 0.5), 2),
                    height=round(max(height, 0.5), 2),
                    fill=colour[name],
                    title=f"{day:%Y-%m-%d} · {name}: {fmt(value)}",
                )
            )
    return Chart(
        title=title,
        width=width,
        height=HEIGHT,
        rects=rects,
        x_labels=_day_labels(days, slot, max(2, X_LABELS_MAX * width // WIDTH)),
        y_ticks=_value_ticks(top, plot_h, axis_prefix),
        legend=[(name, colour[name]) for name in series],
        plot_left=LEFT,
        plot_right=width - RIGHT,
        empty=not rects,
        axis_prefix=axis_prefix,
    )


def share(value: Number, largest: Number, width: int = 100) -> float:
    """The length of a table's bar: ``value`` of ``largest`` in ``width`` units."""
    if not largest or not value:
        return 0.0
    return round(max(float(value) / float(largest) * width, 0.5), 2)
