"""Drift: every node's and every GPU's software and settings, gathered so that every node's pytest judges the
whole cluster (``acceptance.families.drift`` holds the rules).

Local rank 0 of each node reads the node's fields:

* ``kernel``: ``platform.release()``; ``os``: ``PRETTY_NAME`` of /etc/os-release; ``python``;
* ``torch``: ``torch.__version__``, its local build tag included (``2.13.0+cu128``); ``cuda``: the CUDA torch
  was built with (``torch.version.cuda``); ``nccl``: the NCCL torch loads (``torch.cuda.nccl.version()``);
* ``driver``: NVML's driver version;
* ``nic_firmware``, ``nic_rate``: every adapter's ``/sys/class/infiniband/<hca>/fw_ver`` and every port's
  ``ports/<port>/rate``, counted (``28.39.1002 on 8 HCAs``); each adapter is recorded as well.

Every rank on a GPU reads its own GPU's fields through NVML (``read_settings``). On the CPU
(local-cpu) the same code reads the node fields and there are no GPU fields. A field that cannot be read is
not measured, with the reason.

Test-only fault knob: ``ACCEPTANCE_TEST_DRIFT="WHO:FIELD=VALUE"`` (several joined by ``;``) makes a node or
a GPU report VALUE for FIELD instead of what it read, so that the tests prove a differing node is caught and
named on the CPU. WHO is the node rank (``GROUP_RANK``) for a node field, the global rank of the GPU's rank
for a GPU field: ``1:torch=2.12.0`` changes node 1's torch, ``3:vbios=96.00.74.00.01`` rank 3's GPU. What it
changed is in the result's ``injected``.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from typing_extensions import TypedDict

from acceptance.families.answers import NotMeasured, not_measured, unanswered
from acceptance.families.drift import (
    DRIFT_FIELDS,
    DRIFT_GPU_FIELDS,
    DRIFT_NODE_FIELDS,
    DriftResult,
    GpuRecord,
    GpuSettings,
    Hca,
    NodeRecord,
    Reading,
    SettingsAnswers,
    gpu_fields,
    nic_fields,
)
from acceptance.probes import nvml
from acceptance.probes.rank import Ctx, main

FAULT_ENV = "ACCEPTANCE_TEST_DRIFT"
IB_CLASS = Path("/sys/class/infiniband")  # the kernel's InfiniBand class: one folder per HCA (RoCE included)


@dataclass(frozen=True)
class Fault:
    who: int  # node rank for a node field, global rank for a GPU field
    field: str
    value: str


def read_settings(uuid: str | None, lib: Any = None) -> SettingsAnswers | NotMeasured:
    """The driver, and the settings of the GPU ``uuid`` (None: no GPU) that every GPU of a cluster should
    share (the drift family's). The GPU is found by its UUID: NVML's indices ignore CUDA_VISIBLE_DEVICES."""

    def read(lib: Any) -> SettingsAnswers:
        ask = nvml.Asker(lib)
        driver = ask("driver version", lib.nvmlSystemGetDriverVersion, then=nvml.text)
        if uuid is None:
            return {"driver_version": driver, "gpu": None}
        handle = ask("device handle", lib.nvmlDeviceGetHandleByUUID, uuid)
        gpu = _settings(ask, lib, handle) if nvml.is_measured(handle) else handle
        return {"driver_version": driver, "gpu": gpu}

    return nvml.session(lib, read)


def _settings(ask: nvml.Asker, lib: Any, handle: Any) -> GpuSettings:
    ident, pcie = nvml.identity(ask, lib, handle), nvml.pcie_link(ask, lib, handle)
    clock = lib.nvmlDeviceGetApplicationsClock
    return {
        "name": ident["name"],
        "vbios": ident["vbios"],
        "ecc_mode": ask("ECC mode", lib.nvmlDeviceGetEccMode, handle, then=lambda m: bool(m[0])),
        "persistence_mode": ident["persistence_mode"],
        "mig_mode": ident["mig_mode"],
        # the limit set on the GPU (nvidia-smi -pl), in milliwatts (nvml.h, nvmlDeviceGetPowerManagementLimit)
        "power_limit_mw": ask("power limit", lib.nvmlDeviceGetPowerManagementLimit, handle, then=int),
        "app_clock_sm_mhz": ask("SM application clock", clock, handle, lib.NVML_CLOCK_SM, then=int),
        "app_clock_mem_mhz": ask("memory application clock", clock, handle, lib.NVML_CLOCK_MEM, then=int),
        "pcie_max_gen": pcie["max_gen"],
        "pcie_max_width": pcie["max_width"],
    }


def parse_faults(knob: str) -> list[Fault]:
    """``FAULT_ENV``'s value as faults; a malformed one is an error, never silently a run without it."""
    faults = []
    for item in (part.strip() for part in knob.split(";")):
        if not item:
            continue
        who, colon, rest = item.partition(":")
        name, equals, value = rest.partition("=")
        if not (colon and equals and who.isdigit() and name in DRIFT_FIELDS):
            raise ValueError(
                f"{FAULT_ENV}: expected WHO:FIELD=VALUE, FIELD one of {', '.join(DRIFT_FIELDS)}; got {item!r}"
            )
        faults.append(Fault(int(who), name, value))
    return faults


def _inject(fields: dict[str, Reading], faults: Sequence[Fault], who: int, names: Sequence[str]) -> list[str]:
    done = []
    for fault in faults:
        if fault.who == who and fault.field in names:
            fields[fault.field] = fault.value
            done.append(f"{fault.who}:{fault.field}={fault.value}")
    return done


def _text(path: Path) -> Reading:
    try:
        return path.read_text().strip()
    except OSError as exc:
        return not_measured(f"{path}: {exc.strerror or exc}")


def read_hcas(root: Path = IB_CLASS) -> tuple[list[Hca], str | None]:
    """Every adapter's firmware and port rates, and why there is none (None where there are some)."""
    if not root.is_dir():
        return [], f"no {root}: no InfiniBand or RoCE adapter on this node"
    hcas: list[Hca] = []
    for dev in sorted(root.iterdir()):
        ports = sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []
        hcas.append(
            {"hca": dev.name, "fw_ver": _text(dev / "fw_ver"), "rates": {p.name: _text(p / "rate") for p in ports}}
        )
    return hcas, None if hcas else f"{root} lists no adapter"


def _os() -> Reading:
    try:
        return platform.freedesktop_os_release()["PRETTY_NAME"]  # /etc/os-release, else /usr/lib/os-release
    except OSError as exc:
        return not_measured(f"os-release: {exc.strerror or exc}")
    except KeyError:
        return not_measured("os-release: no PRETTY_NAME")


def _nccl() -> Reading:
    if torch.version.cuda is None:
        return not_measured("this torch is built without CUDA")
    try:
        version = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError) as exc:
        return not_measured(f"torch.cuda.nccl.version(): {exc}")
    return ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)


