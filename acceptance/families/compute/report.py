"""Compute in the report: per GPU, each figure's bars with the median and tolerance, the slowest GPU named,
every GPU's row; and in the CSV export, one row per GPU per figure and the GPU each ``_min`` and
``_below_median`` figure names."""

from __future__ import annotations

from typing import cast

from acceptance.families import compute
from acceptance.json_types import JSONObject
from acceptance.numbers import fmt
from acceptance.schema import report


def _rows(result: JSONObject) -> list[compute.GpuRow]:
    """The compute probe's rows, one per GPU (rank on the CPU), as its result in the evidence holds them:
    older files may lack the newer keys, so a reader takes them with ``get``."""
    return cast(list[compute.GpuRow], report.objects(result.get("rows")))


def _gpu(row: compute.GpuRow) -> str:
    """Host and GPU index, or rank on the CPU path: short enough for a bar label."""
    return f"{row['host']} GPU {row['gpu']}" if row.get("gpu") is not None else f"{row['host']} rank {row['rank']}"


def _unit(row: compute.GpuRow) -> str:
    """The GPU (or rank) and its UUID, as an export row names it."""
    where = f"GPU {row['gpu']}" if row.get("gpu") is not None else f"rank {row.get('rank')}"
    return f"{where} {row['uuid']}" if row.get("uuid") else where


def section(run: report.ReportedRun) -> list[report.SectionBlock]:
    blocks: list[report.SectionBlock] = []
    for series in run.series("compute"):
        rows = _rows(series.result)
        config = report.object_of(series.result.get("config"))
        tolerance = report.number(config.get("tolerance", 0.1)) or 0.0
        median_of = str(config.get("median_of", "cluster"))
        charts, notes = [], []
        for figure, (what, unit) in compute.FIGURES.items():
            found = compute.shortfalls(rows, figure, median_of)
            if not found:
                continue
            worst = found[0]
            floor = worst.median * (1 - tolerance)
            bars = [(_gpu(r), float(cast(float, r.get(figure)))) for r in rows if figure in r]
            charts.append(report.Bars(what, unit, bars, worst.median, floor))
            slowest = cast(compute.GpuRow, worst.row)
            uuid = slowest.get("uuid") or "no UUID (CPU)"
            notes.append(
                f"{what}: slowest {_gpu(slowest)} ({uuid}) at {fmt(worst.value)} {unit}, "
                f"{worst.fraction:.1%} under {worst.scope} {fmt(worst.median)} (tolerance {tolerance:.0%})"
            )
        shown = [f for f in compute.FIGURES if any(isinstance(r.get(f), (int, float)) for r in rows)]
        head = ["rank", "host", "GPU", "UUID", *(f"{compute.FIGURES[f][0]} ({compute.FIGURES[f][1]})" for f in shown)]
        table = [[r.get("rank"), r.get("host"), r.get("gpu"), r.get("uuid"), *(r.get(f) for f in shown)] for r in rows]
        again = series.key != "compute"  # a re-measure of figures out of bounds (the family's Remeasure)
        blocks += (
            [report.Text(f"{series.key}: measured again, the figures out of bounds the first time")] if again else []
        )
        name = f"per-gpu-{series.key}{series.label}" if again else f"per-gpu{series.label}"
        blocks.append(report.Plot(name, report.PerGpu(charts), "per-GPU figures with median and tolerance"))
        blocks += [report.Text(n) for n in notes] + [report.Table(head, table)]
    return [report.Heading("Per GPU"), *blocks] if blocks else []


def culprits(run: report.ReportedRun) -> dict[str, report.Culprit]:
    """compute.<figure>_min and _below_median -> the GPU they name (the slowest, the furthest under)."""
    out: dict[str, report.Culprit] = {}
    for series in run.series("compute"):
        rows = _rows(series.result)
        median_of = str(report.object_of(series.result.get("config")).get("median_of", "cluster"))
        for figure in compute.FIGURES:
            found = compute.shortfalls(rows, figure, median_of)
            if found:
                slowest = cast(compute.GpuRow, min(found, key=lambda s: s.value).row)
                furthest = cast(compute.GpuRow, found[0].row)
                out[f"compute.{figure}_min"] = report.Culprit(str(slowest["host"]), _unit(slowest))
                out[f"compute.{figure}_below_median"] = report.Culprit(str(furthest["host"]), _unit(furthest))
    return out


def units(run: report.ReportedRun) -> list[report.UnitFigure]:
    """Every GPU's figure of every per-GPU figure it measured."""
    out = []
    for series in run.series("compute"):
        for r in _rows(series.result):
            for figure, (_, unit) in compute.FIGURES.items():
                if isinstance(value := r.get(figure), (int, float)):
                    out.append(report.UnitFigure(f"compute.{figure}", value, unit, str(r.get("host") or ""), _unit(r)))
    return out


REPORT = report.ReportSection(30, section, units=units, culprits=culprits)
