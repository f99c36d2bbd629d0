"""A cluster's first profile, from what one of its nodes is (``node_facts``) and the reference table.

On GPUs: the topology found, NVLS pinned as found (``NCCL_NVLS_ENABLE``: the references differ with it on
and off), each family's section as the family writes it from what was found (``Behaviour.initial``: the NVLink
link count as the health gate, a collectives sweep of every operation from 64 B up to 4 GiB with the spread
rule's bound, the datasheet's peak for MFU, the training workload the references were measured with where
the table has them for this GPU), and a bound for every figure a floor or a reference describes: one per
reference row that fits the node and names a figure its family bounds (the row's floor times its value, a
minimum, or for a time a maximum, sourced to the row), then the floors of the node's own links
(``acceptance.profile.floors``) for the figures no row describes, so that a GPU the table does not know is
still judged on its fabric and host links. A figure neither describes is recorded as information until a
run on the cluster sets it (``cluster-acceptance rebaseline``).

On a node without GPUs: a child of ``local-cpu`` (its floors, sourced there), for this machine's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import yaml

from acceptance.json_types import JSONObject
from acceptance.numbers import fmt
from acceptance.profile import loader
from acceptance.profile.floors import hardware_floors
from acceptance.profile.node_facts import NodeFacts
from acceptance.profile.references import Reference, ReferenceTable
from acceptance.profile.registry import FAMILIES, family_of_metric
from acceptance.schema.family import Family
from acceptance.schema.floors import HardwareFloor
from acceptance.schema.initial import Initial, InitialSetup, RowFacts

CPU_PARENT = "local-cpu"


@dataclass(frozen=True)
class Bound:
    metric: str
    value: float
    source: str  # as the profile records it
    words: str  # as init prints it
    reference: Reference | None = None  # the row it was written from; None: a hardware floor
    key: Literal["min", "max"] = "min"  # the threshold's key: a minimum, or a maximum (a time)

    @classmethod
    def of_row(cls, metric: str, row: Reference) -> Bound:
        return cls(metric, row.limit(), row.bound_source(), f"{row.share()} {row.words()}", row, row.bound)

    @classmethod
    def of_floor(cls, floor: HardwareFloor) -> Bound:
        return cls(floor.metric, floor.minimum, floor.source, floor.words())

    def text(self) -> str:
        """``metric >= value`` (or ``<=``), as init prints it."""
        return f"{self.metric} {'>=' if self.key == 'min' else '<='} {fmt(self.value)}"


@dataclass(frozen=True)
class InitialProfile:
    name: str
    text: str  # the YAML file, with its comments
    bounds: tuple[Bound, ...]
    device: str  # cuda or cpu


def initial_setup(facts: NodeFacts, nodes: int, table: ReferenceTable) -> InitialSetup:
    """What init found, as the families' parts of the first profile read it."""
    gpu = facts.setup(table, nodes).gpu
    figures = tuple(r.figure for r in table.references if gpu is not None and r.gpu == gpu)
    return InitialSetup(
        nodes, facts.gpu_count, gpu, over_sockets(facts, nodes), facts.driver, _nvlink_gate(facts), figures
    )


def initials() -> list[tuple[Family[Any], Initial]]:
    """The families with a part of the first profile, in their sections' places."""
    found = [(f, f.behaviour.initial) for f in FAMILIES if f.behaviour.initial is not None]
    return sorted(found, key=lambda fi: fi[1].place)


def bounds_for(facts: NodeFacts, nodes: int, table: ReferenceTable) -> list[Bound]:
    """One bound per reference row that fits the node and names a figure this profile measures (as the row's
    family says: ``Initial.metrics``), then the node's hardware floors for the figures no row bounds (a row is
    measured on such machines: it wins)."""
    setup = facts.setup(table, nodes)
    found = initial_setup(facts, nodes, table)
    island = nodes > 1 and facts.nvlink_domain is not None  # one NVLink domain: its rails are NVLink, not NICs
    out: list[Bound] = []
    for row in table.rows_for(setup):
        if island and row.nic is not None:
            continue
        family = family_of_metric(row.figure)
        initial = family.behaviour.initial if family else None
        metrics = initial.metrics(row.figure, row.holds_at, found) if initial and initial.metrics else []
        out += [Bound.of_row(metric, row) for metric in metrics]
    bounded = {b.metric for b in out}
    ops, sizes = next((i.sweep(found) for _, i in initials() if i.sweep), ((), ()))
    floors = hardware_floors(facts, nodes, ops, sizes)
    out += [Bound.of_floor(f) for f in floors if f.metric not in bounded]
    return out


def over_sockets(facts: NodeFacts, nodes: int) -> bool:
    """Several nodes with no RDMA port at all: NCCL's TCP sockets carry the traffic across. A node whose ports
    are there but down is not one of them: its profile keeps the full sizes and the scaling bar, so the
    fault fails the run rather than weakening the profile. Nodes of one NVLink domain meet over NVLink."""
    return nodes > 1 and not facts.ports and facts.nvlink_domain is None


