"""The report's sections for the network and the GPUs: collectives, across nodes, per GPU, health."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from pydantic import ValidationError

from acceptance.evidence.model import EvidenceDoc
from acceptance.families.collectives import CollectiveRow
from acceptance.families.compute import FIGURES, GpuRow, shortfalls
from acceptance.families.internode import InternodeRow, ScopeGroup
from acceptance.json_types import JSONObject, JSONValue
from acceptance.numbers import fmt
from acceptance.reports import pairs, plots, view
from acceptance.reports.blocks import Block, Heading, Image, Table, Text
from acceptance.schema.bounds import Threshold, limits
from acceptance.schema.sizes import parse_size
from acceptance.verdicts import figure_failed

NO_PLOT = "No plot: matplotlib is not installed (pip install 'cluster-acceptance[report]')."


def image(name: str, png: bytes | None, alt: str) -> list[Block]:
    if png is None:
        return [Text(NO_PLOT, note=True)] if not plots.available() else []
    return [Image(name, png, alt)]


def lower_bound(data: EvidenceDoc, metric: str) -> float | None:
    raw = view.thresholds(data).get(metric)
    try:
        return limits(Threshold.model_validate(raw))[0] if raw else None
    except ValidationError:
        return None


@dataclass(frozen=True)
class Point:
    """One op at one size of a busbw plot: a row of the collectives' or the internode probe's result."""

    op: str
    size: str
    bytes: float
    busbw_gbps: float | None
    metrics: tuple[str, ...]  # the names its figure may have been checked under (the spellings it may have)


def _panels(data: EvidenceDoc, points: list[tuple[str, Point]]) -> list[plots.Panel]:
    """One panel per op; a line per series label, points sorted by size (one line per node, no zigzag)."""
    failing = {f.metric for f in view.figures(data) if figure_failed(f.verdict)}
    panels = []
    for op in dict.fromkeys(p.op for _, p in points):
        lines: dict[str, list[Point]] = {}
        for label, point in points:
            if point.op == op:
                lines.setdefault(label, []).append(point)
        out, bounds, bad = [], {}, []
        for label, mine in lines.items():
            mine.sort(key=lambda p: p.bytes)
            out.append(plots.Line(label, [p.bytes for p in mine], [p.busbw_gbps for p in mine]))
            for p in mine:
                floor = next((b for b in map(lambda m: lower_bound(data, m), p.metrics) if b is not None), None)
                if floor is not None:
                    bounds[p.bytes] = floor
                if failing.intersection(p.metrics) and p.busbw_gbps is not None:
                    bad.append((p.bytes, p.busbw_gbps))
        if len(out) == 1:  # one line needs no legend entry, even when several nodes measured it alike
            out = [plots.Line("", out[0].x, out[0].y)]
        panels.append(plots.Panel(op, out, bounds, bad))
    return panels


def _distinct(label: str) -> str:
    """A series label worth showing: the nodes that measured something of their own, not "every node"."""
    return "" if label == view.EVERY_NODE else label


def _spread(row: CollectiveRow) -> str:
    """The timed windows' busbw spread, (max - min) / median, in %; "-" in evidence from before the windows."""
    found = row.get("window_spread")
    return "-" if found is None else f"{100 * found:.1f}"


def _bytes(row: CollectiveRow | InternodeRow) -> float:
    """The message size in bytes: as the row gives it (the collectives' rows), else from its spelling."""
    found = row.get("size_bytes")
    return float(found) if isinstance(found, (int, float)) and found else float(parse_size(str(row["size"])))


def _rows(result: JSONObject) -> list[JSONObject]:
    return view.objects(result.get("rows"))


