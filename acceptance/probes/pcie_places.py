"""Where this node's RDMA NICs and GPUs sit on its PCIe tree, and whether a peer-memory module is loaded: the
reading ``families.net_path`` judges NCCL's NET lines against.

Every file is the kernel's: ``<sys>/class/infiniband/<hca>/device`` links to the NIC's PCI device, whose real
path is its place (``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...``: the root complex, then each
bridge down to it; Documentation/ABI/testing/sysfs-bus-pci); the GPUs' under ``<sys>/bus/pci/devices/<bus id>``.
NVML numbers the GPUs as NCCL's ``nvmlDev`` does: their bus ids come from NVML where it answers, else the bus's
order (NVML's own default order).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from acceptance.families.net_path import PEER_MEMORY_FILES, GpuPlace, NicPlace, NodeNetwork, PciePlace
from acceptance.probes.fabric import numa_node, read_port
from acceptance.probes.inventory import pci_gpus

SYS = Path("/sys")


def bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as sysfs names it: ``0000:18:00.0``."""
    domain, _, rest = nvml_bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def place(device: Path) -> PciePlace | None:
    """The device's root complex and chain of bus ids, from its real path; None where it is not on a PCI bus."""
    try:
        parts = Path(os.path.realpath(device)).parts
    except OSError:
        return None
    roots = [i for i, p in enumerate(parts) if p.startswith("pci") and ":" in p]
    if not roots:
        return None
    return {"root": parts[roots[0]], "chain": list(parts[roots[0] + 1 :]), "numa_node": numa_node(device / "numa_node")}


def _nics(root: Path) -> list[NicPlace]:
    nics: list[NicPlace] = []
    for hca in sorted(root.iterdir()) if root.is_dir() else []:
        where = place(hca / "device")
        ports = sorted((hca / "ports").iterdir(), key=lambda p: p.name) if (hca / "ports").is_dir() else []
        if where is None or not ports:
            continue
        port = read_port(hca, ports[0])
        nics.append({**where, "name": hca.name, "state": port["state"], "link_layer": port["link_layer"]})
    return nics


def read(sys: Path = SYS, gpu_bus_ids: Sequence[str] | None = None) -> NodeNetwork:
    """The NICs of ``<sys>/class/infiniband`` (port 1's state: NCCL's device is a port, most NICs have one) and
    the GPUs (``gpu_bus_ids`` in NVML's order, else every NVIDIA GPU on the bus in its order)."""
    try:
        nics = _nics(sys / "class" / "infiniband")
    except OSError:  # a tree that cannot be listed: no NIC is placed, and no rule asserts one
        nics = []
    devices = sys / "bus" / "pci" / "devices"
    ids = [bus_id(b) for b in gpu_bus_ids] if gpu_bus_ids is not None else pci_gpus(devices)
    gpus: list[GpuPlace] = []
    for index, bus in enumerate(ids):
        where = place(devices / bus)
        if where is not None:
            gpus.append({**where, "index": index, "pci_bus_id": bus})
    peer = next((name for name in PEER_MEMORY_FILES if (sys / name).exists()), None)
    return {"nics": nics, "gpus": gpus, "peer_memory": peer}
