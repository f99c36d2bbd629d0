"""The path NCCL should take through the network: GPUDirect RDMA where the NIC and the GPU can use it, and each
GPU's traffic on its nearest NIC. Torch-free: ``acceptance.probes.pcie_places`` reads where each NIC and GPU
sits on the PCIe tree; these rules judge the NET lines of NCCL's log against it.

NCCL writes one line per channel of a NET connection (``src/transport/net.cc``)::

    Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
    Channel 00/0 : 0[1] -> 8[1] [send] via NET/IB/1(0)/GDRDMA/Shared
    Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0

``NET/<net>/<dev>``: the network plugin and NCCL's index of the NIC; ``(<proxy>)``: the rank whose NIC carries
the traffic (PXN: a GPU of the same node nearer that NIC); ``/GDRDMA``: the NIC reads and writes the GPU's
memory directly, without it NCCL stages every message through host memory. NCCL names its NICs once per
process (``src/transport/net_ib/init.cc``)::

    NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>

NCCL enables GPUDirect RDMA (``ncclTopoCheckGdr``, ``src/graph/paths.cc``) where both the NIC and the GPU
support it (the peer-memory module loaded, ``src/transport/net_ib/gdr.cc``, or dma-buf), and the PCIe path
between them is no longer than ``NCCL_NET_GDR_LEVEL`` (default PXB: through PCIe switches, not through the
CPU's host bridge). It picks for each GPU the NICs nearest it (``src/graph/search.cc``); ``NCCL_IB_HCA``
narrows the NICs it may use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from typing_extensions import TypedDict

from acceptance.families.transport import FORCED_BY_SETTING, NetFinding, RankLog

# NCCL's path types as NCCL_NET_GDR_LEVEL names them, in NCCL's order (src/include/graph.h: PATH_PIX 4, PATH_PXB 5,
# PATH_P2C 6, PATH_PXN 7, PATH_PHB 8, PATH_SYS 9; src/graph/topo.cc: topoPathTypeStr); the PCIe tree tells four apart
PATH_LEVELS = {"LOC": 0, "NVL": 1, "NVB": 2, "C2C": 3, "PIX": 4, "PXB": 5, "P2C": 6, "PXN": 7, "PHB": 8, "SYS": 9}
PathType = Literal["PIX", "PXB", "PHB", "SYS"]
# NCCL's default NCCL_NET_GDR_LEVEL as it acts on a PCIe tree (src/graph/paths.cc, ncclTopoCheckGdr: PATH_P2C with
# NCCL_NET_GDR_C2C on, its default, else PATH_PXB; P2C paths exist only where the GPU reaches the CPU over C2C, which
# no PCIe path shows, so on a PCIe tree both admit PIX and PXB and no more)
DEFAULT_GDR_LEVEL: PathType = "PXB"
# the files whose presence NCCL takes for a peer-memory module (src/transport/net_ib/gdr.cc, ncclIbGdrSupport)
PEER_MEMORY_FILES = (
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
)
# the settings that change which NIC NCCL uses or whether it reads GPU memory directly, in the order a message
# names them (NCCL's environment variables, docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)
NET_SETTINGS = ("NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA",
                "NCCL_DMABUF_ENABLE", "NCCL_CROSS_NIC")  # fmt: skip
# how a finding names a cause that is the node's own set-up (a module not loaded), not a setting of the run
NODE_CONFIGURATION = "the node's configuration"
ACTIVE = "ACTIVE"

_USE = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<rest>.*)$")
_NIC_LIST = re.compile(r"NCCL INFO NET/(?P<net>\w+) : Using(?P<list>(?: \[\d+\][^ ;]+)+)")
_NIC = re.compile(r"\[(?P<dev>\d+)\](?P<name>[^:\s]+):(?P<port>\d+)")


class PciePlace(TypedDict):
    """Where a device sits on the PCIe tree: its root complex and the bridges down to it."""

    root: str  # pci0000:00
    chain: list[str]  # the bus ids from the root's first bridge down to the device itself
    numa_node: int | None


class NicPlace(PciePlace):
    name: str  # mlx5_0
    state: str  # port 1's logical state (ACTIVE, DOWN, ...)
    link_layer: str | None  # InfiniBand or Ethernet (RoCE)


class GpuPlace(PciePlace):
    index: int  # NVML's index: NVML numbers the GPUs in PCI bus order
    pci_bus_id: str


class NodeNetwork(TypedDict):
    """One node's NICs and GPUs on its PCIe tree, and the peer-memory module NCCL looks for."""

    nics: list[NicPlace]
    gpus: list[GpuPlace]
    peer_memory: str | None  # the first of PEER_MEMORY_FILES found; None: no peer-memory module loaded


