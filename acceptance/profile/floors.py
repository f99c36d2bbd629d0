"""Floors from the node's own hardware: what any node should move over the links NVML and sysfs say it has.

Users run the suite on machines we never measured, so a figure the reference table has no row for is still
bounded by the hardware: each floor is the links' public rate (NVLink per generation, PCIe per generation and
lane, both per direction) times a stated fraction, and its source names the fact, the rate and the fraction.
The fractions are set from what healthy machines measured (docs/measurements.md and the reference machines'
runs) so that no healthy machine we measured fails them, while a node whose NVLink is unused (NCCL over PCIe
and host memory: p2p 24-27 GB/s, all_reduce 24-25 GB/s at 1 GiB on 4x H200 NV18) fails each of them by 4x.
A reference row that fits the node is tighter and wins (``acceptance.profile.initial``).

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
from acceptance.schema.sizes import parse_size


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

# Each fraction, with what it was set from. The healthy figures are the lowest each machine measured.
P2P_FRACTION = 0.25
P2P_WHY = "2x H200 read 305-321 GB/s over NV18 at 256 MiB (0.68-0.71 of 450); NVLink unused reads 24-27 (0.06)"
P2P_SIZE = "256M"  # the size the p2p floor is set for: a 16 MiB transfer is launch-bound (4x H200: 90 GB/s)
NVLINK_BUSBW_FRACTION = 0.3
NVLINK_BUSBW_WHY = (
    "the lowest healthy busbw from 256 MiB up is 0.51 of the links' rate (2x H200 reduce_scatter 228.7 of "
    "450; sendrecv on 4x H200 read 156.8, 0.35, already at 64 MiB); NVLink unused reads 0.05 (24 GB/s)"
)
PCIE_BUSBW_FRACTION = 0.2
PCIE_BUSBW_WHY = "collectives through PCIe and host memory read 24-25 GB/s at 1 GiB on Gen5 x16 hosts (0.38-0.40)"
HOST_FRACTION = 0.4
HOST_WHY = (
    "healthy Gen5 x16 hosts move 49-55 GB/s (2x H200, 0.78-0.87) and 31-40 GB/s with four GPUs copying at "
    "once (4x H200, 0.49); a link at half its width or generation fails"
)
BUSBW_MIN_SIZE = "256M"  # below it a collective is bound by its launch, not by its links
NIC_FRACTION = 0.75
NIC_WHY = (
    "NCCL reaches ~96% of a port's line rate (~48 of an NDR port's 50 GB/s, nccl-tests #319; ~24 of HDR's 25, "
    "#252), and the reference rows' floor is 80% of that (0.77 of the line rate); a port trained at half its "
    "rate, or traffic over TCP sockets (3 GB/s on 400 Gb/s ports, aicr#2689), fails"
)
# a GB200 NVL72 rack is one NVLink domain of 72 GPUs, each with fifth-generation NVLink at 1.8 TB/s both ways
DOMAIN_SOURCE = "NVIDIA GB200 NVL72 datasheet: 72 GPUs in one NVLink domain, NVLink5 1.8 TB/s per GPU both ways"
DOMAIN_RAIL_WHY = (
    "the p2p fraction of one GPU's NVLink, between trays of one NVLink domain (never measured here on GB200); a rail "
    "through the NICs (400 Gb/s: 50 GB/s per GPU) fails"
)
RDMA_LINK_LAYERS = ("InfiniBand", "Ethernet")  # /sys/class/infiniband/<hca>/ports/<n>/link_layer


@dataclass(frozen=True)
class HardwareFloor:
    metric: str
    minimum: float
    fact: str  # the fact and the rate: "NVLink4 18 links x 25 GB/s (NVIDIA H100 datasheet: ...)"
    fraction: float
    why: str

    @property
    def source(self) -> str:
        return f"hardware floor: {self.fact} x {self.fraction:g} ({self.why})"

    def words(self) -> str:
        return f"hardware floor, {self.fact} x {self.fraction:g}"


@dataclass(frozen=True)
class Path:
    """What carries traffic between two GPUs, or from a GPU to its peers: its rate and the fact it is from."""

    gbps: float
    fact: str
    nvlink: bool


def nvlink_rate(gpu: GpuLinks) -> LinkRate | None:
    """The rate of a GPU's NVLinks, by the version most of its links report; None without a known one."""
    versions = Counter(link.version for link in gpu.nvlinks if link.version is not None)
    for version, _ in versions.most_common():
        if version in NVLINK_RATES:
            return NVLINK_RATES[version]
    return None


