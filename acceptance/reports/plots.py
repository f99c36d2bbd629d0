"""The report's plots as PNG bytes (matplotlib's object API, no pyplot state, no display needed).

Every function returns None when matplotlib is not installed (``pip install 'cluster-acceptance[report]'``)
or there is nothing to draw; the report then says so instead of showing an empty frame.
"""

from __future__ import annotations

import importlib.util
import io
import math
from typing import Any

from acceptance.numbers import fmt
from acceptance.schema.report import Bars, Chart, Matrix, TimeChart
from acceptance.schema.report import Line as Line  # the figures to draw, as a family's section gives them
from acceptance.schema.report import Panel as Panel

PASS_COLOR, FAIL_COLOR, BOUND_COLOR, NEUTRAL = "#2b7bba", "#c62828", "#e08a00", "#7f8c8d"
DPI = 96


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _figure(panels: int, columns: int, panel_size: tuple[float, float]) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    columns = max(1, min(columns, panels))
    rows = math.ceil(panels / columns)
    fig = Figure(figsize=(panel_size[0] * columns, panel_size[1] * rows), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel().tolist()
    for spare in axes[panels:]:
        spare.set_visible(False)
    return fig, axes[:panels]


def _dress(ax: Any, title: str, grid_axis: str = "both", legend_at: str | None = None) -> None:
    """A panel's title, its light grid (on ``grid_axis``) and its legend at ``legend_at`` (None: none)."""
    ax.set_title(title, fontsize=11)
    ax.grid(True, axis=grid_axis, alpha=0.3)
    if legend_at is not None:
        ax.legend(fontsize=8, loc=legend_at)


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _size_label(size: float, _: Any = None) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size:g}"


def busbw(panels: list[Panel], ylabel: str) -> bytes | None:
    """busbw against message size (log 2), one panel per op; bounds as orange dashes, failures as red X."""
    if not available() or not panels:
        return None
    from matplotlib.ticker import FuncFormatter

    fig, axes = _figure(len(panels), 2 if len(panels) > 1 else 1, (5.2, 3.4))
    for ax, panel in zip(axes, panels, strict=True):
        for line in panel.lines:
            ax.plot(line.x, line.y, marker="o", markersize=4, label=line.label or None)
        if panel.bounds:
            xs = sorted(panel.bounds)
            ax.scatter(xs, [panel.bounds[x] for x in xs], marker="_", s=400, color=BOUND_COLOR, label="bound", zorder=3)
        if panel.failing:
            ax.scatter(*zip(*panel.failing, strict=True), marker="X", s=90, color=FAIL_COLOR, label="failed", zorder=4)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_size_label))
        ax.set_xlabel("message size (bytes, binary)")
        ax.set_ylabel(ylabel)
        labelled = any(line.label for line in panel.lines) or panel.bounds or panel.failing
        _dress(ax, panel.title, legend_at="upper left" if labelled else None)
    return _png(fig)


def per_gpu(charts: list[Bars]) -> bytes | None:
    """Bars per GPU, one panel per figure: the median as a line, the tolerance floor dashed, GPUs under it red."""
    if not available() or not charts:
        return None
    fig, axes = _figure(len(charts), 2 if len(charts) > 1 else 1, (5.2, 3.2))
    for ax, chart in zip(axes, charts, strict=True):
        labels = [label for label, _ in chart.bars]
        values = [value for _, value in chart.bars]
        colors = [FAIL_COLOR if v < chart.floor else PASS_COLOR for v in values]
        ax.bar(range(len(values)), values, color=colors)
        ax.axhline(chart.median, color="#333333", linewidth=1.2, label=f"median {fmt(chart.median)}")
        ax.axhline(chart.floor, color=BOUND_COLOR, linestyle="--", linewidth=1.2, label=f"tolerance {fmt(chart.floor)}")
        ax.set_xticks(range(len(values)), labels, rotation=30 if len(values) > 4 else 0, ha="right", fontsize=8)
        low = min([*values, chart.floor])
        ax.set_ylim(max(0.0, low - 0.15 * (max(values) - low + abs(low) * 0.1)), max(values) * 1.04)
        _dress(ax, f"{chart.title} ({chart.unit})", grid_axis="y", legend_at="lower right")
    return _png(fig)


