"""Floors from the node's own hardware: what any node should move over the links NVML and sysfs say it has.

Users run the suite on machines we never measured, so a figure the reference table has no row for is still
bounded by the hardware: each floor is the links' public rate (NVLink per generation, PCIe per generation and
lane, both per direction) times a stated fraction, and its source names the fact, the rate and the fraction.
This module finds the node's paths (``node_paths``) and their rates; each family says which of them bound
which of its figures, at what fraction set from what healthy machines measured, and why (``Behaviour.floors``,
in the family's module). A reference row that fits the node is tighter and wins (``acceptance.profile.initial``).

The paths, and the figures they bound as the families say today:

* p2p (``connectivity.p2p_min_gbps``): the slowest GPU pair's path; a pair joined by NVLink (directly, or
  both GPUs on an NVSwitch) moves at its links' rate, any other pair over PCIe.
* busbw inside a node (``collectives.<op>.busbw_gbps@<size>``, 256 MiB and up, where a collective is bound
  by its links rather than by its launch): every pair on NVLink, each GPU's NVLink rate; else PCIe.
* host links (``compute.h2d_gbps_min``, ``compute.d2h_gbps_min``): the PCIe link at the generation and width
  the GPU and its slot can reach (NVML's maximum; an idle GPU drops its current link to save power, and a
  link trained below its maximum fails ``health.pcie_degraded`` on its own).
* rails across nodes (``internode.rail_min_gbps``, 2+ nodes): the slowest active RDMA port's rate as sysfs
  reports it (InfiniBand, or Ethernet for RoCE), shared by the GPUs when the node has fewer ports than GPUs
  (the rails of a round are measured all at once). A node with no active RDMA port has no rail floor: its
  traffic goes over TCP sockets, which the transport check names.
* one multi-node NVLink domain (a GB200 NVL72 rack: NVML's fabric info puts every GPU of the node in one clique,
  ``families.nvlink_domain``): its nodes are one NVLink island, so the collectives across them and each rail
  between them are bounded by the GPUs' NVLink rate, not by the NICs (a rack with MNNVL off runs at its NICs'
  rate, a tenth of its NVLink's, and fails them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import combinations

from acceptance.families.nvlink_domain import label
from acceptance.numbers import fmt
from acceptance.profile.node_facts import GpuLinks, NodeFacts
from acceptance.profile.registry import FAMILIES
from acceptance.schema.floors import REACHES, LinkPath, NodePaths
from acceptance.schema.floors import HardwareFloor as HardwareFloor  # the floors init writes (tests read them here)


@dataclass(frozen=True)
class LinkRate:
    name: str  # "NVLink4"
    gbps: float  # per link and direction, GB/s
    source: str


# NVML answers nvmlDeviceGetNvLinkVersion with an nvmlNvlinkVersion_t, not the NVLink number (nvml.h; an
# A100 answers 5, NVLink 3.1: open-mpi/hwloc issue #658): the enum's value -> the generation's rate per link
# and direction, from NVIDIA's datasheets (a link is 25 GB/s each way from NVLink2 to NVLink4)
NVLINK_RATES: dict[int, LinkRate] = {
    1: LinkRate("NVLink1", 20.0, "NVIDIA Tesla P100 datasheet: 4 links, 160 GB/s both ways"),
    2: LinkRate("NVLink2", 25.0, "NVIDIA V100 datasheet: 6 links, 300 GB/s both ways"),
    3: LinkRate("NVLink2", 25.0, "NVIDIA V100 datasheet: 6 links, 300 GB/s both ways"),
    4: LinkRate("NVLink3", 25.0, "NVIDIA A100 datasheet: 12 links, 600 GB/s both ways"),
    5: LinkRate("NVLink3", 25.0, "NVIDIA A100 datasheet: 12 links, 600 GB/s both ways"),
    6: LinkRate("NVLink4", 25.0, "NVIDIA H100 datasheet: 18 links, 900 GB/s both ways"),
    7: LinkRate("NVLink5", 50.0, "NVIDIA HGX B200 datasheet: 18 links, 1.8 TB/s both ways"),
}
# PCIe per lane and direction after line coding, GB/s (PCI-SIG base specifications: Gen1/Gen2 2.5/5 GT/s with
# 8b/10b, Gen3/Gen4/Gen5 8/16/32 GT/s with 128b/130b, Gen6 64 GT/s PAM4 in 256-byte FLITs of 242 data bytes)
PCIE_LANE_GBPS: dict[int, float] = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
PCIE_SOURCE = "PCI-SIG"

# a GB200 NVL72 rack is one NVLink domain of 72 GPUs, each with fifth-generation NVLink at 1.8 TB/s both ways
DOMAIN_SOURCE = "NVIDIA GB200 NVL72 datasheet: 72 GPUs in one NVLink domain, NVLink5 1.8 TB/s per GPU both ways"
RDMA_LINK_LAYERS = ("InfiniBand", "Ethernet")  # /sys/class/infiniband/<hca>/ports/<n>/link_layer


def nvlink_rate(gpu: GpuLinks) -> LinkRate | None:
    """The rate of a GPU's NVLinks, by the version most of its links report; None without a known one."""
    versions = Counter(link.version for link in gpu.nvlinks if link.version is not None)
    for version, _ in versions.most_common():
        if version in NVLINK_RATES:
            return NVLINK_RATES[version]
    return None


