"""Small inline SVG charts for the run report (`jobs.report_html`): horizontal bars, one stacked
bar, and a histogram with marked values. Pure functions from numbers to SVG text; no scripts, no
external resources, colours passed in by the caller."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

FONT = 12
ROW = 22  # height of one bar row
LABEL = 150  # width of the label column of bar charts


@dataclass(frozen=True)
class Bar:
    """One bar: its label, value, the text written after it and its colour."""

    label: str
    value: float
    note: str
    color: str


@dataclass(frozen=True)
class Bin:
    """One histogram bin: values in [low, high), and how many."""

    low: int
    high: int
    count: int


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="{FONT}">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", fill: str = "#222") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{fill}">{escape(text)}</text>'
    )


def _rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" '
        f'fill="{color}"><title>{escape(tip)}</title></rect>'
    )


def bar_chart(bars: Sequence[Bar], title: str, width: int = 900) -> str:
    """Horizontal bars, one row each, scaled to the largest value; the note after each bar."""
    # the bars share what the labels and the longest note leave (a character is about 0.6 em)
    span = width - LABEL - 12 - max((len(bar.note) for bar in bars), default=0) * FONT * 0.6
    top = max((bar.value for bar in bars), default=0) or 1
    body = []
    for i, bar in enumerate(bars):
        y = i * ROW + 4
        length = span * bar.value / top
        body.append(_text(LABEL - 6, y + 13, bar.label, "end"))
        body.append(_rect(LABEL, y, length, ROW - 6, bar.color, f"{bar.label}: {bar.note}"))
        body.append(_text(LABEL + length + 6, y + 13, bar.note))
    return _svg(width, len(bars) * ROW + 8, body, title)


def stacked_bar(parts: Sequence[Bar], title: str, width: int = 900) -> str:
    """One bar split into parts in proportion to their values, with a legend row below."""
    total = sum(part.value for part in parts) or 1
    body, x = [], 0.0
    for part in parts:
        length = width * part.value / total
        body.append(_rect(x, 0, length, 24, part.color, f"{part.label}: {part.note}"))
        x += length
    x = 0.0
    for part in parts:
        body.append(_rect(x, 34, 12, 12, part.color, part.label))
        legend = f"{part.label} {part.note}"
        body.append(_text(x + 16, 45, legend))
        x += 16 + len(legend) * FONT * 0.6 + 14
    return _svg(max(width, int(x)), 52, body, title)


def histogram(
    bins: Sequence[Bin], marks: Sequence[tuple[str, float]], title: str, width: int = 900
) -> str:
    """Vertical bars over consecutive bins, a count axis, and labelled vertical lines at `marks`
    (e.g. min and max), their labels above the plot."""
    height, left, bottom, top_pad = 236, 44, 34, 38
    plot_w, plot_h = width - left - 10, height - bottom - top_pad
    base = top_pad + plot_h
    low, high = bins[0].low, bins[-1].high
    tallest = max(b.count for b in bins) or 1

    def x_of(value: float) -> float:
        return left + plot_w * (value - low) / ((high - low) or 1)

    body = [
        f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#888"/>',
        _text(left - 6, top_pad + 4, str(tallest), "end", "#555"),
        _text(left - 6, base, "0", "end", "#555"),
    ]
    for b in bins:
        x0, x1 = x_of(b.low), x_of(b.high)
        h = plot_h * b.count / tallest
        tip = f"{b.low}-{b.high - 1}: {b.count}"
        body.append(_rect(x0 + 1, base - h, x1 - x0 - 2, h, "#4c78a8", tip))
    step = max(1, len(bins) // 8)
    for i in range(0, len(bins) + 1, step):  # axis labels at every step-th bin edge
        edge = bins[i].low if i < len(bins) else high
        body.append(_text(x_of(edge), base + 14, str(edge), "middle", "#555"))
    for i, (label, value) in enumerate(marks):
        x, y = x_of(value), top_pad - 18 + 14 * (i % 2)
        body.append(
            f'<line x1="{x:.1f}" y1="{y + 4}" x2="{x:.1f}" y2="{base}" stroke="#e45756" '
            'stroke-width="2" stroke-dasharray="4 2"/>'
        )
        anchor = "start" if x < left + plot_w / 2 else "end"
        body.append(_text(x + (4 if anchor == "start" else -4), y, label, anchor, "#c03030"))
    body.append(_text(left + plot_w / 2, height - 4, "tokens per chunk", "middle", "#555"))
    return _svg(width, height, body, title)
