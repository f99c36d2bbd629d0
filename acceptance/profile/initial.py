"""A cluster's first profile, from what one of its nodes is (``node_facts``) and the reference table.

On GPUs: the topology found, NVLS pinned as found (``NCCL_NVLS_ENABLE``: the references differ with it on
and off), the NVLink link count as the health gate, a collectives sweep of every operation from 64 B (its
latency) up to 4 GiB (the size the public busbw figures are measured at) with the spread rule's bound (a rank
against its peers, so any cluster's), the datasheet's peak for MFU, the training workload the references
were measured with where the table has them for this GPU, and a bound for every figure a floor or a
reference describes: one per reference row that fits the node (the row's floor times its value, a minimum,
or for a time a maximum, sourced to the row), then the floors of the node's own links
(``acceptance.profile.floors``) for the figures no row describes, so that a GPU the table does not know is
still judged on its fabric and host links. A figure neither describes is recorded as information until a
run on the cluster sets it (``cluster-acceptance rebaseline``).

On a node without GPUs: a child of ``local-cpu`` (its floors, sourced there), for this machine's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import yaml

from acceptance.families.collectives import COLLECTIVES, Collectives
from acceptance.families.connectivity import P2P_SIZE
from acceptance.json_types import JSONObject, JSONValue
from acceptance.numbers import fmt
from acceptance.profile import loader
from acceptance.profile.floors import hardware_floors
from acceptance.profile.node_facts import NodeFacts
from acceptance.profile.references import Reference, ReferenceTable
from acceptance.schema.floors import HardwareFloor
from acceptance.schema.sizes import parse_size

CPU_PARENT = "local-cpu"
GPU_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv")
# 64 B: a call bound by its launch, where the latency rows are measured; 1M and up: by the links
GPU_SIZES = ("64", "1M", "256M", "1G", "4G")
# Nodes with no active RDMA port talk over NCCL's TCP sockets: 3.4-3.8 GB/s all_reduce busbw at 256M-1G
# between two nodes of one host (docs/measurements.md, "The same host as two nodes"). At that pace six ops at
# 1G and 4G take minutes past the family's timeout; 256M is already bound by the network, not the launch.
SOCKET_SIZES = ("1M", "64M", "256M")
# the per-GPU figures gated on the slowest GPU of the run (compute's ``_min``)
PER_GPU_STATISTIC = "_min"
# The GPU workload the training references were measured with (docs/measurements.md, the Training tables):
# a Llama-style 1.1 B model at sequence 2048 in bf16, each decoder layer compiled. 16,384 tokens per GPU and
# step: micro-batch 8 on a 141 GB H200, 4 x 2 accumulated steps on an 80 GB GPU (as h200-x2 and h100-x1).
GPU_WORKLOAD: JSONObject = {"model": "llama-1b", "seq_len": 2048, "precision": "bf16", "compile": "blocks"}
GPU_STRATEGIES = ["ddp", "fsdp", "zero1", "zero2", "zero3"]
MICRO_BATCH = {"h200": (8, 1)}  # the table's GPU key -> (micro-batch, gradient accumulation)
DEFAULT_MICRO_BATCH = (4, 2)
# The spread rule's bound (``collectives.late_ranks``), written out for any cluster: it judges a rank against
# its peers of the same run, so it needs no reference for the hardware
SPREAD_RULE: JSONObject = {
    "spread_ratio": Collectives().spread_ratio,
    "spread_floor_us": Collectives().spread_floor_us,
    "spread_min_share": Collectives().spread_min_share,
}


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


def bounds_for(facts: NodeFacts, nodes: int, table: ReferenceTable) -> list[Bound]:
    """One bound per reference row that fits the node and names a figure this profile measures, then the
    node's hardware floors for the figures no row bounds (a row is measured on such machines: it wins)."""
    setup = facts.setup(table, nodes)
    world = nodes * facts.gpu_count
    trains = _trains_reference_workload(table, setup.gpu)
    sockets = over_sockets(facts, nodes)
    island = nodes > 1 and facts.nvlink_domain is not None  # one NVLink domain: its rails are NVLink, not NICs
    out: list[Bound] = []
    for row in table.rows_for(setup):
        if island and row.nic is not None:
            continue
        out += [Bound.of_row(metric, row) for metric in _metrics(row, world, nodes, trains, sockets)]
    bounded = {b.metric for b in out}
    ops = GPU_OPS if world >= 2 else ()
    floors = hardware_floors(facts, nodes, ops, collective_sizes(sockets))
    out += [Bound.of_floor(f) for f in floors if f.metric not in bounded]
    return out


def _trains_reference_workload(table: ReferenceTable, gpu: str | None) -> bool:
    """Whether the table has training rows for this GPU: then init writes the workload they were measured on."""
    return gpu is not None and any(r.gpu == gpu and r.figure.startswith("training.") for r in table.references)


def over_sockets(facts: NodeFacts, nodes: int) -> bool:
    """Several nodes with no RDMA port at all: NCCL's TCP sockets carry the traffic across. A node whose ports
    are there but down is not one of them: its profile keeps the full sizes and the scaling bar, so the
    fault fails the run rather than weakening the profile. Nodes of one NVLink domain meet over NVLink."""
    return nodes > 1 and not facts.ports and facts.nvlink_domain is None


