"""Link coverage: which pairs a round exercises, and how the measured links read. Torch-free.

* Inside a node, every GPU pair: the circle method of a round-robin tournament (fix one player, rotate the
  others one seat per round) pairs n players in n - 1 rounds (n even; n rounds with a bye for n odd), every
  pair exactly once and the pairs of a round disjoint, so a whole round runs at once.
* Across nodes, every rail (GPU i of node a <-> GPU i of node b) of node pairs chosen as in recursive
  doubling: round k pairs node a with a XOR 2^k, so ceil(log2 N) rounds reach log2 N partners per node,
  however many pairs there are. With N not a power of two, a node whose partner does not exist sits the
  round out, paired with another such node where that pair is new; every node still gets a partner.

A link is one direction of one pair: a dict with ``src``/``dst`` (global ranks), ``src_node``/``dst_node``,
``src_host``/``dst_host``, ``src_gpu``/``dst_gpu`` (local ranks), optional ``src_uuid``/``dst_uuid``, and
the receiver's figures ``gbps``, ``time_us``, ``wrong`` and ``round``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from typing_extensions import NotRequired, TypedDict

from acceptance.families.heartbeat import RankIdentity
from acceptance.families.transport import TransportRecord
from acceptance.json_types import JSONObject
from acceptance.schema.bounds import Threshold
from acceptance.schema.family import GPU_ONLY, Behaviour, Family, Metric, Shapes
from acceptance.schema.fields import PositiveInt, Size, Strict
from acceptance.schema.figure import Figure
from acceptance.schema.floors import HardwareFloor, NodePaths, floor
from acceptance.schema.initial import Initial, InitialSetup, RowFacts


class Connectivity(Strict):
    p2p_size: Size = "16M"
    p2p_iters: PositiveInt = 5
    barrier_iters: PositiveInt = 20


_LINKS = Shapes[Connectivity]("connectivity.<figure>")
# The p2p floor from the node's own links (``Behaviour.floors``), set from what healthy machines measured so that
# none fails it while a node whose NVLink is unused fails it by 4x
P2P_FRACTION = 0.25
P2P_WHY = "2x H200 read 305-321 GB/s over NV18 at 256 MiB (0.68-0.71 of 450); NVLink unused reads 24-27 (0.06)"
P2P_SIZE = "256M"  # the size the p2p floor is set for: a 16 MiB transfer is launch-bound (4x H200: 90 GB/s)


def floors(paths: NodePaths) -> list[HardwareFloor]:
    """``connectivity.p2p_min_gbps``: the slowest GPU pair's path (measured on the node's own communicator,
    so the network between nodes does not set it)."""
    if paths.pair is None:
        return []
    return [floor("connectivity.p2p_min_gbps", paths.pair, P2P_FRACTION, f"at {P2P_SIZE}: {P2P_WHY}", "pair")]


def initial_section(setup: InitialSetup, _bounds: Mapping[str, RowFacts | None]) -> JSONObject:
    """On 2+ GPUs, p2p at the size its floor is set for: transfers bound by their links, not their launch."""
    return {"p2p_size": P2P_SIZE} if setup.world >= 2 else {}


CONNECTIVITY = Family(
    "connectivity",
    "every rank present, every link carries data (the connectivity probe)",
    Connectivity,
    (
        # the links inside a node: its own hardware
        Metric[Connectivity](r"(p2p_min_gbps)", "connectivity.<figure>", "higher", local=True),
        _LINKS.count(r"(p2p_wrong)", local=True),
        _LINKS.count(r"(duplicate_uuids|missing_ranks|allreduce_wrong)"),
        _LINKS.count(r"(transport_mismatches)", devices=GPU_ONLY),
        Metric[Connectivity](r"(rendezvous_s|barrier_latency_us)", "connectivity.<figure>", "lower"),
        Metric[Connectivity](r"(world_size)", "connectivity.<figure>", "none", kind="correctness"),
    ),
    probes=("connectivity",),
    in_worker=("connectivity",),
    describes_nodes=True,
    quick=True,
    behaviour=Behaviour(floors=floors, initial=Initial(initial_section, 20)),
)  # fmt: skip


Pair = tuple[int, int]


class ConnectivityConfig(TypedDict):
    """The connectivity probe's section of the profile."""

    p2p_size: str
    p2p_iters: int
    barrier_iters: int


class Transfer(TypedDict):
    """One direction of one pair, as its receiver measured it (``probes.links``)."""

    src: int  # global ranks
    dst: int
    bytes: int
    time_us: float
    gbps: float
    wrong: int


