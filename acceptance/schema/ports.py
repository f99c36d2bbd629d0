"""A node's InfiniBand/RoCE ports as the kernel lists them (sysfs), one reading of them.

The fabric family's probe (``acceptance.probes.fabric``) writes a reading; the plugin takes one of them in
its own process before any probe (``acceptance.run.fabric_readings``) and the family's rules compare two
(``acceptance.families.fabric``): the shape sits below all three.
"""

from __future__ import annotations

from typing_extensions import TypedDict


class PortReading(TypedDict):
    hca: str  # mlx5_0
    port: str  # 1
    state: str  # DOWN, INIT, ARMED, ACTIVE (``state`` without its number)
    phys_state: str  # LinkUp, Polling, Disabled, ...
    rate: str  # as the kernel writes it: "400 Gb/sec (4X NDR)"
    width: str | None  # the lanes, from the rate's text: 4X; None where the rate does not say
    link_layer: str | None  # InfiniBand or Ethernet (RoCE)
    counters: dict[str, int]  # every counter of ports/<port>/counters/ that reads as a number
    numa_node: int | None  # the HCA's NUMA node (device/numa_node; -1 in sysfs: none); None: not readable


class GpuNuma(TypedDict):
    pci_bus_id: str
    numa_node: int | None


class FabricReading(TypedDict):
    host: str
    root: str
    ports: list[PortReading]
    gpus: list[GpuNuma]  # every NVIDIA GPU on the PCI bus with its NUMA node: the GPU-to-NIC affinity
    # the reading failed: the probe gave no answer (a timeout, a crash, output not JSON) or the root is there
    # and could not be listed; its figures are unmeasured, never a pass. A root that does not exist (no
    # InfiniBand stack) is no error: a reading without ports.
    error: str | None
