"""The report's frame: the verdict, the gated and the information figures, what did not pass, the nodes,
the software and the profile, the probes' wall times; and the order of all sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceptance.evidence.verdict import verdict_of
from acceptance.masking import masked_record
from acceptance.reports import measured, references, soak, summary, training, view
from acceptance.reports.blocks import Block, Heading, Table, Text, Verdict


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0] if lines else ""


def verdict(data: Mapping[str, Any], origin: str) -> Verdict:
    profile = data.get("profile") or {}
    facts = [
        ("evidence", origin),
        ("profile", f"{profile.get('name')} ({profile.get('path')})"),
        ("profile sha256", str(profile.get("sha256"))),
        ("topology", view.nodes_label(data)),
        ("started / finished", f"{data.get('started')} / {data.get('finished')}"),
        ("command", " ".join(data.get("command") or [])),
        # gated apart from information: a figure without a bound held nothing
        ("checks", summary.counts(data).removeprefix("checks: ")),
    ]
    if view.merged(data):
        parts = [f"{m.get('node') or m.get('host')}: {m.get('verdict')}" for m in data["merged_from"]]
        facts.append(("merged from", "; ".join(parts)))
    return Verdict(verdict_of(data), view.verdict_note(data), facts)


def _agree(data: Mapping[str, Any], found: list[view.Figure]) -> tuple[bool, list[Block]]:
    """Whether a node column is needed, and a note where the nodes of a merged file agree on every figure."""
    nodes = any(f.node not in ("", view.EVERY_NODE) for f in found)
    if view.merged(data) and found and not nodes:
        count = len(data.get("merged_from") or [])
        return False, [Text(f"The {count} nodes' evidence agrees on every figure here (shown once).", note=True)]
    return nodes, []


def gated(data: Mapping[str, Any]) -> list[Block]:
    """Every gated figure with its bound and source: the measured ones first, then (folded) the exact gates
    that held: wrong elements, missing ranks, health counts, which read 0 == 0 on a good cluster."""
    found = [f for f in view.figures(data) if f.gated]
    nodes, note = _agree(data, found)
    # what a healthy machine of this kind measures, with its public source (acceptance/profile/references.yaml)
    reference = references.column(data)
    shown = any(reference(f.metric) for f in found)
    head = ["verdict", "metric", "value", "unit", "bound", "source"]
    head += (["reference"] if shown else []) + (["node"] if nodes else [])
    exact = [f for f in found if f.bound.startswith("==") and f.verdict == "pass"]
    measured_ = [f for f in found if f not in exact]

    def rows(figures: list[view.Figure]) -> list[list[object]]:
        return [[f.verdict.upper(), f.metric, f.value, f.unit, f.bound, f.source,
                 *([reference(f.metric)] if shown else []), *([f.node] if nodes else [])]
                for f in figures]  # fmt: skip

    counts = {v: sum(1 for f in found if f.verdict == v) for v in view.CHECK_ORDER}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "none"
    out: list[Block] = [Heading(f"Gated figures ({summary})"), *note]
    out += [Table(head, rows(measured_))] if measured_ else []
    fold = f"{len(exact)} exact gates held (correctness and health counts, == bounds)"
    out += [Table(head, rows(exact), folded=fold)] if exact else []
    return out if found else [*out, Text("No gated figure.")]


def information(data: Mapping[str, Any]) -> list[Block]:
    found = [f for f in view.figures(data) if not f.gated]
    if not found:
        return []
    nodes, note = _agree(data, found)
    reference = references.column(data)
    shown = any(reference(f.metric) for f in found)
    head = ["metric", "value", "unit", "test"] + (["reference"] if shown else []) + (["node"] if nodes else [])
    rows = [
        [f.metric, f.value, f.unit, f.test] + ([reference(f.metric)] if shown else []) + ([f.node] if nodes else [])
        for f in found
    ]
    fold = f"{len(rows)} figures recorded without a bound"
    return [Heading("Information figures (recorded, not gated)"), *note, Table(head, rows, folded=fold)]


def _tests(data: Mapping[str, Any], outcomes: tuple[str, ...], title: str, last: str) -> list[Block]:
    found = view.tests(data, outcomes)
    if not found:
        return []
    nodes = any(node for _, node, _ in found)
    rows = [
        [t.get("outcome"), test_id, _first_line(t.get("message"))] + ([node] if nodes else [])
        for test_id, node, t in found
    ]
    fold = f"{len(rows)} tests" if len(rows) > 8 and title.startswith("Skipped") else ""
    return [Heading(title), Table(["outcome", "test", last] + (["node"] if nodes else []), rows, folded=fold)]


def problems(data: Mapping[str, Any]) -> list[Block]:
    bad = ("failed", "error", "running", "not_run")
    probes = [p for p in data.get("probes") or [] if p.get("status") != "ok"]
    out: list[Block] = _tests(data, bad, "Tests that did not pass", "message")
    if probes:
        rows = [[p.get("key"), p.get("status"), _first_line(p.get("error"))] for p in probes]
        out += [Heading("Probes that did not finish"), Table(["probe", "status", "error"], rows)]
    errors = list(data.get("errors") or [])
    if errors:
        out += [Heading("Session errors"), *(Text(e) for e in errors)]
    return out


def skipped(data: Mapping[str, Any]) -> list[Block]:
    return _tests(data, ("skipped", "xfailed"), "Skipped and known issues", "reason")


def cluster(data: Mapping[str, Any]) -> list[Block]:
    rows: dict[str, list[object]] = {}
    for node in (data.get("cluster") or {}).get("nodes") or []:
        for d in node.get("devices") or []:
            key = f"{node.get('node_rank')}/{d.get('rank')}"
            rows.setdefault(key, [node.get("host"), node.get("node_rank"), d.get("rank"), d.get("device"),
                                  d.get("device_name"), d.get("uuid") or "-", d.get("pci_bus_id") or "-",
                                  d.get("memory_gib")])  # fmt: skip
    if not rows:
        return [Heading("Nodes"), Text("No node inventory (the connectivity probe did not run to the end).")]
    head = ["host", "node rank", "rank", "device", "name", "UUID", "PCI bus", "memory GiB"]
    return [Heading("Nodes"), Table(head, list(rows.values()))]


def software(data: Mapping[str, Any]) -> list[Block]:
    info = data.get("cluster") or {}
    soft = [[k, v] for k, v in (info.get("software") or {}).items() if v]
    env = [[k, v] for k, v in (info.get("env") or {}).items()]
    profile = data.get("profile") or {}
    chain = " <- ".join([str(profile.get("path")), *map(str, profile.get("extends") or [])])
    out: list[Block] = [Heading("Software and profile"), Table(["software", "version"], soft)]
    out += [Text(f"Profile {profile.get('name')}: {chain}; sha256 {profile.get('sha256')}", note=True)]
    fold = f"{len(env)} environment variables recorded (an allow-list: NCCL_*, CUDA_*, Slurm, rendezvous)"
    return out + ([Table(["environment", "value"], env, folded=fold)] if env else [])


def walls(data: Mapping[str, Any]) -> list[Block]:
    probes = data.get("probes") or []
    if not probes:
        return []
    nodes = view.merged(data)
    rows = [
        [p.get("key"), p.get("status"), p.get("wall_s", "-")] + ([view.node_of(p, data)] if nodes else [])
        for p in probes
    ]
    head = ["probe", "status", "wall s"] + (["node"] if nodes else [])
    return [Heading("Probe wall times"), Table(head, rows)]


def blocks(data: Mapping[str, Any], origin: str) -> list[Block]:
    """The whole report, in reading order: the verdict and what failed first, the measurements, the rest.
    Masked first: an evidence file written before a name counted as a credential may still hold its value."""
    data = masked_record(data)
    return [
        verdict(data, origin),
        *problems(data),
        *gated(data),
        *measured.collectives(data),
        *measured.internode(data),
        *measured.per_gpu(data),
        *measured.health(data),
        *training.section(data),
        *soak.section(data),
        *information(data),
        *skipped(data),
        *cluster(data),
        *software(data),
        *walls(data),
    ]