class RoundTransfer(Transfer):
    round: int  # the probe's round (the isolation's, in its rails)


class Link(RoundTransfer):
    """A measured link with where each end is."""

    src_node: int
    dst_node: int
    src_host: str
    dst_host: str
    src_gpu: int  # local ranks
    dst_gpu: int
    src_uuid: NotRequired[str]
    dst_uuid: NotRequired[str]


class RankDevice(RankIdentity):
    """A rank as the connectivity probe gathers it: where it is (``node_rank``: torchrun's, for this job), its
    address, and its device (its GPU's name, UUID, memory and PCI address on CUDA)."""

    node: int  # the node's own rank, the same in every job (``probes.links.stable_node``)
    ip: str
    device: str
    init_s: float
    device_name: NotRequired[str]
    uuid: NotRequired[str]
    memory_gib: NotRequired[float]
    pci_bus_id: NotRequired[str | None]


class LinkFigures(TypedDict):
    """Every link of one kind (``p2p`` inside nodes, ``rails`` across them) in the connectivity result: the
    links, the rounds, the slowest and the wrong elements over all of them."""

    p2p: list[Link]
    p2p_rounds: int
    p2p_slowest: Link | None
    p2p_wrong: int
    rails: list[Link]
    rails_rounds: int
    rails_slowest: Link | None
    rails_wrong: int


class ConnectivityResult(LinkFigures):
    world_size: int
    expected_world_size: int
    ranks: list[RankDevice]
    nodes: dict[str, list[int]]  # "node_rank:host" -> its ranks
    expected_ranks_per_node: int
    short_nodes: dict[str, int]
    missing_ranks: list[int]
    duplicate_uuids: list[str]
    allreduce_wrong: int
    transport: NotRequired[TransportRecord]  # NotRequired: evidence from before it was recorded
    p2p_size: str
    barrier_latency_us: float
    rendezvous_s: float
    software: dict[str, str | None]


class Matrix(TypedDict):
    """A pair matrix: rows sending, columns receiving; null where the pair was not measured."""

    labels: list[str]
    matrix: list[list[float | None]]
    unit: str


def circle_rounds(n: int) -> list[list[Pair]]:
    """Round-robin pairings of 0..n-1: every unordered pair once, disjoint within each round."""
    if n < 2:
        return []
    seats: list[int | None] = [*range(n), *([None] if n % 2 else [])]
    rounds = []
    for _ in range(len(seats) - 1):
        half = len(seats) // 2
        pairs = [(seats[i], seats[-1 - i]) for i in range(half)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None))
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return rounds


def hypercube_rounds(n: int) -> list[list[Pair]]:
    """Node pairs per round, recursive-doubling style: ceil(log2 n) rounds, disjoint pairs in each."""
    seen: set[Pair] = set()
    rounds = []
    for k in range(math.ceil(math.log2(n)) if n > 1 else 0):
        bit = 1 << k
        pairs = [(a, a ^ bit) for a in range(n) if a < a ^ bit < n]
        idle = [a for a in range(n) if a ^ bit >= n]
        pairs += [(a, b) for a, b in zip(idle[::2], idle[1::2], strict=False) if (a, b) not in seen]
        seen.update(pairs)
        rounds.append(sorted(pairs))
    return rounds


def intranode_rounds(nodes: list[list[int]]) -> list[list[Pair]]:
    """Global-rank pairs per round: every node plays its circle round r at the same time.

    ``nodes[i]`` holds node i's global ranks in local-rank order."""
    per_node = [circle_rounds(len(ranks)) for ranks in nodes]
    count = max((len(r) for r in per_node), default=0)
    return [
        [
            (ranks[a], ranks[b])
            for ranks, rounds in zip(nodes, per_node, strict=True)
            if r < len(rounds)
            for a, b in rounds[r]
        ]
        for r in range(count)
    ]


def rail_rounds(nodes: list[list[int]]) -> list[list[Pair]]:
    """Global-rank pairs per round: every rail of every node pair of the round at once."""
    return [
        [(nodes[a][i], nodes[b][i]) for a, b in pairs for i in range(min(len(nodes[a]), len(nodes[b])))]
        for pairs in hypercube_rounds(len(nodes))
    ]


def endpoint(link: Mapping[str, object], side: str) -> str:
    """``host GPU i (UUID)``: what a person needs to find the device (``side``: src or dst)."""
    uuid = link.get(f"{side}_uuid")
    return f"{link[f'{side}_host']} GPU {link[f'{side}_gpu']}" + (f" ({uuid})" if uuid else "")