def collective_sizes(sockets: bool) -> tuple[str, ...]:
    return SOCKET_SIZES if sockets else GPU_SIZES


def _metrics(row: Reference, world: int, nodes: int, trains: bool, sockets: bool) -> list[str]:
    family = row.figure.split(".", 1)[0]
    if family == "collectives":
        op = row.figure.split(".")[1]
        if world < 2 or op not in GPU_OPS:
            return []
        return [f"{row.figure}@{s}" for s in collective_sizes(sockets) if row.holds_at(parse_size(s))]
    if family == "compute":
        return [f"{row.figure}{PER_GPU_STATISTIC}"]
    if family == "internode":
        return [row.figure] if nodes >= 2 else []
    if family == "llama8b":  # the reference workload: its rows hold for any world (it fits what it can)
        return [row.figure]
    return _training_metrics(row, world, trains, sockets) if family == "training" else []


def _training_metrics(row: Reference, world: int, trains: bool, sockets: bool) -> list[str]:
    if row.figure == "training.scaling_efficiency":
        # one GPU is its own baseline; over sockets no public figure says what scaling across nodes should be
        # (the > 90% bar is of a published acceptance run over InfiniBand)
        return [row.figure] if world >= 2 and not sockets else []
    return [row.figure] if trains and row.figure.split(".")[1] in GPU_STRATEGIES else []


def _training(table: ReferenceTable, gpu: str | None, bounds: list[Bound], world: int) -> JSONObject:
    section: JSONObject = {}
    if _trains_reference_workload(table, gpu):
        micro, accum = MICRO_BATCH.get(gpu or "", DEFAULT_MICRO_BATCH)
        section.update(GPU_WORKLOAD)
        section.update({"micro_batch": micro, "grad_accum": accum, "strategies": list(GPU_STRATEGIES)})
    if world < 2:
        section["scaling_baseline"] = "none"  # one GPU: the full world is the baseline
    section.update(_peak(bounds))
    return section


def _peak(bounds: list[Bound]) -> JSONObject:
    """MFU's peak for a training section: the compute reference's dense bf16 (and fp16) peak, where the table
    has one for the GPU."""
    peak = next((b.reference for b in bounds if b.metric == "compute.matmul_tflops_min"), None)
    if peak is None:
        return {}
    return {"peak_tflops": {"bf16": peak.value, "fp16": peak.value}, "peak_tflops_source": peak.source}


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
    health: JSONObject = {}
    if facts.driver:
        health["min_driver"] = facts.driver
    links = _nvlink_gate(facts)
    if links:
        health["nvlink_links"] = links
    if health:
        data["health"] = health
    world = nodes * facts.gpu_count
    sizes: list[JSONValue] = list(collective_sizes(over_sockets(facts, nodes))) if world >= 2 else []
    if world >= 2:
        # the p2p floor is set for transfers bound by their links, not by their launch (acceptance.profile.floors)
        data["connectivity"] = {"p2p_size": P2P_SIZE}
        data["collectives"] = {"ops": list(GPU_OPS), "sizes": sizes, "dtype": "bfloat16", **SPREAD_RULE}
    training = _training(table, setup.gpu, bounds, world)
    if training:
        data["training"] = training
    reference_workload = _peak(bounds)  # its MFU against the public figure (opt-in: -m llama8b, burn-in)
    if reference_workload:
        data["llama8b"] = reference_workload
    if bounds:
        data["thresholds"] = {b.metric: {b.key: b.value, "source": b.source} for b in bounds}
    scaling = any(b.metric == "training.scaling_efficiency" for b in bounds)
    head = _header(facts, table, nodes, sizes, scaling) + _bounds_comment(bounds, setup.gpu is None, facts)
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
    sizes: list[JSONValue] = list(COLLECTIVES.section_of(parent.model).sizes)
    scaling = parent.threshold("training.scaling_efficiency") is not None
    head = _header(facts, table, nodes, sizes, scaling) + (
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


def _header(facts: NodeFacts, table: ReferenceTable, nodes: int, sizes: list[JSONValue], scaling: bool) -> str:
    """The written profile's header: the node it was written from, and what the profile sweeps (``sizes``) and
    whether it bounds scaling across nodes (``scaling``), as the profile it heads says."""
    lines = [
        "# Written by `cluster-acceptance init` from one node of the cluster:",
        f"#   {facts.summary(table)}",
        f"#   nodes: {nodes} (--nodes)",
        *(f"#   {note}" for note in facts.notes),
    ]
    if over_sockets(facts, nodes):
        scaled = "bounded" if scaling else "recorded, not bounded (its bar is of RDMA clusters)"
        lines.append(
            "#   no RDMA port: traffic between the nodes goes over TCP sockets; collectives at "
            f"{', '.join(str(s) for s in sizes)}; scaling across nodes {scaled}"
        )
    return "\n".join(lines) + "\n"


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
