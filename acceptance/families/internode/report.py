"""The internode family's section of the report: busbw across nodes per scope (all ranks, one GPU per node,
ring, each node's own group as a line), and the links' pair matrices."""

from __future__ import annotations

from typing import cast

from acceptance.families import internode
from acceptance.families.collectives.report import Point, bytes_of, distinct, panels
from acceptance.schema.report import (
    Busbw,
    Heading,
    Heatmap,
    Plot,
    ReportedRun,
    ReportSection,
    SectionBlock,
    Table,
    objects,
)


def _metrics(row: internode.InternodeRow) -> tuple[str, ...]:
    """Across-node figures are named under collectives.internode. or, in newer evidence, internode."""
    name = f"internode.{row.get('scope')}.{row['op']}.busbw_gbps@{row['size']}"
    return (name, f"collectives.{name}")


def _ranks(group: internode.ScopeGroup) -> str:
    return ",".join(str(r) for r in group.get("ranks_of_group") or [])


def _point(row: internode.InternodeRow) -> Point:
    return Point(row["op"], row["size"], bytes_of(row.get("size_bytes"), str(row["size"])), row.get("busbw_gbps"),
                 _metrics(row))  # fmt: skip


def section(run: ReportedRun) -> list[SectionBlock]:
    """Across nodes: each scope (all ranks, one GPU per node, ring) and each node's own group as a line."""
    rows: list[tuple[str, internode.InternodeRow]] = []
    for series in run.series("internode"):
        for r in cast(list[internode.InternodeRow], objects(series.result.get("rows"))):
            suffix = f" [{distinct(series.label)}]" if distinct(series.label) else ""
            groups = r.get("groups") or []
            if r.get("scope") == "intranode" and len(groups) > 1:
                # each node's group as a row of its own: the row's op and size, the group's figures
                rows += [
                    (f"node of ranks {_ranks(g)}{suffix}", cast(internode.InternodeRow, {**r, **g})) for g in groups
                ]
            else:
                rows.append((f"{r.get('scope', 'all')}{suffix}", r))
    blocks: list[SectionBlock] = []
    if rows:
        drawing = Busbw(panels(run, [(label, _point(r)) for label, r in rows]), "busbw (GB/s)")
        head = ["series", "op", "size", "ranks", "busbw (GB/s)", "time (us)", "#wrong"]
        table = [
            [label, r["op"], r["size"], r.get("ranks"), f"{r.get('busbw_gbps', 0):.2f}", f"{r.get('time_us', 0):.1f}",
             r.get("wrong")]
            for label, r in rows
        ]  # fmt: skip
        blocks += [Plot("internode", drawing, "busbw across nodes per series"), Table(head, table)]
    for index, matrix in enumerate(run.pair_matrices()):
        blocks.append(Plot(f"pairs-{index}", Heatmap(matrix), matrix.title))
    return [Heading("Links and across nodes"), *blocks] if blocks else []


REPORT = ReportSection(20, section)