def slowest(links: list[Link], count: int = 3) -> str:
    """The slowest links, by host, GPU index and UUID, slowest first."""
    worst = sorted(links, key=rate)[:count]
    return "; ".join(f"{endpoint(k, 'src')} -> {endpoint(k, 'dst')} {k['gbps']:.3g} GB/s" for k in worst)


def wrong(links: list[Link]) -> str:
    """The links whose data came back wrong, by host, GPU index and UUID, with their counts."""
    return "; ".join(f"{endpoint(k, 'src')} -> {endpoint(k, 'dst')}: {k['wrong']} wrong" for k in links if k["wrong"])


def rate(link: Link) -> float:
    """A link's GB/s for sorting, slowest first."""
    value = float(link["gbps"])
    return value if value == value else -1.0  # a NaN sorts first: a link that never delivered is the worst


class _Table(TypedDict):
    labels: dict[int, str]
    cells: dict[tuple[int, int], float]


def matrices(links: list[Link], group: str) -> dict[str, Matrix]:
    """Pair matrices ``{labels, matrix, unit}``, rows sending and columns receiving, GB/s (null: not measured).

    ``group="node"``: one matrix per node over its GPUs (the links inside nodes); ``group="gpu"``: one
    matrix per GPU index over the nodes (the rails)."""
    out: dict[str, _Table] = {}
    for link in links:
        if group == "node":
            key, src, dst = f"node {link['src_node']} ({link['src_host']})", link["src_gpu"], link["dst_gpu"]
            label = {src: f"GPU {src}", dst: f"GPU {dst}"}
        else:
            key, src, dst = f"GPU {link['src_gpu']}", link["src_node"], link["dst_node"]
            label = {src: f"node {src} ({link['src_host']})", dst: f"node {dst} ({link['dst_host']})"}
        table = out.setdefault(key, {"labels": {}, "cells": {}})
        table["labels"].update(label)
        table["cells"][(src, dst)] = link["gbps"]
    return {key: _square(table) for key, table in sorted(out.items())}


def _square(table: _Table) -> Matrix:
    order = sorted(table["labels"])
    cells = table["cells"]
    return {
        "labels": [table["labels"][i] for i in order],
        "matrix": [[cells.get((a, b)) for b in order] for a in order],  # [sender][receiver]
        "unit": "gbps",
    }


def _figure(metric: str, unit: str, value: float, *lines: str) -> Figure:
    return Figure(f"connectivity.{metric}", unit, value, findings=[line for line in lines if line])


def figures(result: ConnectivityResult) -> dict[str, Figure]:
    """Every figure of the connectivity result but the transport's (``transport.figure``), by metric."""
    short, ranks = result["short_nodes"], result["ranks"]
    per_node = result["expected_ranks_per_node"]
    dupes = result["duplicate_uuids"]
    holders = "; ".join(f"{u} held by ranks {[r['rank'] for r in ranks if r.get('uuid') == u]}" for u in dupes)
    found = [
        Figure(
            "connectivity.world_size", "ranks", result["world_size"],
            bound=Threshold(eq=result["expected_world_size"], source="nodes x ranks per node"),
        ),
        _figure(
            "missing_ranks", "ranks", len(result["missing_ranks"]) + len(short),
            "; ".join(f"node {k} has {v} ranks, expected {per_node}" for k, v in short.items()),
        ),
        _figure("duplicate_uuids", "GPUs", len(dupes), holders),
        _figure("allreduce_wrong", "elements", result["allreduce_wrong"]),
        _figure("p2p_wrong", "elements", result["p2p_wrong"], wrong(result["p2p"])),
        _p2p_slowest(result),
        _figure("barrier_latency_us", "us", result["barrier_latency_us"]),
        _figure("rendezvous_s", "s", result["rendezvous_s"]),
    ]  # fmt: skip
    return {fig.metric: fig for fig in found}


def _p2p_slowest(result: ConnectivityResult) -> Figure:
    """The slowest link inside a node; ranks that share a node and measured no link between them: unmeasured,
    never a pass."""
    measured, slowest_link = result["p2p"], result["p2p_slowest"]
    fig = Figure("connectivity.p2p_min_gbps", "GB/s")
    if slowest_link is None:
        fig.unmeasured.append(f"no link inside a node was measured ({len(measured)} links)")
        return fig
    fig.value = slowest_link["gbps"]
    fig.findings.append(
        f"{len(measured)} links inside nodes, {result['p2p_size']} each way in {result['p2p_rounds']} round(s); "
        f"slowest: {slowest(measured)}"
    )
    return fig
