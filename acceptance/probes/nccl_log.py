"""NCCL's own report of the transports it chose, per rank, and the record a network probe keeps of it.

``enable`` runs in each rank before its process group exists (``rank.connect``): NCCL reads its debug
settings once, at its first message. It asks for ``NCCL_DEBUG=INFO`` with ``NCCL_DEBUG_SUBSYS=INIT,P2P,NET``
into one file per rank (``NCCL_DEBUG_FILE=<dir>/nccl-%h.%p.log``: NCCL puts the host and the pid in), so
the lines never reach the probe's log; NCCL's warnings go to that file too. A user's own
``NCCL_DEBUG_FILE`` is left alone, and then nothing is recorded (the reason says so).

``record`` (every rank of a probe calls it) reads this rank's file, gathers every rank's lines and each
node's NVML answer, and returns the rules' record (``acceptance.families.transport``) on every rank.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from typing_extensions import TypedDict

from acceptance.families import net_path, nvlink_domain, transport
from acceptance.families.answers import unanswered
from acceptance.probes import nvml, pcie_places

FILE = "nccl-%h.%p.log"
SET_HERE_ENV = "ACCEPTANCE_NCCL_DEBUG_SET"  # the names enable() set, so that no record shows them as the user's


def enable(folder: Path) -> Path | None:
    """NCCL's debug report into ``folder`` for this process, unless the user chose its file; returns the
    folder, or None where the user's ``NCCL_DEBUG_FILE`` stands."""
    if os.environ.get("NCCL_DEBUG_FILE"):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    chosen = {**transport.DEBUG_SETTINGS, "NCCL_DEBUG_FILE": str(folder / FILE)}
    if os.environ.get("NCCL_DEBUG", "").upper() == "TRACE":  # more than INFO already
        del chosen["NCCL_DEBUG"]
    os.environ.update(chosen)
    os.environ[SET_HERE_ENV] = ",".join(chosen)
    return folder


def set_here() -> set[str]:
    """The NCCL variables ``enable`` set in this process (not the user's)."""
    return {*os.environ.get(SET_HERE_ENV, "").split(","), SET_HERE_ENV} - {""}


def own_log(folder: Path) -> str:
    """This process's NCCL log (NCCL names it by the host as it shortens it, and by the pid)."""
    found = sorted(folder.glob(f"nccl-*.{os.getpid()}.log"))
    return found[0].read_text(errors="replace") if found else ""


class RankContext(Protocol):
    """What ``record`` needs of a probe's rank (``acceptance.probes.rank.Ctx`` has it): a protocol, since
    ``rank.connect`` calls ``enable`` and so imports this module."""

    rank: int
    local_rank: int
    node_rank: int
    host: str
    backend: str
    nccl_log: Path | None

    def phase(self, name: str) -> None: ...

    def gather(self, obj: Any) -> list[Any]: ...


class _Gathered(TypedDict):
    log: transport.RankLog
    nvlink: dict[str, bool] | str | None  # local rank 0's NVML answer, or why there is none
    network: net_path.NodeNetwork | None  # local rank 0's reading of its NICs and GPUs
    domains: dict[int, str] | None  # local rank 0's: NVML index -> NVLink domain, for the GPUs of one


def record(ctx: RankContext) -> transport.TransportRecord:
    """Every rank's connections so far and each node's NVLink pairs, on every rank (a collective call)."""
    if ctx.backend != "nccl":
        return transport.not_recorded(f"backend {ctx.backend}: no NCCL, no transport to read", os.environ)
    if ctx.nccl_log is None:
        return transport.not_recorded(
            f"NCCL_DEBUG_FILE={os.environ.get('NCCL_DEBUG_FILE')} set by the environment: its log is the user's",
            os.environ,
        )
    ctx.phase("transport")
    text = own_log(ctx.nccl_log)
    dev, connections = transport.parse(text)
    log: transport.RankLog = {
        "rank": ctx.rank, "host": ctx.host, "local_rank": ctx.local_rank, "dev": dev, "connections": connections,
        "node": ctx.node_rank, "settings": transport.settings(os.environ), "nics": net_path.nic_names(text),
        "net_settings": net_path.net_settings(os.environ),
    }  # fmt: skip
    first = ctx.local_rank == 0
    network, domains = _places() if first else (None, None)
    mine: _Gathered = {"log": log, "nvlink": _nvlink() if first else None, "network": network, "domains": domains}
    every: list[_Gathered] = ctx.gather(mine)
    answers = {g["log"]["host"]: g["nvlink"] for g in every if g["nvlink"] is not None}
    logs = [g["log"] for g in every]
    fabric = {g["log"]["host"]: g["domains"] for g in every if g["domains"]}
    found = transport.record(logs, answers, os.environ, fabric)
    networks = {g["log"]["host"]: g["network"] for g in every if g["network"]}
    found["network"], found["network_paths"] = net_path.judge(logs, networks), net_path.paths(logs, networks)
    return found


def _places() -> tuple[net_path.NodeNetwork, dict[int, str]]:
    """This node's NICs and GPUs on its PCIe tree (GPUs by NVML's bus ids) and its GPUs' NVLink domains."""
    gpus = nvml.read_fabric()
    if unanswered(gpus):
        return pcie_places.read(), {}
    buses = [g["pci_bus_id"] for g in gpus]
    known = [b for b in buses if isinstance(b, str)]
    network = pcie_places.read(gpu_bus_ids=known if len(known) == len(buses) else None)
    domains: dict[int, str] = {}
    for gpu in gpus:
        fabric = gpu["fabric"]
        key = None if unanswered(fabric) else nvlink_domain.domain(fabric)
        if key is not None:
            domains[gpu["index"]] = key
    return network, domains


def _nvlink() -> dict[str, bool] | str:
    answer = nvml.read_nvlink_pairs()
    return answer["not_measured"] if unanswered(answer) else answer
