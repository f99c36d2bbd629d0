"""The families' sections of the report: each family says what its section shows (``Behaviour.report``, in the
family's package: ``acceptance.schema.report``), the report draws it, in the sections' places."""

from __future__ import annotations

from typing import Any

from acceptance.evidence.model import EvidenceDoc
from acceptance.profile.registry import FAMILIES
from acceptance.reports import plots
from acceptance.reports.blocks import Block, Image, Text
from acceptance.reports.view import Reported
from acceptance.schema.family import Family
from acceptance.schema.report import (
    Busbw,
    Curves,
    Drawing,
    Heatmap,
    OverTime,
    PerGpu,
    Plot,
    ReportSection,
    Scaling,
    SectionBlock,
)

NO_PLOT = "No plot: matplotlib is not installed (pip install 'cluster-acceptance[report]')."


def image(name: str, png: bytes | None, alt: str) -> list[Block]:
    if png is None:
        return [Text(NO_PLOT, note=True)] if not plots.available() else []
    return [Image(name, png, alt)]


def draw(drawing: Drawing) -> bytes | None:
    """The PNG of a drawing; None where matplotlib is not installed or there is nothing to draw."""
    if isinstance(drawing, Busbw):
        return plots.busbw(drawing.panels, drawing.ylabel)
    if isinstance(drawing, PerGpu):
        return plots.per_gpu(drawing.charts)
    if isinstance(drawing, Curves):
        return plots.curves(drawing.charts)
    if isinstance(drawing, Scaling):
        return plots.scaling(drawing.labels, drawing.values, drawing.efficiency, drawing.bound)
    if isinstance(drawing, OverTime):
        return plots.over_time(drawing.charts)
    assert isinstance(drawing, Heatmap)
    return plots.heatmap(drawing.matrix)


def drawn(found: list[SectionBlock]) -> list[Block]:
    """A section's blocks with each plot drawn (or the note that it could not be)."""
    out: list[Block] = []
    for block in found:
        out += image(block.name, draw(block.drawing), block.alt) if isinstance(block, Plot) else [block]
    return out


def reporting() -> list[tuple[Family[Any], ReportSection]]:
    """The families with a section, in the sections' places."""
    found = [(f, f.behaviour.report) for f in FAMILIES if f.behaviour.report is not None]
    return sorted(found, key=lambda fr: fr[1].place)


def section(family: Family[Any], data: EvidenceDoc) -> list[Block]:
    """``family``'s section of the report on ``data``, drawn; none where the family has none."""
    return drawn(family.behaviour.report.blocks(Reported(data))) if family.behaviour.report else []


def sections(data: EvidenceDoc) -> list[Block]:
    """Every family's section, in their places."""
    run = Reported(data)
    return [b for _, report in reporting() for b in drawn(report.blocks(run))]
