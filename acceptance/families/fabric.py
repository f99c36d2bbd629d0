"""The fabric family's rules: each InfiniBand/RoCE port of a node read before and after the network probes.

A port whose error counters rose while the suite moved data over it (symbol errors, link downs, receive
errors, ...) is a cable, a transceiver or a switch port going bad, which a bandwidth figure hides as long as
the retries keep up. The reading is the kernel's (``acceptance.probes.fabric``: Documentation/ABI/stable/
sysfs-class-infiniband); these rules compare two of them and name the node, the HCA and the port.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from acceptance.schema.family import Behaviour, Family, Shapes
from acceptance.schema.fields import AbsolutePath, Strict
from acceptance.schema.figure import Figure
from acceptance.schema.ports import FabricReading as FabricReading  # the family's result, as its tests name it
from acceptance.schema.ports import GpuNuma as GpuNuma
from acceptance.schema.ports import PortReading as PortReading

# The error counters of an InfiniBand/RoCE port, as the kernel names them under
# /sys/class/infiniband/<hca>/ports/<port>/counters/ (Documentation/ABI/stable/sysfs-class-infiniband, "port
# counters"): any of them rising while the network probes ran is a link that lost or corrupted data.
FABRIC_ERROR_COUNTERS = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
]


class Fabric(Strict):
    """Every InfiniBand/RoCE port of the node read before and after the network probes (sysfs)."""

    # where the kernel lists the HCAs; a recorded tree in the tests (each node reads its own)
    sysfs_root: AbsolutePath = "/sys/class/infiniband"
    counters: list[str] = FABRIC_ERROR_COUNTERS  # the counters whose rise fails the node


_PORTS = Shapes[Fabric]("fabric.<figure>")


def _sysfs_root(s: Fabric) -> str:
    return s.sysfs_root


FABRIC = Family(
    "fabric",
    "every InfiniBand/RoCE port's state, rate and error counters, read before and after the network probes",
    Fabric,
    (
        _PORTS.count(r"(counter_increases)"),
        # information: ports not ACTIVE (an unused port is down by design) and ports read; a profile may bound them
        _PORTS.figure(r"(ports_down)", "lower", scale="bound"),
        _PORTS.figure(r"(ports)", "none", scale="bound"),
    ),
    local=True,
    probes=("fabric",),  # a sysfs read per node, in the node's own pytest (``acceptance.run.fabric_readings``)
    behaviour=Behaviour(reads_ports=_sysfs_root),
    needs_every_gpu=False,
    quick=True,
)


ACTIVE = "ACTIVE"  # the port's logical state (``state`` reads "4: ACTIVE")


@dataclass(frozen=True)
class Increase:
    host: str
    hca: str
    port: str
    counter: str
    before: int
    after: int

    def text(self) -> str:
        return f"{self.host} {self.hca} port {self.port}: {self.counter} {self.before} -> {self.after}"


def increases(before: FabricReading, after: FabricReading, counters: Sequence[str]) -> list[Increase]:
    """Every watched counter that rose between the readings, per port; a port only the second reading has
    is not compared (it appeared), one only the first has is ``missing``."""
    old = {(p["hca"], p["port"]): p for p in before["ports"]}
    found: list[Increase] = []
    for port in after["ports"]:
        was = old.get((port["hca"], port["port"]))
        if was is None:
            continue
        for name in counters:
            if name in port["counters"] and name in was["counters"] and port["counters"][name] > was["counters"][name]:
                found.append(
                    Increase(
                        after["host"], port["hca"], port["port"], name, was["counters"][name], port["counters"][name]
                    )
                )
    return found


def missing(before: FabricReading, after: FabricReading) -> list[str]:
    """Each port the first reading has and the second does not, node, HCA and port named: its counters
    after the probes are not known, and a port gone is a link that went away."""
    now = {(p["hca"], p["port"]) for p in after["ports"]}
    return [
        f"{after['host']} {p['hca']} port {p['port']}: present before the probes, missing after"
        for p in before["ports"]
        if (p["hca"], p["port"]) not in now
    ]


def unmeasured(before: FabricReading | None, after: FabricReading) -> list[str]:
    """Why the counters' rise is not measured, one line each; none when both readings are whole."""
    host = after["host"]
    why: list[str] = []
    if before is None:
        why.append(f"{host}: no first reading of the ports was stored (it is taken beside the preflight)")
    elif before["error"]:
        why.append(f"{host}: the first reading failed: {before['error']}")
    if after["error"]:
        why.append(f"{host}: the second reading failed: {after['error']}")
    if before is not None and not why:
        why += missing(before, after)
    return why