def _driver(settings: SettingsAnswers | NotMeasured | None) -> Reading:
    if settings is None:
        return not_measured("NVML not asked")
    return settings if unanswered(settings) else settings["driver_version"]


def read_node(settings: SettingsAnswers | NotMeasured | None) -> tuple[dict[str, Reading], list[Hca]]:
    """This node's fields (``DRIFT_NODE_FIELDS``) and its adapters."""
    hcas, none_why = read_hcas()
    fields: dict[str, Reading] = {
        "kernel": platform.release(),
        "os": _os(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda or not_measured("this torch is built without CUDA"),
        "nccl": _nccl(),
        "driver": _driver(settings),
        **nic_fields(hcas, none_why),
    }
    return fields, hcas


def _gpu_settings(settings: SettingsAnswers | NotMeasured) -> dict[str, Reading]:
    if unanswered(settings):
        return gpu_fields(settings)
    gpu = settings["gpu"]
    return gpu_fields(gpu if gpu is not None else not_measured("no GPU asked of NVML"))


class _Mine(TypedDict):
    node: NodeRecord | None
    gpu: GpuRecord | None
    injected: list[str]


def _mine(ctx: Ctx, faults: Sequence[Fault]) -> _Mine:
    uuid = f"GPU-{torch.cuda.get_device_properties(ctx.device).uuid}" if ctx.is_cuda else None
    # every rank on a GPU asks NVML of its own GPU; on the CPU only local rank 0 asks, for the driver
    settings = read_settings(uuid) if uuid is not None or ctx.local_rank == 0 else None
    mine: _Mine = {"node": None, "gpu": None, "injected": []}
    if ctx.local_rank == 0:
        fields, hcas = read_node(settings)
        mine["injected"] += _inject(fields, faults, ctx.node_rank, DRIFT_NODE_FIELDS)
        mine["node"] = {"host": ctx.host, "node_rank": ctx.node_rank, "fields": fields, "hcas": hcas}
    if uuid is not None and settings is not None:
        fields = _gpu_settings(settings)
        mine["injected"] += _inject(fields, faults, ctx.rank, DRIFT_GPU_FIELDS)
        mine["gpu"] = {
            "host": ctx.host,
            "node_rank": ctx.node_rank,
            "rank": ctx.rank,
            "local_rank": ctx.local_rank,
            "uuid": uuid,
            "fields": fields,
        }
    return mine


def run(ctx: Ctx) -> DriftResult:
    faults = parse_faults(os.environ.get(FAULT_ENV, ""))
    ctx.phase("read")
    mine = _mine(ctx, faults)
    ctx.phase("gather")
    everyone: list[_Mine] = ctx.gather(mine)
    return {
        "nodes": sorted((r["node"] for r in everyone if r["node"] is not None), key=lambda n: n["node_rank"]),
        "gpus": [r["gpu"] for r in everyone if r["gpu"] is not None],
        "no_gpus": None if ctx.is_cuda else "the ranks run on the CPU (topology.device: cpu)",
        "injected": [line for r in everyone for line in r["injected"]],
    }


if __name__ == "__main__":
    main(run)
