"""Figures as CSV for spreadsheets and dashboards: one row per checked figure, then one per GPU per
per-GPU figure. Columns: metric, value, unit, bound, verdict, node, gpu, source, test."""

from __future__ import annotations

import csv
import io
from typing import cast

from acceptance.evidence.model import EvidenceDoc
from acceptance.families.compute import FIGURES, GpuRow, shortfalls
from acceptance.json_types import JSONObject
from acceptance.reports import view

COLUMNS = ("metric", "value", "unit", "bound", "verdict", "node", "gpu", "source", "test")


def _gpu_rows(result: JSONObject) -> list[GpuRow]:
    """The compute probe's rows, one per GPU (rank on the CPU), as its result in the evidence holds them:
    older files may lack the newer keys, so a reader takes them with ``get``."""
    return cast(list[GpuRow], view.objects(result.get("rows")))


def _gpu(row: GpuRow) -> str:
    where = f"GPU {row['gpu']}" if row.get("gpu") is not None else f"rank {row.get('rank')}"
    return f"{where} {row['uuid']}" if row.get("uuid") else where


def _culprits(data: EvidenceDoc) -> dict[str, GpuRow]:
    """compute.<figure>_min and _below_median -> the GPU row they name (the slowest, furthest under)."""
    out: dict[str, GpuRow] = {}
    for run in view.series(data, "compute"):
        rows = _gpu_rows(run.result)
        median_of = str(view.object_of(run.result.get("config")).get("median_of", "cluster"))
        for figure in FIGURES:
            found = shortfalls(rows, figure, median_of)
            if found:
                out[f"compute.{figure}_min"] = cast(GpuRow, min(found, key=lambda s: s.value).row)
                out[f"compute.{figure}_below_median"] = cast(GpuRow, found[0].row)
    return out


def rows(data: EvidenceDoc) -> list[dict[str, str | float | None]]:
    culprits = _culprits(data)
    out = []
    for f in view.figures(data):
        gpu = culprits.get(f.metric)
        node = f.node or (str(gpu["host"]) if gpu else "")
        out.append({"metric": f.metric, "value": f.value, "unit": f.unit, "bound": f.bound, "verdict": f.verdict,
                    "node": node, "gpu": _gpu(gpu) if gpu else "", "source": f.source, "test": f.test})  # fmt: skip
    for run in view.series(data, "compute"):
        for r in _gpu_rows(run.result):
            for figure, (_, unit) in FIGURES.items():
                if isinstance(value := r.get(figure), (int, float)):
                    out.append({"metric": f"compute.{figure}", "value": value, "unit": unit, "bound": "",
                                "verdict": "info", "node": r.get("host", ""), "gpu": _gpu(r), "source": "",
                                "test": "per-GPU measurement"})  # fmt: skip
    return out


def csv_text(data: EvidenceDoc) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows(data):
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()
