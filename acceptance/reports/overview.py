"""The report's frame: the verdict, the gated and the information figures, what did not pass, the nodes,
the software and the profile, the probes' wall times; and the order of all sections."""

from __future__ import annotations

from typing import Any

from acceptance.evidence.drain import cause_of
from acceptance.evidence.model import Case, EvidenceDoc
from acceptance.evidence.store import as_data
from acceptance.evidence.verdict import verdict_of
from acceptance.masking import masked_record
from acceptance.reports import references, sections, summary, view
from acceptance.reports.blocks import Block, Heading, Table, Text, Verdict
from acceptance.verdicts import FAILED_OUTCOMES


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0] if lines else ""


def verdict(data: EvidenceDoc, origin: str) -> Verdict:
    profile = data.profile
    facts = [
        ("evidence", origin),
        ("profile", f"{profile.name} ({profile.path})"),
        ("profile sha256", profile.sha256),
        ("topology", view.nodes_label(data)),
        ("started / finished", f"{data.started} / {data.finished}"),
        ("command", " ".join(data.command)),
        # gated apart from information: a figure without a bound held nothing
        ("checks", summary.counts(data).removeprefix("checks: ")),
    ]
    if data.merged_from:
        parts = [f"{m.node or m.host}: {m.verdict}" for m in data.merged_from]
        facts.append(("merged from", "; ".join(parts)))
    return Verdict(verdict_of(data), view.verdict_note(data), facts)


def _agree(data: EvidenceDoc, found: list[view.ReportedFigure]) -> tuple[bool, list[Block]]:
    """Whether a node column is needed, and a note where the nodes of a merged file agree on every figure."""
    nodes = any(f.node not in ("", view.EVERY_NODE) for f in found)
    if view.merged(data) and found and not nodes:
        count = len(data.merged_from or [])
        return False, [Text(f"The {count} nodes' evidence agrees on every figure here (shown once).", note=True)]
    return nodes, []


def gated(data: EvidenceDoc) -> list[Block]:
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

    def rows(figures: list[view.ReportedFigure]) -> list[list[object]]:
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


def information(data: EvidenceDoc) -> list[Block]:
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


def _tests(data: EvidenceDoc, outcomes: tuple[str, ...], title: str, last: str, causes: bool = False) -> list[Block]:
    """The tests of ``outcomes``; ``causes``: with each one's category and action (``drain.cause_of``)."""
    found = view.tests(data, outcomes)
    if not found:
        return []
    nodes = any(node for _, node, _ in found)
    rows = [
        [t.outcome, test_id, *(_cause(t) if causes else ()), _first_line(t.message), *([node] if nodes else [])]
        for test_id, node, t in found
    ]
    fold = f"{len(rows)} tests" if len(rows) > 8 and title.startswith("Skipped") else ""
    head = ["outcome", "test", *(["category", "action"] if causes else []), last, *(["node"] if nodes else [])]
    return [Heading(title), Table(head, rows, folded=fold)]


def _cause(test: Case) -> tuple[str, str]:
    """A failed test's category and action; a test that never ended (not run, interrupted) has neither."""
    return cause_of(test) if test.outcome in FAILED_OUTCOMES else ("", "")


def problems(data: EvidenceDoc) -> list[Block]:
    bad = ("failed", "error", "running", "not_run")
    probes = [p for p in data.probes if p.status != "ok"]
    out: list[Block] = _tests(data, bad, "Tests that did not pass", "message", causes=True)
    if probes:
        rows = [[p.key, p.status, _first_line(p.error)] for p in probes]
        out += [Heading("Probes that did not finish"), Table(["probe", "status", "error"], rows)]
    errors = list(data.errors)
    if errors:
        out += [Heading("Session errors"), *(Text(e) for e in errors)]
    return out


def skipped(data: EvidenceDoc) -> list[Block]:
    return _tests(data, ("skipped", "xfailed"), "Skipped and known issues", "reason")


def cluster(data: EvidenceDoc) -> list[Block]:
    rows: dict[str, list[object]] = {}
    for node in data.cluster.nodes:
        for d in node.devices:
            key = f"{node.node_rank}/{d.get('rank')}"
            rows.setdefault(key, [node.host, node.node_rank, d.get("rank"), d.get("device"),
                                  d.get("device_name"), d.get("uuid") or "-", d.get("pci_bus_id") or "-",
                                  d.get("memory_gib")])  # fmt: skip
    if not rows:
        return [Heading("Nodes"), Text("No node inventory (the connectivity probe did not run to the end).")]
    head = ["host", "node rank", "rank", "device", "name", "UUID", "PCI bus", "memory GiB"]
    return [Heading("Nodes"), Table(head, list(rows.values()))]


def software(data: EvidenceDoc) -> list[Block]:
    info = data.cluster
    soft = [[k, v] for k, v in info.software.items() if v]
    env = [[k, v] for k, v in info.env.items()]
    profile = data.profile
    chain = " <- ".join([profile.path, *profile.extends])
    out: list[Block] = [Heading("Software and profile"), Table(["software", "version"], soft)]
    out += [Text(f"Profile {profile.name}: {chain}; sha256 {profile.sha256}", note=True)]
    fold = f"{len(env)} environment variables recorded (an allow-list: NCCL_*, CUDA_*, Slurm, rendezvous)"
    return out + ([Table(["environment", "value"], env, folded=fold)] if env else [])


def walls(data: EvidenceDoc) -> list[Block]:
    probes = data.probes
    if not probes:
        return []
    nodes = view.merged(data)
    rows = [[p.key, p.status, p.wall_s] + ([view.node_of(p, data)] if nodes else []) for p in probes]
    head = ["probe", "status", "wall s"] + (["node"] if nodes else [])
    return [Heading("Probe wall times"), Table(head, rows)]


def blocks(data: EvidenceDoc, origin: str) -> list[Block]:
    """The whole report, in reading order: the verdict and what failed first, the measurements, the rest.
    Masked first: an evidence file written before a name counted as a credential may still hold its value."""
    data = EvidenceDoc.model_validate(masked_record(as_data(data)))
    return [
        verdict(data, origin),
        *problems(data),
        *gated(data),
        *sections.sections(data),
        *information(data),
        *skipped(data),
        *cluster(data),
        *software(data),
        *walls(data),
    ]
