"""The report's sections for the network and the GPUs: collectives, across nodes, per GPU, health."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from acceptance.evidence.model import EvidenceDoc
from acceptance.families.compute import FIGURES, shortfalls
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


RowKey = Callable[[dict[str, Any]], tuple[str, ...]]  # a row's metric names (the spellings it may have)


def _panels(data: EvidenceDoc, rows: list[tuple[str, dict[str, Any]]], metric: RowKey) -> list[plots.Panel]:
    """One panel per op; a line per series label, points sorted by size (one line per node, no zigzag)."""
    failing = {f.metric for f in view.figures(data) if figure_failed(f.verdict)}
    panels = []
    for op in dict.fromkeys(r["op"] for _, r in rows):
        lines: dict[str, list[dict[str, Any]]] = {}
        for label, row in rows:
            if row["op"] == op:
                lines.setdefault(label, []).append(row)
        out, bounds, bad = [], {}, []
        for label, mine in lines.items():
            mine.sort(key=_bytes)
            out.append(plots.Line(label, [_bytes(r) for r in mine], [r.get("busbw_gbps") for r in mine]))
            for r in mine:
                floor = next((b for b in map(lambda m: lower_bound(data, m), metric(r)) if b is not None), None)
                if floor is not None:
                    bounds[_bytes(r)] = floor
                if failing.intersection(metric(r)):
                    bad.append((_bytes(r), float(r["busbw_gbps"])))
        if len(out) == 1:  # one line needs no legend entry, even when several nodes measured it alike
            out = [plots.Line("", out[0].x, out[0].y)]
        panels.append(plots.Panel(op, out, bounds, bad))
    return panels


def _distinct(label: str) -> str:
    """A series label worth showing: the nodes that measured something of their own, not "every node"."""
    return "" if label == view.EVERY_NODE else label


def _spread(row: Mapping[str, Any]) -> str:
    """The timed windows' busbw spread, (max - min) / median, in %; "-" in evidence from before the windows."""
    found = row.get("window_spread")
    return "-" if found is None else f"{100 * found:.1f}"


def _bytes(row: Mapping[str, Any]) -> float:
    return float(row.get("size_bytes") or parse_size(str(row["size"])))


def collectives(data: EvidenceDoc) -> list[Block]:
    runs = view.series(data, "collectives")
    rows = [(_distinct(s.label), r) for s in runs for r in s.result.get("rows") or []]
    if not rows:
        return []
    first = runs[0].result
    nccl = first.get("backend") == "nccl"
    backend = f"NCCL {first.get('nccl_version')}, algorithm {first.get('nccl_algo')}" if nccl else first.get("backend")
    about = f"{backend}, {first.get('dtype')}; busbw = algbw x nccl-tests' bus factor; GB = 1e9 B; sizes binary."
    png = plots.busbw(_panels(data, rows, lambda r: (f"collectives.{r['op']}.busbw_gbps@{r['size']}",)), "busbw (GB/s)")
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


def internode(data: EvidenceDoc) -> list[Block]:
    """Across nodes: each scope (all ranks, one GPU per node, ring) and each node's own group as a line."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for run in view.series(data, "internode"):
        for r in run.result.get("rows") or []:
            suffix = f" [{_distinct(run.label)}]" if _distinct(run.label) else ""
            groups = r.get("groups") or []
            if r.get("scope") == "intranode" and len(groups) > 1:
                rows += [(f"node of ranks {_ranks(g)}{suffix}", {**r, **g}) for g in groups]
            else:
                rows.append((f"{r.get('scope', 'all')}{suffix}", r))
    blocks: list[Block] = []
    if rows:
        png = plots.busbw(_panels(data, rows, _internode_metrics), "busbw (GB/s)")
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


def _internode_metrics(row: dict[str, Any]) -> tuple[str, ...]:
    """Across-node figures are named under collectives.internode. or, in newer evidence, internode."""
    name = f"internode.{row.get('scope')}.{row['op']}.busbw_gbps@{row['size']}"
    return (name, f"collectives.{name}")


def _ranks(group: Mapping[str, Any]) -> str:
    return ",".join(str(r) for r in group.get("ranks_of_group") or [])


def _gpu(row: Mapping[str, Any]) -> str:
    """Host and GPU index, or rank on the CPU path: short enough for a bar label."""
    return f"{row['host']} GPU {row['gpu']}" if row.get("gpu") is not None else f"{row['host']} rank {row['rank']}"


def per_gpu(data: EvidenceDoc) -> list[Block]:
    blocks: list[Block] = []
    for run in view.series(data, "compute"):
        rows = run.result.get("rows") or []
        config = run.result.get("config") or {}
        tolerance, median_of = float(config.get("tolerance", 0.1)), str(config.get("median_of", "cluster"))
        charts, notes = [], []
        for figure, (what, unit) in FIGURES.items():
            found = shortfalls(rows, figure, median_of)
            if not found:
                continue
            worst = found[0]
            floor = worst.median * (1 - tolerance)
            charts.append(plots.Bars(what, unit, [(_gpu(r), float(r[figure])) for r in rows if figure in r],
                                     worst.median, floor))  # fmt: skip
            uuid = worst.row.get("uuid") or "no UUID (CPU)"
            notes.append(
                f"{what}: slowest {_gpu(worst.row)} ({uuid}) at {fmt(worst.value)} {unit}, "
                f"{worst.fraction:.1%} under {worst.scope} {fmt(worst.median)} (tolerance {tolerance:.0%})"
            )
        shown = [f for f in FIGURES if any(isinstance(r.get(f), (int, float)) for r in rows)]
        head = ["rank", "host", "GPU", "UUID", *(f"{FIGURES[f][0]} ({FIGURES[f][1]})" for f in shown)]
        table = [[r.get("rank"), r.get("host"), r.get("gpu"), r.get("uuid"), *(r.get(f) for f in shown)] for r in rows]
        png = plots.per_gpu(charts)
        again = run.key != "compute"  # a re-measure of figures out of bounds (plugin/remeasure.py)
        blocks += [Text(f"{run.key}: measured again, the figures out of bounds the first time")] if again else []
        name = f"per-gpu-{run.key}{run.label}" if again else f"per-gpu{run.label}"
        blocks += [*image(name, png, "per-GPU figures with median and tolerance")]
        blocks += [Text(n) for n in notes] + [Table(head, table)]
    return [Heading("Per GPU"), *blocks] if blocks else []


def _answer(value: Any) -> str:
    """An NVML answer for a cell: a not-measured answer reads as its reason."""
    if isinstance(value, Mapping) and "not_measured" in value:
        return "n/a"
    return "-" if value is None else str(value)


def _pcie(pcie: Any) -> str:
    if not isinstance(pcie, Mapping):
        return _answer(pcie)
    return f"Gen{pcie.get('gen')} x{pcie.get('width')} (max Gen{pcie.get('max_gen')} x{pcie.get('max_width')})"


def _inventory(host: str, nvml: Mapping[str, Any], gpu: Mapping[str, Any]) -> list[object]:
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
        for node in run.result.get("nodes") or []:
            nvml = node.get("nvml") or {}
            gpus: list[Any] = nvml["gpus"] if isinstance(nvml.get("gpus"), list) else []
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