def pcie_path(gpu: GpuLinks) -> Path | None:
    """The GPU's PCIe link at its maximum generation and width, per direction."""
    gen, width = gpu.pcie_max_gen or gpu.pcie_gen, gpu.pcie_max_width or gpu.pcie_width
    if gen not in PCIE_LANE_GBPS or not width:
        return None
    per_lane = PCIE_LANE_GBPS[gen]
    gbps = round(per_lane * width, 2)
    return Path(
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


def pair_path(a: GpuLinks, b: GpuLinks, facts: NodeFacts) -> Path | None:
    """The pair's NVLink path (None: no NVLink joins them)."""
    rate = nvlink_rate(a) or nvlink_rate(b)
    links = min(_reach(a, b, facts), _reach(b, a, facts))
    if rate is None or links == 0:
        return None
    gbps = links * rate.gbps
    fact = f"{rate.name} {links} links x {fmt(rate.gbps)} GB/s = {fmt(gbps)} GB/s ({rate.source})"
    return Path(gbps, fact, True)


def gpu_nvlink_path(gpu: GpuLinks) -> Path | None:
    rate = nvlink_rate(gpu)
    links = len(gpu.nvlinks_up)
    if rate is None or not links:
        return None
    gbps = links * rate.gbps
    return Path(gbps, f"{rate.name} {links} links x {fmt(rate.gbps)} GB/s = {fmt(gbps)} GB/s ({rate.source})", True)


def _slowest(paths: list[Path | None]) -> Path | None:
    known = [p for p in paths if p is not None]
    return min(known, key=lambda p: p.gbps) if known and len(known) == len(paths) else None


def p2p_path(facts: NodeFacts) -> Path | None:
    """The slowest pair's path: NVLink where it joins every pair, else the slowest GPU's PCIe link."""
    gpus = facts.links
    if len(gpus) < 2:
        return None
    pairs = [pair_path(a, b, facts) for a, b in combinations(gpus, 2)]
    if all(p is not None for p in pairs):
        return _slowest(pairs)
    return _slowest([pcie_path(g) for g in gpus])


def busbw_path(facts: NodeFacts) -> Path | None:
    """What a collective inside the node runs over: each GPU's NVLinks where every pair has NVLink, else PCIe."""
    gpus = facts.links
    if len(gpus) < 2:
        return None
    if all(pair_path(a, b, facts) is not None for a, b in combinations(gpus, 2)):
        return _slowest([gpu_nvlink_path(g) for g in gpus])
    return _slowest([pcie_path(g) for g in gpus])


def rail_path(facts: NodeFacts) -> Path | None:
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
    return Path(round(line * share, 2), fact, False)


def hardware_floors(facts: NodeFacts, nodes: int, ops: tuple[str, ...], sizes: tuple[str, ...]) -> list[HardwareFloor]:
    """Every floor the node's links give: p2p inside each node (measured on the node's own communicator, so
    the network between nodes does not set it), the collectives inside one node (one node only: across nodes
    the world's collectives run over the network, unless the nodes are one NVLink domain), the rails across
    nodes (2+ nodes: the NICs', or the NVLink's in one domain), and each GPU's host link."""
    p2p = p2p_path(facts)
    out = _p2p_floor(p2p)
    island = nodes > 1 and facts.nvlink_domain is not None
    if nodes == 1 or island:
        out += _busbw_floors(facts, p2p, ops, sizes, nodes if island else 1)
    if island:
        out += _domain_rail(facts, nodes)
    rail = rail_path(facts) if nodes > 1 and not island else None
    if rail is not None:
        low = round(rail.gbps * NIC_FRACTION, 1)
        out.append(HardwareFloor("internode.rail_min_gbps", low, rail.fact, NIC_FRACTION, NIC_WHY))
    host = _slowest([pcie_path(g) for g in facts.links]) if facts.links else None
    if host is not None:
        low = round(host.gbps * HOST_FRACTION, 1)
        out += [HardwareFloor(f"compute.{m}_gbps_min", low, host.fact, HOST_FRACTION, HOST_WHY) for m in ("h2d", "d2h")]
    return out


PAIR_BOUND_OPS = ("sendrecv", "broadcast")


def _p2p_floor(p2p: Path | None) -> list[HardwareFloor]:
    if p2p is None:
        return []
    low = round(p2p.gbps * P2P_FRACTION, 1)
    return [HardwareFloor("connectivity.p2p_min_gbps", low, p2p.fact, P2P_FRACTION, f"at {P2P_SIZE}: {P2P_WHY}")]


def _across(path: Path, facts: NodeFacts, nodes: int) -> Path:
    """``path`` as it holds across the ``nodes`` nodes of the node's NVLink domain."""
    where = label(facts.nvlink_domain) if facts.nvlink_domain else "?"
    fact = f"one NVLink domain across {nodes} nodes ({where}; {DOMAIN_SOURCE}): {path.fact}"
    return Path(path.gbps, fact, path.nvlink)


def _domain_rail(facts: NodeFacts, nodes: int) -> list[HardwareFloor]:
    nvlink = _slowest([gpu_nvlink_path(g) for g in facts.links]) if facts.links else None
    if nvlink is None:
        return []
    path = _across(nvlink, facts, nodes)
    low = round(path.gbps * P2P_FRACTION, 1)
    return [HardwareFloor("internode.rail_min_gbps", low, path.fact, P2P_FRACTION, DOMAIN_RAIL_WHY)]


def _busbw_floors(
    facts: NodeFacts, p2p: Path | None, ops: tuple[str, ...], sizes: tuple[str, ...], nodes: int = 1
) -> list[HardwareFloor]:
    out: list[HardwareFloor] = []
    bus = busbw_path(facts)
    if bus is None:
        return out
    if nodes > 1:  # the world's collectives run over the domain's NVLink: each GPU's links bound them
        bus, p2p = _across(bus, facts, nodes), None
    fraction, why = (NVLINK_BUSBW_FRACTION, NVLINK_BUSBW_WHY) if bus.nvlink else (PCIE_BUSBW_FRACTION, PCIE_BUSBW_WHY)
    big = [s for s in sizes if parse_size(s) >= parse_size(BUSBW_MIN_SIZE)]
    for op in ops:
        # sendrecv goes to one peer, and a ring's broadcast passes each byte from one GPU to the next: on a
        # board where GPUs are meshed directly (a 4-GPU HGX: 6 of each GPU's 18 links to each peer) one pair's
        # links bound them, not the GPU's all
        path = (_slowest([bus, p2p]) if op in PAIR_BOUND_OPS and p2p is not None else None) or bus
        low = round(path.gbps * fraction, 1)
        out += [HardwareFloor(f"collectives.{op}.busbw_gbps@{s}", low, path.fact, fraction, why) for s in big]
    return out