def pcie_path(gpu: GpuLinks) -> LinkPath | None:
    """The GPU's PCIe link at its maximum generation and width, per direction."""
    gen, width = gpu.pcie_max_gen or gpu.pcie_gen, gpu.pcie_max_width or gpu.pcie_width
    if gen not in PCIE_LANE_GBPS or not width:
        return None
    per_lane = PCIE_LANE_GBPS[gen]
    gbps = round(per_lane * width, 2)
    return LinkPath(
        gbps, f"PCIe Gen{gen} x{width}: {width} x {fmt(per_lane)} GB/s = {fmt(gbps)} GB/s ({PCIE_SOURCE})", False
    )


def _reach(gpu: GpuLinks, peer: GpuLinks, facts: NodeFacts) -> int:
    """The links up from ``gpu`` that carry traffic to ``peer``: to an NVSwitch, or to the peer itself. Where
    NVML did not say what a link reaches, two GPUs or an NVSwitch on the bus share all of them, and GPUs joined
    directly are taken to split them evenly between their peers (the least a full mesh gives a pair)."""
    up = gpu.nvlinks_up
    known = [link for link in up if link.remote is not None]
    if len(known) == len(up):
        return sum(1 for link in up if link.remote == "switch" or (peer.bus_id and link.remote == peer.bus_id))
    if facts.nvswitch or len(facts.links) == 2:
        return len(up)
    return len(up) // max(1, len(facts.links) - 1)


def pair_path(a: GpuLinks, b: GpuLinks, facts: NodeFacts) -> LinkPath | None:
    """The pair's NVLink path (None: no NVLink joins them)."""
    rate = nvlink_rate(a) or nvlink_rate(b)
    links = min(_reach(a, b, facts), _reach(b, a, facts))
    if rate is None or links == 0:
        return None
    gbps = links * rate.gbps
    fact = f"{rate.name} {links} links x {fmt(rate.gbps)} GB/s = {fmt(gbps)} GB/s ({rate.source})"
    return LinkPath(gbps, fact, True)


def gpu_nvlink_path(gpu: GpuLinks) -> LinkPath | None:
    rate = nvlink_rate(gpu)
    links = len(gpu.nvlinks_up)
    if rate is None or not links:
        return None
    gbps = links * rate.gbps
    return LinkPath(gbps, f"{rate.name} {links} links x {fmt(rate.gbps)} GB/s = {fmt(gbps)} GB/s ({rate.source})", True)


def _slowest(paths: list[LinkPath | None]) -> LinkPath | None:
    known = [p for p in paths if p is not None]
    return min(known, key=lambda p: p.gbps) if known and len(known) == len(paths) else None


def p2p_path(facts: NodeFacts) -> LinkPath | None:
    """The slowest pair's path: NVLink where it joins every pair, else the slowest GPU's PCIe link."""
    gpus = facts.links
    if len(gpus) < 2:
        return None
    pairs = [pair_path(a, b, facts) for a, b in combinations(gpus, 2)]
    if all(p is not None for p in pairs):
        return _slowest(pairs)
    return _slowest([pcie_path(g) for g in gpus])


