"""Reading this node for ``cluster-acceptance init``: the GPUs (model and count, NVLink links), an NVSwitch,
NVLS, the network ports, the CPUs, and per GPU the links its floors come from: each NVLink's state, version and
far end, the PCIe link's generation and width (current and maximum) (``acceptance.profile.node_facts.NodeFacts``).

``cluster-acceptance init`` runs it as a process of its own (``python -m acceptance.probes.node_survey``
prints the facts as JSON), as the suite runs every probe: NVML and torch are read in a probe, never in the
command line's own process. Every source is a parameter (``Sources``): NVML through ``acceptance.probes.nvml``
(torch's view where NVML cannot answer), the PCI bus and the InfiniBand class under a sysfs root, the
environment. Tests describe an H100 or H200 node with recorded answers and a sysfs tree of their own, through
the same code.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.families import nvlink_domain
from acceptance.families.answers import NotMeasured, not_measured, unanswered
from acceptance.families.health import GpuAnswers, NodeAnswers, allocated
from acceptance.probes import nvml
from acceptance.probes.inventory import NVIDIA_VENDOR, torch_view
from acceptance.probes.nvml import GpuLinksAnswer, NvLinkAnswer
from acceptance.profile.node_facts import GpuLinks, NodeFacts, NvLink, Port, facts_json

# PCI class of an NVSwitch: "bridge, other" (0x0680); GPUs are display controllers (0x03xx)
NVSWITCH_CLASS = "0x0680"
ACTIVE = "ACTIVE"  # an InfiniBand port's state ("4: ACTIVE"); a port that is down carries no traffic
NO_FABRIC = not_measured("fabric info: not in NVML's answers")


def _nvml_answers() -> NodeAnswers | NotMeasured:
    return nvml.read_node()


def _nvml_links() -> list[GpuLinksAnswer] | NotMeasured:
    return nvml.read_nvlinks()


def _torch_names() -> list[str]:
    """The GPUs torch sees, where NVML cannot answer (no pynvml, a container without the NVML library)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def _visible_uuids() -> list[str] | None:
    """The GPUs this job was given, as CUDA shows them (the preflight's ``torch_view``); None where CUDA
    cannot say: NVML's GPUs are then all the node's."""
    view = torch_view()
    if "error" in view or not view.get("available"):
        return None
    return [d["uuid"] for d in view.get("devices", [])]


@dataclass(frozen=True)
class Sources:
    nvml: Callable[[], NodeAnswers | NotMeasured] = _nvml_answers
    nvlinks: Callable[[], list[GpuLinksAnswer] | NotMeasured] = _nvml_links
    torch_names: Callable[[], list[str]] = _torch_names
    # the job's own GPUs (a share of the node: Slurm's GRES, a device plugin, CUDA_VISIBLE_DEVICES)
    visible: Callable[[], list[str] | None] = _visible_uuids
    sysfs: Path = Path("/sys")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cpus: Callable[[], int | None] = os.cpu_count


def detect(sources: Sources | None = None) -> NodeFacts:
    src = sources or Sources()
    notes: list[str] = []
    names, links, driver, gpus, domain = _gpus(src, notes)
    return NodeFacts(
        gpu_names=tuple(names),
        nvlink_links=tuple(links),
        nvswitch=_nvswitch(src.sysfs / "bus" / "pci" / "devices"),
        nvls_off_by_env=src.env.get("NCCL_NVLS_ENABLE", "").strip() == "0",
        ports=tuple(read_ports(src.sysfs / "class" / "infiniband")),
        cpus=src.cpus() or 1,
        driver=driver,
        notes=tuple(notes),
        links=gpus,
        nvlink_domain=domain,
    )


