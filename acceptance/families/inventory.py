"""A node's inventory of its GPUs, the preflight's answers: three views of them (the PCI bus, NVML, torch),
the processes on them and their NVLink domains (``python -m acceptance.probes.inventory``).

The preflight judges a node by them before any probe (``acceptance.run.preflight``), and the health family
reads the same GPU model names; neither owns them.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from acceptance.families.answers import NotMeasured
from acceptance.families.gpu_users import GpuUse


class TorchDevice(TypedDict):
    index: int
    name: str
    uuid: str
    pci_bus_id: str | None


class TorchView(TypedDict, total=False):
    """What torch on a node offers the ranks (``probes.inventory.torch_view``); ``error`` alone where torch
    cannot be imported."""

    version: str
    cuda: str | None
    devices: list[TorchDevice]
    nccl: bool
    available: bool
    error: str


class NvmlListed(TypedDict, total=False):
    """A GPU as NVML lists it in the inventory: the fields of ``probes.inventory.NVML_KEYS`` it answered."""

    index: int
    name: str | NotMeasured
    uuid: str | NotMeasured
    pci_bus_id: str | NotMeasured
    not_measured: str


class NodeInventory(TypedDict, total=False):
    """A node's three views of its GPUs (``python -m acceptance.probes.inventory``); ``error`` alone where
    the inventory gave no answer."""

    pci: list[str]
    nvml: list[NvmlListed] | None
    nvml_error: str | None
    torch: TorchView
    error: str
    # NVML's running compute processes and memory in use per GPU (``acceptance.families.gpu_users``)
    users: list[GpuUse] | None
    # the multi-node NVLink domains of the node's GPUs (``nvlink_domain.domain``) and its IMEX channels
    nvlink_domains: list[str]
    imex_channels: list[str]


def _model_name(name: str) -> str:
    return name.removeprefix("NVIDIA ").strip()


def same_model(name: str, model: str) -> bool:
    """Whether a GPU NVML or CUDA names ``name`` is of the profile's ``model`` (with or without "NVIDIA ")."""
    return _model_name(name) == _model_name(model)