def collectives(data: EvidenceDoc) -> list[Block]:
    runs = view.series(data, "collectives")
    # the collectives probe's rows (evidence holds JSON; older files may lack the newer keys: read with get)
    rows = [(_distinct(s.label), cast(CollectiveRow, r)) for s in runs for r in _rows(s.result)]
    if not rows:
        return []
    first = runs[0].result
    nccl = first.get("backend") == "nccl"
    backend = f"NCCL {first.get('nccl_version')}, algorithm {first.get('nccl_algo')}" if nccl else first.get("backend")
    about = f"{backend}, {first.get('dtype')}; busbw = algbw x nccl-tests' bus factor; GB = 1e9 B; sizes binary."
    points = [(label, _point(r, (f"collectives.{r['op']}.busbw_gbps@{r['size']}",))) for label, r in rows]
    png = plots.busbw(_panels(data, points), "busbw (GB/s)")
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
        Heading("Collectives"),
        Text(about, note=True),
        *image("busbw", png, "busbw against message size per op, bounds and failed points marked"),
        Table(head + (["node"] if many else []), table, folded=fold),
    ]


def _point(row: CollectiveRow | InternodeRow, metrics: tuple[str, ...]) -> Point:
    return Point(row["op"], row["size"], _bytes(row), row.get("busbw_gbps"), metrics)


def internode(data: EvidenceDoc) -> list[Block]:
    """Across nodes: each scope (all ranks, one GPU per node, ring) and each node's own group as a line."""
    rows: list[tuple[str, InternodeRow]] = []
    for run in view.series(data, "internode"):
        for r in cast(list[InternodeRow], _rows(run.result)):
            suffix = f" [{_distinct(run.label)}]" if _distinct(run.label) else ""
            groups = r.get("groups") or []
            if r.get("scope") == "intranode" and len(groups) > 1:
                # each node's group as a row of its own: the row's op and size, the group's figures
                rows += [(f"node of ranks {_ranks(g)}{suffix}", cast(InternodeRow, {**r, **g})) for g in groups]
            else:
                rows.append((f"{r.get('scope', 'all')}{suffix}", r))
    blocks: list[Block] = []
    if rows:
        png = plots.busbw(_panels(data, [(label, _point(r, _internode_metrics(r))) for label, r in rows]),
                          "busbw (GB/s)")  # fmt: skip
        head = ["series", "op", "size", "ranks", "busbw (GB/s)", "time (us)", "#wrong"]
        table = [
            [label, r["op"], r["size"], r.get("ranks"), f"{r.get('busbw_gbps', 0):.2f}", f"{r.get('time_us', 0):.1f}",
             r.get("wrong")]
            for label, r in rows
        ]  # fmt: skip
        blocks += [*image("internode", png, "busbw across nodes per series"), Table(head, table)]
    for index, matrix in enumerate(pairs.matrices(data)):
        blocks += image(f"pairs-{index}", plots.heatmap(matrix), matrix.title)
    return [Heading("Links and across nodes"), *blocks] if blocks else []


def _internode_metrics(row: InternodeRow) -> tuple[str, ...]:
    """Across-node figures are named under collectives.internode. or, in newer evidence, internode."""
    name = f"internode.{row.get('scope')}.{row['op']}.busbw_gbps@{row['size']}"
    return (name, f"collectives.{name}")


def _ranks(group: ScopeGroup) -> str:
    return ",".join(str(r) for r in group.get("ranks_of_group") or [])


def _gpu(row: GpuRow) -> str:
    """Host and GPU index, or rank on the CPU path: short enough for a bar label."""
    return f"{row['host']} GPU {row['gpu']}" if row.get("gpu") is not None else f"{row['host']} rank {row['rank']}"


