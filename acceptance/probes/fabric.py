"""This node's InfiniBand/RoCE ports as the kernel shows them: ``python -m acceptance.probes.fabric ROOT``.

One process, no torch: prints one JSON object (``acceptance.families.fabric.FabricReading``). Every file read
is documented in the kernel's Documentation/ABI/stable/sysfs-class-infiniband: per HCA
``<root>/<hca>/ports/<port>/{state,phys_state,rate,link_layer}`` and ``counters/*`` (one number each), and
the HCA's PCI device's ``numa_node`` (Documentation/ABI/testing/sysfs-bus-pci; -1: none). The GPUs' NUMA
nodes come from the same PCI folder for the GPUs on the bus, so the GPU-to-NIC affinity is on record.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path

from acceptance.probes.inventory import PCI_DEVICES, pci_gpus
from acceptance.schema.ports import FabricReading, GpuNuma, PortReading

WIDTH = re.compile(r"\((\d+X)\b")  # "400 Gb/sec (4X NDR)": the lanes


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def numa_node(path: Path) -> int | None:
    raw = _text(path)
    try:
        value = int(raw) if raw is not None else None
    except ValueError:
        return None
    return None if value is None or value < 0 else value


def _state(raw: str | None) -> str:
    """``4: ACTIVE`` -> ACTIVE; ``5: LinkUp`` -> LinkUp."""
    return (raw or "unknown").split(":", 1)[-1].strip()


def read_port(hca: Path, port: Path) -> PortReading:
    counters: dict[str, int] = {}
    for counter in sorted((port / "counters").glob("*")):
        raw = _text(counter)
        if raw is not None and raw.isdigit():
            counters[counter.name] = int(raw)
    rate = _text(port / "rate") or ""
    width = WIDTH.search(rate)
    return {
        "hca": hca.name,
        "port": port.name,
        "state": _state(_text(port / "state")),
        "phys_state": _state(_text(port / "phys_state")),
        "rate": rate,
        "width": width.group(1) if width else None,
        "link_layer": _text(port / "link_layer"),
        "counters": counters,
        "numa_node": numa_node(hca / "device" / "numa_node"),
    }


def read(root: Path, pci: Path = PCI_DEVICES) -> FabricReading:
    gpus: list[GpuNuma] = [{"pci_bus_id": b, "numa_node": numa_node(pci / b / "numa_node")} for b in pci_gpus(pci)]
    try:
        hcas = sorted(p for p in root.iterdir() if (p / "ports").is_dir())
    except FileNotFoundError:  # no InfiniBand stack on this node: no port, and nothing failed
        return {"host": socket.gethostname(), "root": str(root), "ports": [], "gpus": gpus, "error": None}
    except OSError as exc:  # the root is there and cannot be listed: the reading failed
        return {"host": socket.gethostname(), "root": str(root), "ports": [], "gpus": gpus,
                "error": f"{root}: {exc.strerror or exc}"}  # fmt: skip
    ports = [read_port(hca, port) for hca in hcas for port in sorted((hca / "ports").iterdir(), key=lambda p: p.name)]
    return {"host": socket.gethostname(), "root": str(root), "ports": ports, "gpus": gpus, "error": None}


if __name__ == "__main__":
    json.dump(read(Path(sys.argv[1])), sys.stdout)