def curves(charts: list[Chart]) -> bytes | None:
    """Line charts side by side, x is the step."""
    charts = [c for c in charts if c.lines]
    if not available() or not charts:
        return None
    from matplotlib.ticker import MaxNLocator

    fig, axes = _figure(len(charts), 3 if len(charts) == 3 else 2, (4.6 if len(charts) == 3 else 5.2, 3.4))
    for ax, chart in zip(axes, charts, strict=True):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for line in chart.lines:
            ax.plot(line.x, line.y, marker="o" if len(line.x) <= 12 else None, markersize=3, label=line.label)
        if chart.limit is not None:
            ax.axhline(chart.limit, color=BOUND_COLOR, linestyle="--", label=f"bound {chart.limit:g}")
        ax.set_xlabel("step")
        ax.set_ylabel(chart.ylabel)
        _dress(ax, chart.title, legend_at="best")
    return _png(fig)


def scaling(labels: list[str], values: list[float], efficiency: float | None, bound: float | None) -> bytes | None:
    """Per-GPU throughput on the baseline world and the full world, with the efficiency written on it."""
    if not available() or not values:
        return None
    fig, (ax,) = _figure(1, 1, (5.2, 3.0))
    ax.bar(labels, values, color=[NEUTRAL, PASS_COLOR][: len(values)])
    for i, value in enumerate(values):
        ax.annotate(fmt(value), (i, value), ha="center", va="bottom", fontsize=9)
    title = "scaling" + (f" efficiency {efficiency:.3f}" if efficiency is not None else "")
    title += f" (bound >= {bound:g})" if bound is not None else ""
    ax.set_ylabel("tokens/s per GPU")
    ax.set_ylim(0, max(values) * 1.15)
    _dress(ax, title, grid_axis="y")
    return _png(fig)


def heatmap(matrix: Matrix) -> bytes | None:
    """A pair matrix: rows send (or pair with) columns; each cell written, missing cells blank."""
    if not available() or not matrix.labels:
        return None
    import numpy as np

    n = len(matrix.labels)
    size = min(9.0, 2.2 + 0.6 * n)
    fig, (ax,) = _figure(1, 1, (size + 1.2, size))
    grid = np.array([[math.nan if v is None else v for v in row] for row in matrix.cells], dtype=float)
    shown = ax.imshow(grid, cmap="viridis")
    fig.colorbar(shown, ax=ax, label=matrix.what)
    ax.set_xticks(range(n), matrix.labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), matrix.labels, fontsize=8)
    if n <= 16:
        for (i, j), value in np.ndenumerate(grid):
            if math.isfinite(value):
                dark = shown.norm(value) < 0.5  # viridis is dark at its low end: white text there
                ax.text(j, i, fmt(float(value)), ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")  # fmt: skip
    ax.set_xlabel(matrix.columns)
    ax.set_ylabel(matrix.rows)
    ax.set_title(f"{matrix.title} ({matrix.what})" if matrix.what else matrix.title, fontsize=10)
    return _png(fig)


def over_time(charts: list[TimeChart]) -> bytes | None:
    """Line charts against time, two per row, every GPU a line of its own colour in each: a GPU that sags or
    throttles parts from the others where it happens."""
    charts = [c for c in charts if any(line.x for line in c.lines)]
    if not available() or not charts:
        return None
    fig, axes = _figure(len(charts), 2, (5.6, 3.3))
    for ax, chart in zip(axes, charts, strict=True):
        for line in chart.lines:
            ax.plot(line.x, line.y, linewidth=1.2, marker="o" if len(line.x) <= 12 else None, markersize=3,
                    label=line.label)  # fmt: skip
        ax.set_title(chart.title, fontsize=11)
        ax.set_xlabel("s")
        ax.set_ylabel(chart.ylabel)
        ax.grid(True, alpha=0.3)
        if len(chart.lines) <= 16:  # past that a legend hides the chart
            ax.legend(fontsize=7)
    return _png(fig)
