"""The end-of-session table for the terminal: every figure as checked, and the training table with
tokens per dollar where the profile names a price per GPU-hour. The plugin writes these lines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceptance.reports import training, view
from acceptance.reports.table import render


def lines(data: Mapping[str, Any]) -> list[str]:
    found = view.figures(data, failing_first=False)  # as the run printed them, test by test
    out: list[str] = []
    if found:
        nodes = any(f.node for f in found)
        head = ["metric", "value", "unit", "bound", "verdict"] + (["node"] if nodes else [])
        figures = [
            [f.metric, f.value, f.unit, f.bound or "-", f.verdict.upper(), *([f.node] if nodes else [])] for f in found
        ]
        out += render(head, figures).splitlines()
    runs = training.runs(data)
    if runs:
        head, rows = training.table(runs, view.usd_per_gpu_hour(data))
        out += ["", *render(head, rows).splitlines()]
    return out
