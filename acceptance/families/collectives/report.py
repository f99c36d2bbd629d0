"""The collectives' section of the report: busbw against message size per op (bounds and failed points
marked), and nccl-tests' table. Its busbw panels are the internode family's too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from acceptance.families import collectives
from acceptance.schema import report
from acceptance.schema.sizes import parse_size


@dataclass(frozen=True)
class Point:
    """One op at one size of a busbw plot: a row of the collectives' or the internode probe's result."""

    op: str
    size: str
    bytes: float
    busbw_gbps: float | None
    metrics: tuple[str, ...]  # the names its figure may have been checked under (the spellings it may have)


def panels(run: report.ReportedRun, points: Sequence[tuple[str, Point]]) -> list[report.Panel]:
    """One panel per op; a line per series label, points sorted by size (one line per node, no zigzag)."""
    failing = run.failing()
    out_panels = []
    for op in dict.fromkeys(p.op for _, p in points):
        lines: dict[str, list[Point]] = {}
        for label, point in points:
            if point.op == op:
                lines.setdefault(label, []).append(point)
        out, bounds, bad = [], {}, []
        for label, mine in lines.items():
            mine.sort(key=lambda p: p.bytes)
            out.append(report.Line(label, [p.bytes for p in mine], [p.busbw_gbps for p in mine]))
            for p in mine:
                floor = next((b for b in map(run.lower_bound, p.metrics) if b is not None), None)
                if floor is not None:
                    bounds[p.bytes] = floor
                if failing.intersection(p.metrics) and p.busbw_gbps is not None:
                    bad.append((p.bytes, p.busbw_gbps))
        if len(out) == 1:  # one line needs no legend entry, even when several nodes measured it alike
            out = [report.Line("", out[0].x, out[0].y)]
        out_panels.append(report.Panel(op, out, bounds, bad))
    return out_panels


def distinct(label: str) -> str:
    """A series label worth showing: the nodes that measured something of their own, not "every node"."""
    return "" if label == report.EVERY_NODE else label


def bytes_of(size_bytes: object, size: str) -> float:
    """The message size in bytes: as the row gives it (the collectives' rows), else from its spelling."""
    return float(size_bytes) if isinstance(size_bytes, (int, float)) and size_bytes else float(parse_size(size))


def _spread(row: collectives.CollectiveRow) -> str:
    """The timed windows' busbw spread, (max - min) / median, in %; "-" in evidence from before the windows."""
    found = row.get("window_spread")
    return "-" if found is None else f"{100 * found:.1f}"


def _bytes(row: collectives.CollectiveRow) -> float:
    return bytes_of(row.get("size_bytes"), str(row["size"]))


def point(row: collectives.CollectiveRow, metrics: tuple[str, ...]) -> Point:
    return Point(row["op"], row["size"], _bytes(row), row.get("busbw_gbps"), metrics)


def section(run: report.ReportedRun) -> list[report.SectionBlock]:
    runs = run.series("collectives")
    # the collectives probe's rows (evidence holds JSON; older files may lack the newer keys: read with get)
    rows = [
        (distinct(s.label), cast(collectives.CollectiveRow, r))
        for s in runs
        for r in report.objects(s.result.get("rows"))
    ]
    if not rows:
        return []
    first = runs[0].result
    nccl = first.get("backend") == "nccl"
    backend = f"NCCL {first.get('nccl_version')}, algorithm {first.get('nccl_algo')}" if nccl else first.get("backend")
    about = f"{backend}, {first.get('dtype')}; busbw = algbw x nccl-tests' bus factor; GB = 1e9 B; sizes binary."
    points = [(label, point(r, (f"collectives.{r['op']}.busbw_gbps@{r['size']}",))) for label, r in rows]
    ops = list(dict.fromkeys(r["op"] for _, r in rows))
    # nccl-tests' columns (size, count, type, op, time, algbw, busbw, #wrong), then how steady and how timed
    head = ["size (B)", "count", "type", "op", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong", "spread (%)",
            "timing"]  # fmt: skip
    many = any(label for label, _ in rows)
    table = [
        [int(_bytes(r)), r.get("count", "-"), first.get("dtype", "-"), r["op"], f"{r.get('time_us', 0):.1f}",
         f"{r.get('algbw_gbps', 0):.2f}", f"{r.get('busbw_gbps', 0):.2f}", r.get("wrong"), _spread(r),
         r.get("timing", "")]
        + ([label] if many else [])
        for label, r in sorted(rows, key=lambda lr: (ops.index(lr[1]["op"]), _bytes(lr[1]), lr[0]))
    ]  # fmt: skip
    fold = f"{len(table)} rows, nccl-tests' columns" if len(table) > 20 else ""
    return [
        report.Heading("Collectives"),
        report.Text(about, note=True),
        report.Plot("busbw", report.Busbw(panels(run, points), "busbw (GB/s)"),
             "busbw against message size per op, bounds and failed points marked"),
        report.Table(head + (["node"] if many else []), table, folded=fold),
    ]  # fmt: skip


REPORT = report.ReportSection(10, section)