def busbw_path(facts: NodeFacts) -> LinkPath | None:
    """What a collective inside the node runs over: each GPU's NVLinks where every pair has NVLink, else PCIe."""
    gpus = facts.links
    if len(gpus) < 2:
        return None
    if all(pair_path(a, b, facts) is not None for a, b in combinations(gpus, 2)):
        return _slowest([gpu_nvlink_path(g) for g in gpus])
    return _slowest([pcie_path(g) for g in gpus])


def rail_path(facts: NodeFacts) -> LinkPath | None:
    """What one rail across nodes runs over: the slowest active RDMA port, its line rate shared by the GPUs
    when there are fewer ports than GPUs; None without an active RDMA port or a GPU."""
    ports = [p for p in facts.ports if p.active and p.link_layer in RDMA_LINK_LAYERS and p.gbps > 0]
    if not ports or not facts.gpu_count:
        return None
    slowest = min(ports, key=lambda p: p.gbps)
    line = slowest.gbps / 8  # Gb/s -> GB/s
    share = min(1.0, len(ports) / facts.gpu_count)
    kind = f"{slowest.link_layer} port at {fmt(slowest.gbps)} Gb/s ({slowest.adapter}/{slowest.port}, sysfs rate)"
    if share < 1:
        fact = f"{len(ports)} RDMA ports for {facts.gpu_count} GPUs, the slowest an {kind}: {fmt(line)} GB/s x "
        fact += f"{len(ports)}/{facts.gpu_count} = {fmt(line * share)} GB/s per rail"
    else:
        fact = f"an {kind} per rail: {fmt(line)} GB/s"
    return LinkPath(round(line * share, 2), fact, False)


def node_paths(facts: NodeFacts, nodes: int, ops: tuple[str, ...], sizes: tuple[str, ...]) -> NodePaths:
    """The node's paths that bound its figures: its GPU pairs (measured on the node's own communicator, so the
    network between nodes does not set them); what the world's collectives run over (one node only: across
    nodes they run over the network, unless the nodes are one NVLink domain, whose NVLink then bounds them);
    a rail across nodes (2+ nodes: the NICs', or the NVLink's in one domain); each GPU's host link."""
    pair = p2p_path(facts)
    island = nodes > 1 and facts.nvlink_domain is not None
    collective = busbw_path(facts) if nodes == 1 or island else None
    collective_pair = None if island else pair
    if island and collective is not None:  # the world's collectives run over the domain's NVLink
        collective = _across(collective, facts, nodes)
    if island:
        nvlink = _slowest([gpu_nvlink_path(g) for g in facts.links]) if facts.links else None
        rail = _across(nvlink, facts, nodes) if nvlink is not None else None
    else:
        rail = rail_path(facts) if nodes > 1 else None
    host = _slowest([pcie_path(g) for g in facts.links]) if facts.links else None
    return NodePaths(pair, collective, collective_pair, rail, host, ops, sizes)


def hardware_floors(facts: NodeFacts, nodes: int, ops: tuple[str, ...], sizes: tuple[str, ...]) -> list[HardwareFloor]:
    """Every floor the node's links give, each family's own (``Behaviour.floors``), listed by where the traffic
    goes: inside a pair, the world's collectives, across nodes, to the host."""
    paths = node_paths(facts, nodes, ops, sizes)
    found = [f for family in FAMILIES if family.behaviour.floors for f in family.behaviour.floors(paths)]
    return sorted(found, key=lambda f: REACHES.index(f.reach))


def _across(path: LinkPath, facts: NodeFacts, nodes: int) -> LinkPath:
    """``path`` as it holds across the ``nodes`` nodes of the node's NVLink domain."""
    where = label(facts.nvlink_domain) if facts.nvlink_domain else "?"
    fact = f"one NVLink domain across {nodes} nodes ({where}; {DOMAIN_SOURCE}): {path.fact}"
    return LinkPath(path.gbps, fact, path.nvlink)