@dataclass(frozen=True)
class NetUse:
    """One NET transport as NCCL spells it."""

    net: str  # IB, Socket, or a plugin's name
    dev: int  # NCCL's index of the NIC
    proxy: int | None  # PXN: the rank whose NIC carries it
    gdr: bool


def net_use(transport: str) -> NetUse | None:
    """``NET/IB/1(0)/GDRDMA/Shared`` -> IB, NIC 1, through rank 0, GDR; None for P2P or SHM."""
    found = _USE.match(transport)
    if found is None:
        return None
    proxy = found["proxy"]
    return NetUse(found["net"], int(found["dev"]), int(proxy) if proxy else None, "/GDRDMA" in found["rest"])


def nic_names(text: str) -> dict[int, str]:
    """NCCL's index -> NIC name, from its ``NET/IB : Using [0]mlx5_0:1/IB ...`` line (the first one)."""
    found = _NIC_LIST.search(text)
    return {int(m["dev"]): m["name"] for m in _NIC.finditer(found["list"])} if found else {}


def distance(a: PciePlace, b: PciePlace) -> PathType:
    """NCCL's path type between two PCIe devices: PIX through one PCIe switch, PXB through several, PHB through
    the CPU's host bridge, SYS across CPUs (NUMA nodes)."""
    if a["root"] != b["root"]:
        return "PHB" if a["numa_node"] is not None and a["numa_node"] == b["numa_node"] else "SYS"
    shared = 0
    for x, y in zip(a["chain"], b["chain"], strict=False):
        if x != y:
            break
        shared += 1
    if shared == 0:  # they meet only at the root complex
        return "PHB"
    # below the switch's upstream port both hang off its downstream ports (port, device): one switch
    return "PIX" if len(a["chain"]) - shared <= 2 and len(b["chain"]) - shared <= 2 else "PXB"


def gdr_level(environ: Mapping[str, str]) -> tuple[int, str]:
    """NCCL_NET_GDR_LEVEL as NCCL reads it (a name or a number, ncclGetLevel), else the default."""
    raw = environ.get("NCCL_NET_GDR_LEVEL", "").strip().upper()
    if raw in PATH_LEVELS:
        return PATH_LEVELS[raw], raw
    if raw.isdigit():  # NCCL's numbers of before 2.12, in its old order (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS)
        old = ("LOC", "PIX", "PXB", "PHB", "SYS")[min(int(raw), 4)]
        return PATH_LEVELS[old], old
    return PATH_LEVELS[DEFAULT_GDR_LEVEL], DEFAULT_GDR_LEVEL


def nearest(node: NodeNetwork, gpu: GpuPlace) -> tuple[list[str], PathType | None]:
    """The NICs nearest ``gpu`` (every one at the shortest path) and that path."""
    if not node["nics"]:
        return [], None
    ranked = [(PATH_LEVELS[distance(gpu, nic)], nic["name"]) for nic in node["nics"]]
    best = min(level for level, _ in ranked)
    kind = next(k for k, v in PATH_LEVELS.items() if v == best)
    return sorted(name for level, name in ranked if level == best), kind  # type: ignore[return-value]


def _set(environ: Mapping[str, str], names: Sequence[str]) -> str:
    return ", ".join(f"{k}={environ[k]}" for k in names if environ.get(k, "") != "")


