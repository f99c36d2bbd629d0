"""What this node offers the probes, before any probe starts: ``python -m acceptance.probes.inventory``.

One process, no torchrun: prints one JSON object with three views of the GPUs, so that a missing one
can be named by what is left of it: the PCI bus (``/sys/bus/pci/devices``: a GPU that fell off NVML is
often still listed there), NVML (``acceptance.probes.nvml``: index, bus id, UUID, name; it ignores
CUDA_VISIBLE_DEVICES), and torch (what the ranks will get: the build's CUDA, the devices CUDA shows, NCCL).
``acceptance.run.preflight`` judges the answers against the profile.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import cast

from acceptance.families import nvlink_domain
from acceptance.families.answers import unanswered
from acceptance.families.gpu_users import PROC, GpuProcess, GpuUse
from acceptance.families.inventory import NodeInventory, NvmlListed, TorchView
from acceptance.masking import masked_command
from acceptance.probes import nvml

PCI_DEVICES = Path("/sys/bus/pci/devices")
COMMAND_CHARS = 200  # of a foreign process's command line: enough to tell a job from a daemon
NVIDIA_VENDOR = "0x10de"  # PCI-SIG vendor id of NVIDIA
GPU_CLASSES = ("0x0300", "0x0302")  # PCI class codes: VGA controller, 3D controller (NVSwitches are bridges)
NVML_KEYS = ("index", "name", "uuid", "pci_bus_id", nvml.NOT_MEASURED)


def pci_gpus(root: Path = PCI_DEVICES) -> list[str]:
    """Bus ids of the NVIDIA GPUs on the PCI bus, whatever the driver thinks of them."""
    found = []
    for dev in sorted(root.glob("*")):
        try:
            vendor, cls = (dev / "vendor").read_text().strip(), (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and cls[:6] in GPU_CLASSES:
            found.append(dev.name)
    return found


def torch_view() -> TorchView:
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return {"error": f"torch cannot be imported: {exc}"}
    view: TorchView = {"version": torch.__version__, "cuda": torch.version.cuda, "devices": []}
    view["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
    try:
        view["available"] = torch.cuda.is_available()
        for index in range(torch.cuda.device_count() if view["available"] else 0):
            props = torch.cuda.get_device_properties(index)
            # older builds lack the PCI fields (as in acceptance.probes.connectivity)
            part = [getattr(props, f"pci_{p}_id", None) for p in ("domain", "bus", "device")]
            pci = f"{part[0]:04x}:{part[1]:02x}:{part[2]:02x}.0" if None not in part else None
            view["devices"].append({"index": index, "name": props.name, "uuid": f"GPU-{props.uuid}", "pci_bus_id": pci})
    except (RuntimeError, AssertionError) as exc:  # a driver that is missing or too old for this build
        view["error"] = str(exc).strip().splitlines()[0]
    return view


def read() -> NodeInventory:
    node = nvml.read_node()
    gpus = node.get("gpus")
    listed: list[NvmlListed] | None
    if isinstance(gpus, list):
        # the GPU's answers cut down to NVML_KEYS, a subset of its own keys
        listed, error = [cast(NvmlListed, {k: g[k] for k in NVML_KEYS if k in g}) for g in gpus], None
    else:  # NVML missing, or it could not count: the reason is on the node or on its count
        listed, error = (
            None,
            str(node.get(nvml.NOT_MEASURED) or (gpus if isinstance(gpus, dict) else {}).get(nvml.NOT_MEASURED)),
        )
    users = nvml.read_gpu_users()
    fabric = nvml.read_fabric()
    answered = [] if unanswered(fabric) else [g["fabric"] for g in fabric]
    keys = [nvlink_domain.domain(f) for f in answered if not unanswered(f)]
    return {
        "nvlink_domains": sorted({k for k in keys if k is not None}),
        "imex_channels": nvlink_domain.imex_channels(),
        "pci": pci_gpus(),
        "nvml": listed,
        "nvml_error": error,
        # read before torch below creates anything on a GPU; a process NVML lists is named by its command
        "users": [with_commands(u) for u in users] if isinstance(users, list) else None,
        "torch": torch_view(),
    }


def command_of(pid: int, proc: Path = PROC) -> str | None:
    """A process's command line, as ps shows it, a secret in it masked (``masking.masked_command``: a token
    passed as an argument); None where this node's /proc does not show the pid (a process of another pid
    namespace: NVML answers with the host's pids). It goes to the evidence only: a one-line message names
    the pid and the executable (``gpu_users.foreign_use``)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    return " ".join(masked_command(argv))[:COMMAND_CHARS] or None


def with_commands(use: GpuUse, proc: Path = PROC) -> GpuUse:
    processes = [{**p, "command": command_of(p["pid"], proc)} for p in use["processes"]]
    return {**use, "processes": cast(list[GpuProcess], processes)}


def users() -> list[GpuUse] | None:
    """Only the GPUs' users (NVML, no torch): what the preflight reads before the run starts anything of its
    own on a GPU."""
    found = nvml.read_gpu_users()
    return [with_commands(u) for u in found] if isinstance(found, list) else None


if __name__ == "__main__":
    json.dump({"users": users()} if sys.argv[1:] == ["--users"] else read(), sys.stdout, default=str)
