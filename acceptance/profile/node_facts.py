"""What ``cluster-acceptance init`` found on a node, as data: the GPUs (model and count, NVLink links), an
NVSwitch, NVLS, the network ports, the CPUs; and the node as the reference table keys a setup. Per GPU, the
links its floors are derived from (``acceptance.profile.floors``): each NVLink (up or down, its NVML version,
what is at its other end) and the PCIe link (generation and width, current and maximum).

``acceptance.probes.node_survey`` reads them from the node (NVML, sysfs, the environment).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from acceptance.families.nvlink_domain import label
from acceptance.profile.references import ReferenceTable, Setup


@dataclass(frozen=True)
class Port:
    """One port of a network adapter in /sys/class/infiniband (InfiniBand, or Ethernet for RoCE)."""

    adapter: str
    port: str
    link_layer: str  # InfiniBand or Ethernet
    gbps: float  # the port's rate, as sysfs reports it: "400 Gb/sec (4X NDR)" -> 400
    active: bool


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU, as NVML answers it."""

    link: int
    up: bool
    version: int | None  # NVML's nvmlNvlinkVersion_t (6: NVLink 4.0); None where NVML did not answer
    # what the link reaches: "switch" (an NVSwitch), the PCI bus id of the GPU at its other end, or None
    remote: str | None = None


@dataclass(frozen=True)
class GpuLinks:
    """A GPU's links to its peers and to the host."""

    index: int
    bus_id: str | None = None
    nvlinks: tuple[NvLink, ...] = ()
    pcie_gen: int | None = None  # current: an idle GPU may read Gen1 (it saves power)
    pcie_width: int | None = None
    pcie_max_gen: int | None = None  # what the GPU and its slot can reach
    pcie_max_width: int | None = None

    @property
    def nvlinks_up(self) -> tuple[NvLink, ...]:
        return tuple(link for link in self.nvlinks if link.up)


@dataclass(frozen=True)
class NodeFacts:
    gpu_names: tuple[str, ...]  # one per GPU, as NVML (or torch) names it
    nvlink_links: tuple[int, ...]  # active NVLink links per GPU, where NVML told
    nvswitch: bool  # an NVSwitch on this node's PCI bus
    nvls_off_by_env: bool  # NCCL_NVLS_ENABLE=0 in this environment
    ports: tuple[Port, ...]
    cpus: int
    driver: str | None = None
    notes: tuple[str, ...] = ()  # what could not be read, and why
    links: tuple[GpuLinks, ...] = ()  # per GPU, where NVML answered
    # the multi-node NVLink domain every GPU of the node is of (``nvlink_domain.domain``: a GB200 NVL72 tray);
    # None: none, or its GPUs differ
    nvlink_domain: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_names)

    @property
    def gpu_model(self) -> str | None:
        """The GPUs' one name; None without GPUs or where they differ (a mixed node)."""
        names = set(self.gpu_names)
        return next(iter(names)) if len(names) == 1 else None

    def nvls(self, table: ReferenceTable) -> bool:
        """NVLink SHARP: GPUs of a model that has it, on an NVSwitch (on the node's bus, or the switch trays of
        its multi-node NVLink domain), not turned off for NCCL."""
        key = table.gpu_of(self.gpu_model)
        switched = self.nvswitch or self.nvlink_domain is not None
        return bool(key and table.gpus[key].nvls and switched and not self.nvls_off_by_env)

    def nic_kinds(self, table: ReferenceTable) -> tuple[str, ...]:
        """The table's NIC kinds among the active ports, the most common first."""
        kinds = Counter(k for p in self.ports if p.active and (k := table.nic_of(p.link_layer, p.gbps)))
        return tuple(k for k, _ in kinds.most_common())

    def setup(self, table: ReferenceTable, nodes: int) -> Setup:
        return Setup(
            gpu=table.gpu_of(self.gpu_model),
            nodes=nodes,
            gpus_per_node=self.gpu_count,
            nvls=self.nvls(table) if self.gpu_count else None,
            nics=self.nic_kinds(table),
        )

    def summary(self, table: ReferenceTable) -> str:
        """One line: what was found."""
        if not self.gpu_count:
            gpus = "no GPU"
        else:
            model = self.gpu_model or f"mixed GPUs ({', '.join(sorted(set(self.gpu_names)))})"
            links = f", {min(self.nvlink_links)} NVLink links each" if self.nvlink_links else ""
            fabric = ", NVSwitch" if self.nvswitch else ""
            if self.nvlink_domain is not None:
                fabric += f", multi-node NVLink domain ({label(self.nvlink_domain)})"
            nvls = f", NVLS {'on' if self.nvls(table) else 'off'}"
            gpus = f"{self.gpu_count}x {model}{links}{fabric}{nvls}"
        active = [p for p in self.ports if p.active]
        nics = ", ".join(f"{p.adapter}/{p.port} {p.link_layer} {p.gbps:g} Gb/s" for p in active) or "no RDMA adapter"
        return f"{gpus}; {nics}; {self.cpus} CPUs"


def facts_json(facts: NodeFacts) -> str:
    """The facts as the survey probe prints them."""
    from pydantic import TypeAdapter

    return TypeAdapter(NodeFacts).dump_json(facts).decode()


def facts_from_json(text: str) -> NodeFacts:
    """The survey probe's output read back; a malformed one raises pydantic's ``ValidationError``."""
    from pydantic import TypeAdapter

    return TypeAdapter(NodeFacts).validate_json(text)