def gdr_finding(
    host: str, gpu: GpuPlace, nic: NicPlace, node: NodeNetwork, environ: Mapping[str, str], send: bool = False
) -> NetFinding | None:
    """A NET/IB connection of ``gpu`` over ``nic`` logged without GDRDMA: why, where the pair could use it; None
    where the hardware offers no GPUDirect RDMA there either (the path too long by NCCL's default). A send
    (NCCL reads GPU memory) is judged only where NCCL_NET_GDR_READ=0 turned it off: NCCL leaves GDR reads off by
    its own choice on GPUs before Ampere without NVLink (ncclTopoCheckGdr), which these rules cannot see."""
    path = distance(gpu, nic)
    if PATH_LEVELS[path] > PATH_LEVELS[DEFAULT_GDR_LEVEL]:
        return None
    if send and environ.get("NCCL_NET_GDR_READ", "") != "0":
        return None
    where = f"{host} GPU {gpu['index']} over {nic['name']} ({path})"
    level, level_name = gdr_level(environ)
    if nic["state"] != ACTIVE:
        return {"host": host, "gpu": gpu["index"], "category": "hardware",
                "text": f"{where}: no GPUDirect RDMA, {nic['name']} port {nic['state']}"}  # fmt: skip
    forcing = _set(environ, ("NCCL_NET_GDR_LEVEL",)) if PATH_LEVELS[path] > level else ""
    if send:
        forcing = ", ".join(x for x in (forcing, "NCCL_NET_GDR_READ=0") if x)
    if environ.get("NCCL_DMABUF_ENABLE", "") == "0" and node["peer_memory"] is None:
        forcing = ", ".join(x for x in (forcing, "NCCL_DMABUF_ENABLE=0") if x)
    expected = f"expected GDRDMA (NIC and GPU {path}, within NCCL's {DEFAULT_GDR_LEVEL})"
    if forcing:
        return {"host": host, "gpu": gpu["index"], "category": "environment",
                "text": f"{where}: staged through host memory, {expected}; {forcing} {FORCED_BY_SETTING}"}  # fmt: skip
    if node["peer_memory"] is None:
        cause = (f"no peer-memory module loaded (/sys/module/nvidia_peermem absent: modprobe nvidia-peermem) and "
                 f"NCCL did not use dma-buf: {NODE_CONFIGURATION}")  # fmt: skip
    else:
        cause = f"peer memory {node['peer_memory']} present, NCCL_NET_GDR_LEVEL {level_name}: {NODE_CONFIGURATION}"
    return {"host": host, "gpu": gpu["index"], "category": "configuration",
            "text": f"{where}: staged through host memory, {expected}; {cause}"}  # fmt: skip


@dataclass(frozen=True)
class ChannelNic:
    """A GPU's own NET channels on one NIC of its node, as its rank's log says."""

    host: str
    gpu: int  # NVML index
    nic: str
    gdr: bool
    net: str


def shared_nic_findings(used: Sequence[ChannelNic], node: NodeNetwork, environ: Mapping[str, str]) -> list[NetFinding]:
    """Two GPUs' channels on one NIC while each has a nearest NIC of its own: each GPU away from its own named
    (with NCCL_IB_HCA where the environment narrows the NICs)."""
    places = {g["index"]: g for g in node["gpus"]}
    own: dict[int, str] = {}
    for index, gpu in places.items():
        names, _ = nearest(node, gpu)
        if len(names) == 1:
            own[index] = names[0]
    holders: dict[str, set[int]] = {}
    for u in used:
        holders.setdefault(u.nic, set()).add(u.gpu)
    found: list[NetFinding] = []
    for nic, gpus in sorted(holders.items()):
        mine = sorted(g for g in gpus if g in own)
        if len(mine) < 2 or len({own[g] for g in mine}) < 2:
            continue  # one GPU on it, or GPUs that share their nearest NIC: NCCL's own choice
        host = used[0].host
        for g in mine:
            if own[g] == nic:
                continue
            others = ", ".join(f"GPU {o}" for o in mine if o != g)
            text = f"{host} GPU {g}: channels on {nic} (shared with {others}), its nearest NIC is {own[g]}"
            hca = _set(environ, ("NCCL_IB_HCA",))
            nics = {n["name"]: n for n in node["nics"]}
            if hca:
                found.append({"host": host, "gpu": g, "category": "environment",
                              "text": f"{text}; {hca} {FORCED_BY_SETTING}"})  # fmt: skip
            elif own[g] in nics and nics[own[g]]["state"] != ACTIVE:
                found.append({"host": host, "gpu": g, "category": "hardware",
                              "text": f"{text}; {own[g]} port {nics[own[g]]['state']}"})  # fmt: skip
            else:
                found.append({"host": host, "gpu": g, "category": "fabric",
                              "text": f"{text}; no NCCL setting forced it: check {own[g]}'s rail cabling"})  # fmt: skip
    return found