def _gpus(src: Sources, notes: list[str]) -> tuple[list[str], list[int], str | None, tuple[GpuLinks, ...], str | None]:
    answers = src.nvml()
    if unanswered(answers):
        notes.append(f"NVML: {answers['not_measured']}")
        names = src.torch_names()
        if names:
            notes.append(f"GPUs as torch sees them: {len(names)}")
        return names, [], None, (), None
    answers, outside = allocated(answers, src.visible())
    if outside:  # a profile for this job's share: the node's other GPUs are another job's
        notes.append(
            f"{len(outside)} GPU(s) of the node outside this job's allocation, not counted: "
            + ", ".join(f"GPU {g['index']}" for g in outside)
        )
    gpus = [] if unanswered(answers["gpus"]) else answers["gpus"]
    names, links = [], []
    for gpu in gpus:
        name = gpu.get("name")
        names.append(name if isinstance(name, str) else f"GPU {gpu['index']} (name not read)")
        active = gpu.get("nvlink_active")
        if isinstance(active, int):
            links.append(active)
    driver = answers["driver_version"]
    facts = _gpu_links(gpus, src.nvlinks(), notes)
    known = links if len(links) == len(names) else []
    return names, known, driver if isinstance(driver, str) else None, facts, _domain(gpus)


def _domain(gpus: list[GpuAnswers]) -> str | None:
    """The multi-node NVLink domain of every GPU, where they are all of one (NVML's fabric info)."""
    keys = {nvlink_domain.domain(f) if not unanswered(f := gpu.get("fabric", NO_FABRIC)) else None for gpu in gpus}
    return keys.pop() if len(keys) == 1 else None


def _gpu_links(
    gpus: list[GpuAnswers], nvlinks: list[GpuLinksAnswer] | NotMeasured, notes: list[str]
) -> tuple[GpuLinks, ...]:
    """Each GPU's PCIe link (from the health answers) and NVLinks (``nvml.read_nvlinks``), by NVML index."""
    if unanswered(nvlinks):
        notes.append(f"NVLinks: {nvlinks['not_measured']}")
        nvlinks = []
    by_index = {g["index"]: g for g in nvlinks}
    out = []
    for gpu in gpus:
        pcie: Mapping[str, object] = gpu.get("pcie") or {}
        bus = gpu.get("pci_bus_id")
        found = by_index.get(gpu["index"])
        links = found["links"] if found is not None else []
        out.append(
            GpuLinks(
                index=gpu["index"],
                bus_id=bus if isinstance(bus, str) else None,
                nvlinks=tuple(_nvlink(k) for k in links) if not unanswered(links) else (),
                pcie_gen=_int(pcie.get("gen")),
                pcie_width=_int(pcie.get("width")),
                pcie_max_gen=_int(pcie.get("max_gen")),
                pcie_max_width=_int(pcie.get("max_width")),
            )
        )
    return tuple(out)


def _nvlink(link: NvLinkAnswer) -> NvLink:
    version, kind, bus = link["version"], link["remote_type"], link["remote_bus_id"]
    remote = "switch" if kind == "switch" else bus if isinstance(bus, str) else None
    known = version if isinstance(version, int) else None
    return NvLink(link=link["link"], up=link["up"], version=known, remote=remote)


def _int(answer: object) -> int | None:
    return answer if isinstance(answer, int) and not isinstance(answer, bool) else None


def _nvswitch(pci: Path) -> bool:
    for dev in pci.glob("*"):
        try:
            vendor, cls = (dev / "vendor").read_text().strip(), (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and cls.startswith(NVSWITCH_CLASS):
            return True
    return False


def read_ports(root: Path) -> list[Port]:
    """Every port of every adapter under ``root`` (/sys/class/infiniband); none where there is no such class."""
    ports: list[Port] = []
    for adapter in sorted(root.glob("*")):
        for port in sorted((adapter / "ports").glob("*")):
            rate = _read(port / "rate")  # "400 Gb/sec (4X NDR)"
            try:
                gbps = float(rate.split()[0]) if rate else 0.0
            except ValueError:
                gbps = 0.0
            ports.append(
                Port(
                    adapter=adapter.name,
                    port=port.name,
                    link_layer=_read(port / "link_layer") or "InfiniBand",
                    gbps=gbps,
                    active=ACTIVE in _read(port / "state"),
                )
            )
    return ports


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def main() -> None:
    """This node's facts as JSON on stdout (``acceptance.profile.node_facts.facts_from_json`` reads them)."""
    print(facts_json(detect()))


if __name__ == "__main__":
    main()
