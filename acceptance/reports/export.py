"""Figures as CSV for spreadsheets and dashboards: one row per checked figure, then one per unit (a GPU) per
per-unit figure, as each family gives them (``ReportSection.units``). Columns: metric, value, unit, bound,
verdict, node, gpu, source, test."""

from __future__ import annotations

import csv
import io

from acceptance.evidence.model import EvidenceDoc
from acceptance.reports import view
from acceptance.reports.sections import reporting
from acceptance.schema.report import Culprit

COLUMNS = ("metric", "value", "unit", "bound", "verdict", "node", "gpu", "source", "test")


def rows(data: EvidenceDoc) -> list[dict[str, str | float | None]]:
    run = view.Reported(data)
    culprits: dict[str, Culprit] = {}
    for _, report in reporting():
        culprits.update(report.culprits(run) if report.culprits else {})
    out: list[dict[str, str | float | None]] = []
    for f in view.figures(data):
        named = culprits.get(f.metric)
        node = f.node or (named.node if named else "")
        out.append({"metric": f.metric, "value": f.value, "unit": f.unit, "bound": f.bound, "verdict": f.verdict,
                    "node": node, "gpu": named.unit if named else "", "source": f.source, "test": f.test})  # fmt: skip
    for _, report in reporting():
        for u in report.units(run) if report.units else []:
            out.append({"metric": u.metric, "value": u.value, "unit": u.unit_of_measure, "bound": "",
                        "verdict": "info", "node": u.node, "gpu": u.unit, "source": "",
                        "test": "per-GPU measurement"})  # fmt: skip
    return out


def csv_text(data: EvidenceDoc) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows(data):
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()