def socket_finding(host: str, node: NodeNetwork, environ: Mapping[str, str]) -> NetFinding | None:
    """NCCL over sockets from a node with an RDMA port up: why; None where the node has none (sockets are
    then the only network NCCL has)."""
    active = [n["name"] for n in node["nics"] if n["state"] == ACTIVE]
    if not active:
        return None
    text = f"{host}: NET/Socket, expected NET/IB ({', '.join(active)} ACTIVE)"
    forcing = _set(environ, ("NCCL_IB_DISABLE", "NCCL_NET"))
    if forcing:
        return {"host": host, "gpu": -1, "category": "environment", "text": f"{text}; {forcing} {FORCED_BY_SETTING}"}
    return {"host": host, "gpu": -1, "category": "configuration",
            "text": f"{text}; NCCL found no usable RDMA device (libibverbs?): {NODE_CONFIGURATION}"}  # fmt: skip


def judge(logs: Sequence[RankLog], networks: Mapping[str, NodeNetwork]) -> list[NetFinding]:
    """Every NET connection of every rank's log against its node's NICs and GPUs (``networks``: host -> its
    reading; a host absent: not known, nothing judged there). Each GPU's channels over NCCL's NIC index, named by
    its ``NET/IB : Using`` line; a channel carried by another GPU's NIC (PXN) is that GPU's, not this one's."""
    return _walk(logs, networks)[0]


def paths(logs: Sequence[RankLog], networks: Mapping[str, NodeNetwork]) -> list[str]:
    """The GPU-to-NIC paths ``judge`` held against the hardware, as the evidence keeps them: ``host GPU 1 ->
    mlx5_1 (IB, GDRDMA)``."""
    used = _walk(logs, networks)[1]
    return [
        f"{c.host} GPU {c.gpu} -> {c.nic} ({c.net}{', GDRDMA' if c.gdr else ''})"
        for _, channels in sorted(used.items())
        for _, c in sorted(channels.items())
    ]


def _walk(
    logs: Sequence[RankLog], networks: Mapping[str, NodeNetwork]
) -> tuple[list[NetFinding], dict[str, dict[tuple[int, str], ChannelNic]]]:
    found: dict[tuple[str, int, str], NetFinding] = {}
    used: dict[str, dict[tuple[int, str], ChannelNic]] = {}
    environs: dict[str, Mapping[str, str]] = {}
    for log in logs:
        node = networks.get(log["host"])
        if node is not None and log["dev"] is not None:
            environs.setdefault(log["host"], log.get("net_settings", {}))
            _judge_rank(log, node, found, used.setdefault(log["host"], {}))
    for host, channels in sorted(used.items()):
        for shared in shared_nic_findings(list(channels.values()), networks[host], environs[host]):
            found.setdefault((host, shared["gpu"], "nic"), shared)
    return list(found.values()), used


def _judge_rank(
    log: RankLog,
    node: NodeNetwork,
    found: dict[tuple[str, int, str], NetFinding],
    used: dict[tuple[int, str], ChannelNic],
) -> None:
    host, environ = log["host"], log.get("net_settings", {})
    gpu = next((g for g in node["gpus"] if g["index"] == log["dev"]), None)
    nics = {n["name"]: n for n in node["nics"]}
    names = log.get("nics", {})
    for conn in log["connections"]:
        use = net_use(conn["transport"])
        if use is None:
            continue
        if use.net == "Socket":
            socket = socket_finding(host, node, environ)
            if socket is not None:
                found.setdefault((host, -1, "Socket"), socket)
            continue
        nic = nics.get(names.get(use.dev, ""))
        if gpu is None or nic is None or (use.proxy is not None and use.proxy != log["rank"]):
            continue  # a NIC NCCL did not name, or a virtual one; PXN: another GPU's NIC
        seen = used.get((gpu["index"], nic["name"]))
        gdr = use.gdr and (seen is None or seen.gdr)  # a path is GDR only where every channel of it is
        used[(gpu["index"], nic["name"])] = ChannelNic(host, gpu["index"], nic["name"], gdr, use.net)
        staged = None if use.gdr else gdr_finding(host, gpu, nic, node, environ, send=not conn["receive"])
        if staged is not None:
            found.setdefault((host, gpu["index"], f"gdr {nic['name']}"), staged)


def net_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The NET_SETTINGS that ``environ`` has."""
    return {name: environ[name] for name in NET_SETTINGS if environ.get(name, "") != ""}