def per_gpu(data: EvidenceDoc) -> list[Block]:
    blocks: list[Block] = []
    for run in view.series(data, "compute"):
        rows = cast(list[GpuRow], _rows(run.result))  # the compute probe's rows, as the evidence holds them
        config = view.object_of(run.result.get("config"))
        tolerance = view.number(config.get("tolerance", 0.1)) or 0.0
        median_of = str(config.get("median_of", "cluster"))
        charts, notes = [], []
        for figure, (what, unit) in FIGURES.items():
            found = shortfalls(rows, figure, median_of)
            if not found:
                continue
            worst = found[0]
            floor = worst.median * (1 - tolerance)
            bars = [(_gpu(r), float(cast(float, r.get(figure)))) for r in rows if figure in r]
            charts.append(plots.Bars(what, unit, bars, worst.median, floor))
            slowest = cast(GpuRow, worst.row)
            uuid = slowest.get("uuid") or "no UUID (CPU)"
            notes.append(
                f"{what}: slowest {_gpu(slowest)} ({uuid}) at {fmt(worst.value)} {unit}, "
                f"{worst.fraction:.1%} under {worst.scope} {fmt(worst.median)} (tolerance {tolerance:.0%})"
            )
        shown = [f for f in FIGURES if any(isinstance(r.get(f), (int, float)) for r in rows)]
        head = ["rank", "host", "GPU", "UUID", *(f"{FIGURES[f][0]} ({FIGURES[f][1]})" for f in shown)]
        table = [[r.get("rank"), r.get("host"), r.get("gpu"), r.get("uuid"), *(r.get(f) for f in shown)] for r in rows]
        png = plots.per_gpu(charts)
        again = run.key != "compute"  # a re-measure of figures out of bounds (the family's Remeasure)
        blocks += [Text(f"{run.key}: measured again, the figures out of bounds the first time")] if again else []
        name = f"per-gpu-{run.key}{run.label}" if again else f"per-gpu{run.label}"
        blocks += [*image(name, png, "per-GPU figures with median and tolerance")]
        blocks += [Text(n) for n in notes] + [Table(head, table)]
    return [Heading("Per GPU"), *blocks] if blocks else []


def _answer(value: JSONValue) -> str:
    """An NVML answer for a cell: a not-measured answer reads as its reason."""
    if isinstance(value, dict) and "not_measured" in value:
        return "n/a"
    return "-" if value is None else str(value)


def _pcie(pcie: JSONValue) -> str:
    if not isinstance(pcie, dict):
        return _answer(pcie)
    return f"Gen{pcie.get('gen')} x{pcie.get('width')} (max Gen{pcie.get('max_gen')} x{pcie.get('max_width')})"


def _inventory(host: str, nvml: JSONObject, gpu: JSONObject) -> list[object]:
    mode = gpu.get("ecc_mode")
    ecc = "on" if mode is True else "off" if mode is False else _answer(mode)
    errors = f"{_answer(gpu.get('ecc_uncorrectable_volatile'))} / {_answer(gpu.get('ecc_uncorrectable_aggregate'))}"
    temperature = f"{_answer(gpu.get('temperature_c'))} (slowdown {_answer(gpu.get('slowdown_temperature_c'))})"
    reasons = gpu.get("clock_event_reasons")
    events = ", ".join(map(str, reasons)) if isinstance(reasons, list) else _answer(reasons)
    return [
        host, gpu.get("index"), gpu.get("name"), _answer(gpu.get("serial")), gpu.get("uuid"),
        nvml.get("driver_version"), _answer(gpu.get("vbios")), _pcie(gpu.get("pcie")),
        _answer(gpu.get("nvlink_active")), f"{ecc}, {errors}", temperature, events or "none",
    ]  # fmt: skip


INVENTORY = ["host", "GPU", "model", "serial", "UUID", "driver", "VBIOS", "PCIe", "NVLink links",
             "ECC, uncorrectable (volatile / aggregate)", "temperature C", "clock-event reasons"]  # fmt: skip


def health(data: EvidenceDoc) -> list[Block]:
    """The NVML inventory of every GPU of every node, once (each node's pytest gathers the whole cluster)."""
    rows: dict[str, list[object]] = {}
    missing: list[str] = []
    for run in view.series(data, "health"):
        # the health probe's NVML answers, each field an answer or why it is not one (JSON, read with get)
        for node in view.objects(run.result.get("nodes")):
            nvml = view.object_of(node.get("nvml"))
            gpus = view.objects(nvml.get("gpus"))
            if not gpus:
                missing.append(f"{node.get('host')}: {nvml.get('error') or nvml.get('not_measured') or 'no GPU'}")
            for gpu in gpus:
                rows.setdefault(f"{node.get('host')}/{node.get('node_rank')}/{gpu.get('uuid')}",
                                _inventory(str(node.get("host")), nvml, gpu))  # fmt: skip
    if not rows and not missing:
        return []
    blocks: list[Block] = [Heading("Health inventory")]
    blocks += [Table(INVENTORY, list(rows.values()))] if rows else []
    return blocks + [Text(f"No NVML answers from {m}", note=True) for m in missing]