def port_text(port: PortReading) -> str:
    return f"{port['hca']} port {port['port']}: {port['state']} {port['rate'] or 'rate unknown'} ({port['link_layer']})"


def affinity(reading: FabricReading) -> list[str]:
    """Each HCA's and GPU's NUMA node, in words: which GPUs share a socket with which NIC."""
    hcas = {p["hca"]: p["numa_node"] for p in reading["ports"]}
    lines = [f"{hca}: NUMA {numa if numa is not None else 'unknown'}" for hca, numa in sorted(hcas.items())]
    lines += [
        f"GPU {g['pci_bus_id']}: NUMA {g['numa_node'] if g['numa_node'] is not None else 'unknown'}"
        for g in reading["gpus"]
    ]
    return lines


def evaluate(before: FabricReading | None, after: FabricReading, counters: Sequence[str]) -> dict[str, Figure]:
    """The family's figures: counters that rose (gated: none may), ports not ACTIVE and ports read (recorded).
    ``before`` None: no first reading was stored. A reading that failed, a missing first reading and a port
    gone by the second make the figures they feed unmeasured (the test fails with the line); the counters'
    test skips only where both readings succeeded and neither lists a port."""
    host = after["host"]
    lost = unmeasured(before, after)
    read_after = [f"{host}: the second reading failed: {after['error']}"] if after["error"] else []
    if not lost and before is not None and not before["ports"] and not after["ports"]:
        skip = f"{host} has no InfiniBand/RoCE port: no port under {after['root']}"
        return {
            "fabric.ports": Figure("fabric.ports", "ports", 0, findings=[skip]),
            "fabric.counter_increases": Figure("fabric.counter_increases", "counters", 0, findings=[skip], skip=skip),
            "fabric.ports_down": Figure("fabric.ports_down", "ports", 0, findings=[skip], skip=skip),
        }
    rose = increases(before, after, counters) if before is not None else []
    down = [p for p in after["ports"] if p["state"] != ACTIVE]
    watched = f"{len(counters)} error counters on {len(after['ports'])} port(s)"
    lost_text = "\n".join(lost)
    listed = "; ".join(port_text(p) for p in after["ports"])
    return {
        "fabric.ports": Figure(
            "fabric.ports",
            "ports",
            len(after["ports"]),
            findings=[listed or "".join(read_after) or f"no port under {after['root']}"],
            unmeasured=read_after,
        ),
        "fabric.counter_increases": Figure(
            "fabric.counter_increases",
            "counters",
            len(rose),
            findings=["; ".join(i.text() for i in rose) or (f"not measured: {lost_text}" if lost else watched)],
            unmeasured=lost,
        ),
        "fabric.ports_down": Figure(
            "fabric.ports_down",
            "ports",
            len(down),
            findings=["; ".join(f"{host} {port_text(p)}" for p in down) or "".join(read_after) or "every port ACTIVE"],
            unmeasured=read_after,
        ),
    }


@dataclass(frozen=True)
class FabricResult:
    """The two readings of this node's ports and the figures judged from them."""

    before: FabricReading | None  # None: no first reading was stored
    after: FabricReading
    figures: dict[str, Figure]