def _rows(bounds: list[Bound]) -> dict[str, RowFacts | None]:
    """Each bounded metric with the reference row it was first written from (None: a hardware floor)."""
    out: dict[str, RowFacts | None] = {}
    for b in bounds:
        out.setdefault(b.metric, RowFacts(b.reference.value, b.reference.source) if b.reference else None)
    return out


def gpu_profile(facts: NodeFacts, name: str, nodes: int, table: ReferenceTable) -> InitialProfile:
    setup = facts.setup(table, nodes)
    label = table.gpus[setup.gpu].label if setup.gpu else (facts.gpu_model or "GPU")
    bounds = bounds_for(facts, nodes, table)
    data: JSONObject = {
        "name": name,
        "description": f"{nodes} node(s) x {facts.gpu_count}x {label}",
        "topology": {
            "nodes": nodes,
            "gpus_per_node": facts.gpu_count,
            "gpu_model": facts.gpu_model,
            "device": "cuda",
            "backend": "nccl",
        },
        "env": {"NCCL_NVLS_ENABLE": "1" if setup.nvls else "0"},
    }
    found = initial_setup(facts, nodes, table)
    rows = _rows(bounds)
    for family, initial in initials():
        section = initial.section(found, rows) if initial.section else {}
        if section:
            data[family.name] = section
    if bounds:
        data["thresholds"] = {b.metric: {b.key: b.value, "source": b.source} for b in bounds}
    notes = [i.note(_object(data.get(f.name)), lambda m: m in rows) for f, i in initials() if i.note]
    head = _header(facts, table, nodes, notes) + _bounds_comment(bounds, setup.gpu is None, facts)
    return InitialProfile(name, head + _dump(data), tuple(bounds), "cuda")


def cpu_profile(facts: NodeFacts, name: str, nodes: int, table: ReferenceTable) -> InitialProfile:
    data: JSONObject = {
        "name": name,
        "description": f"{nodes} node(s) of this CPU machine ({facts.cpus} CPUs), two ranks each over gloo",
        "extends": CPU_PARENT,
    }
    if nodes != 1:
        data["topology"] = {"nodes": nodes}
    # what the written profile sweeps and bounds is its parent's: said as the parent resolves
    parent = loader.load(CPU_PARENT)
    notes = [
        i.note(f.section_of(parent.model).model_dump(mode="json"), lambda m: parent.threshold(m) is not None)
        for f, i in initials()
        if i.note
    ]
    head = _header(facts, table, nodes, notes) + (
        f"# No GPU: the suite's CPU path, with {CPU_PARENT}'s floors (each sourced in {CPU_PARENT}.yaml).\n"
        "# `cluster-acceptance show NAME` prints the profile as resolved.\n"
    )
    return InitialProfile(name, head + _dump(data), (), "cpu")


def _nvlink_gate(facts: NodeFacts) -> int | None:
    """The links each GPU must have up: every link NVML knows on the GPU with the fewest, where every link's far
    end is known (a link wired to a peer or an NVSwitch and down at init fails the first run, naming the GPU);
    else the fewest found up. A PCIe card lists links it has no bridge for as down, with no far end: those
    are not its to have up."""
    known = [len(g.nvlinks) for g in facts.links]
    wired = all(link.remote is not None for g in facts.links for link in g.nvlinks)
    if known and len(known) == facts.gpu_count and min(known) > 0 and wired:
        return min(known)
    if facts.nvlink_links and min(facts.nvlink_links) > 0:
        return min(facts.nvlink_links)
    return None


def profile_for(facts: NodeFacts, name: str, nodes: int, table: ReferenceTable) -> InitialProfile:
    return gpu_profile(facts, name, nodes, table) if facts.gpu_count else cpu_profile(facts, name, nodes, table)


def _header(facts: NodeFacts, table: ReferenceTable, nodes: int, notes: list[str | None]) -> str:
    """The written profile's header: the node it was written from, and over sockets what the families say of
    the profile it heads (``Initial.note``: what it sweeps, whether it bounds scaling across nodes)."""
    lines = [
        "# Written by `cluster-acceptance init` from one node of the cluster:",
        f"#   {facts.summary(table)}",
        f"#   nodes: {nodes} (--nodes)",
        *(f"#   {note}" for note in facts.notes),
    ]
    if over_sockets(facts, nodes):
        said = "".join(f"; {n}" for n in notes if n)
        lines.append(f"#   no RDMA port: traffic between the nodes goes over TCP sockets{said}")
    return "\n".join(lines) + "\n"


def _object(value: object) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _bounds_comment(bounds: list[Bound], unknown_gpu: bool, facts: NodeFacts) -> str:
    lines = []
    if unknown_gpu:
        lines.append(
            f"# {facts.gpu_model or 'These GPUs'}: not in the reference table (cluster-acceptance references): "
            "the bounds come from the node's own links."
        )
    if bounds:
        lines.append("# Bounds from the reference table and from the node's links (each bound's source says which):")
        lines += [f"#   {b.text()}: {b.words}" for b in bounds]
    lines.append(
        "# Figures neither describes are recorded as information until a run sets them: after a healthy run,\n"
        "# `cluster-acceptance rebaseline EVIDENCE --profile NAME` writes bounds from it."
    )
    return "\n".join(lines) + "\n"


def _dump(data: JSONObject) -> str:
    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True))
