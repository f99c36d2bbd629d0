"""A cluster's first profile, from what one of its nodes is (``node_facts``) and the reference table.

On GPUs: the topology found, NVLS pinned as found (``NCCL_NVLS_ENABLE``: the references differ with it on
and off), the NVLink link count as the health gate, a collectives sweep up to 4 GiB (the size the public
busbw figures are measured at), the datasheet's peak for MFU, and one bound per reference row that fits
the node: the row's floor times its value, sourced to the row. A figure no row describes is recorded as
information until a run on the cluster sets it (``cluster-acceptance rebaseline``).

On a node without GPUs: a child of ``local-cpu`` (its floors, sourced there), for this machine's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from acceptance.json_types import JSONObject
from acceptance.numbers import fmt
from acceptance.profile.node_facts import NodeFacts
from acceptance.profile.references import Reference, ReferenceTable
from acceptance.schema.sizes import parse_size

CPU_PARENT = "local-cpu"
GPU_OPS = ("all_reduce", "all_gather", "reduce_scatter")
GPU_SIZES = ("1M", "256M", "1G", "4G")
# the per-GPU figures gated on the slowest GPU of the run (compute's ``_min``)
PER_GPU_STATISTIC = "_min"


@dataclass(frozen=True)
class Bound:
    metric: str
    minimum: float
    reference: Reference


@dataclass(frozen=True)
class InitialProfile:
    name: str
    text: str  # the YAML file, with its comments
    bounds: tuple[Bound, ...]
    device: str  # cuda or cpu


def bounds_for(facts: NodeFacts, nodes: int, table: ReferenceTable) -> list[Bound]:
    """One bound per reference row that fits the node and names a figure this profile measures."""
    setup = facts.setup(table, nodes)
    world = nodes * facts.gpu_count
    out: list[Bound] = []
    for row in table.rows_for(setup):
        for metric in _metrics(row, world, nodes):
            out.append(Bound(metric, round(row.floor.fraction * row.value, 1), row))
    return out


def _metrics(row: Reference, world: int, nodes: int) -> list[str]:
    family = row.figure.split(".", 1)[0]
    if family == "collectives":
        op = row.figure.split(".")[1]
        if world < 2 or op not in GPU_OPS:
            return []
        return [f"{row.figure}@{s}" for s in GPU_SIZES if parse_size(s) >= row.min_bytes]
    if family == "compute":
        return [f"{row.figure}{PER_GPU_STATISTIC}"]
    if family == "internode":
        return [row.figure] if nodes >= 2 else []
    return []


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
    if facts.nvlink_links and min(facts.nvlink_links) > 0:
        health["nvlink_links"] = min(facts.nvlink_links)
    if health:
        data["health"] = health
    if nodes * facts.gpu_count >= 2:
        data["collectives"] = {"ops": list(GPU_OPS), "sizes": list(GPU_SIZES), "dtype": "bfloat16"}
    peak = next((b.reference for b in bounds if b.metric == "compute.matmul_tflops_min"), None)
    if peak is not None:
        data["training"] = {
            "peak_tflops": {"bf16": peak.value, "fp16": peak.value},
            "peak_tflops_source": peak.source,
        }
    if bounds:
        data["thresholds"] = {b.metric: {"min": b.minimum, "source": b.reference.bound_source()} for b in bounds}
    head = _header(facts, table, nodes) + _bounds_comment(bounds, setup.gpu is None, facts)
    return InitialProfile(name, head + _dump(data), tuple(bounds), "cuda")


def cpu_profile(facts: NodeFacts, name: str, nodes: int, table: ReferenceTable) -> InitialProfile:
    data: JSONObject = {
        "name": name,
        "description": f"{nodes} node(s) of this CPU machine ({facts.cpus} CPUs), two ranks each over gloo",
        "extends": CPU_PARENT,
    }
    if nodes != 1:
        data["topology"] = {"nodes": nodes}
    head = _header(facts, table, nodes) + (
        f"# No GPU: the suite's CPU path, with {CPU_PARENT}'s floors (each sourced in {CPU_PARENT}.yaml).\n"
        "# `cluster-acceptance show NAME` prints the profile as resolved.\n"
    )
    return InitialProfile(name, head + _dump(data), (), "cpu")


def profile_for(facts: NodeFacts, name: str, nodes: int, table: ReferenceTable) -> InitialProfile:
    return gpu_profile(facts, name, nodes, table) if facts.gpu_count else cpu_profile(facts, name, nodes, table)


def _header(facts: NodeFacts, table: ReferenceTable, nodes: int) -> str:
    lines = [
        "# Written by `cluster-acceptance init` from one node of the cluster:",
        f"#   {facts.summary(table)}",
        f"#   nodes: {nodes} (--nodes)",
        *(f"#   {note}" for note in facts.notes),
    ]
    return "\n".join(lines) + "\n"


def _bounds_comment(bounds: list[Bound], unknown_gpu: bool, facts: NodeFacts) -> str:
    if unknown_gpu:
        return (
            f"# {facts.gpu_model or 'These GPUs'}: not in the reference table "
            "(cluster-acceptance references): no bound is written; every figure is recorded. After a healthy run,\n"
            "# `cluster-acceptance rebaseline EVIDENCE --profile NAME` writes bounds from it.\n"
        )
    lines = ["# Bounds from the reference table (each row's public source is the bound's source):"]
    lines += [
        f"#   {b.metric} >= {fmt(b.minimum)} ({b.reference.floor.fraction:.0%} of {fmt(b.reference.value)})"
        for b in bounds
    ]
    lines.append("# Figures without a row are recorded as information until a run sets them (rebaseline).")
    return "\n".join(lines) + "\n"


def _dump(data: JSONObject) -> str:
    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True))
