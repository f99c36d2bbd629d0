"""NVLink domains that span nodes (GB200/GB300 NVL72: 18 trays of 4 GPUs on one NVLink switch fabric), from
NVML's fabric info of each GPU (``nvmlDeviceGetGpuFabricInfoV``, ``nvmlGpuFabricInfo_v2_t`` in nvml.h).

NCCL takes GPUs for one multi-node NVLink domain (MNNVL, ``src/mnnvl.cc``) where every rank's fabric state is
COMPLETED, their cluster UUIDs are equal and not zero; GPUs of one clique (``cliqueId``) meet over NVLink, and
its P2P transport says so (``via P2P/MNNVL``, ``src/transport/p2p.cc``). Traffic between the trays of one clique
over NET is then a mismatch: MNNVL off (``NCCL_MNNVL_ENABLE=0``, ``NCCL_CUMEM_ENABLE=0``), or NCCL could not
export memory through IMEX (``/dev/nvidia-caps-imex-channels``), and the rack runs at its NICs' rate.

A GPU outside any such domain (every H100/H200 HGX: NVML answers NOT_SUPPORTED) is no finding: it has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from typing_extensions import TypedDict

# nvmlGpuFabricState_t (nvml.h: NVML_GPU_FABRIC_STATE_*)
STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
COMPLETED = "completed"
NOT_SUPPORTED = "not supported"
ZERO_UUID = "0" * 32
# the IMEX channel a process needs to import another tray's memory (NVIDIA's IMEX guide, "IMEX channels";
# NCCL's warning in src/mnnvl.cc names the same folder)
IMEX_CHANNELS = Path("/dev/nvidia-caps-imex-channels")

# nvml.h's healthMask fields: (name, shift, width, {value: what is wrong}); NOT_SUPPORTED (0) and the healthy
# values are absent (NVML_GPU_FABRIC_HEALTH_MASK_*)
_HEALTH_FIELDS: tuple[tuple[str, int, int, dict[int, str]], ...] = (
    ("degraded bandwidth", 0, 0x3, {1: "NVLink bandwidth degraded"}),
    ("route recovery", 2, 0x3, {1: "route recovery in progress"}),
    ("route", 4, 0x3, {1: "route unhealthy"}),
    ("access timeout", 6, 0x3, {1: "access timeout recovery in progress"}),
    ("configuration", 8, 0xF, {
        2: "incorrect system GUID", 3: "incorrect chassis serial number", 4: "no partition",
        5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location", 8: "GPU state invalid",
    }),
    ("partition", 12, 0x3, {2: "no partition assigned"}),
    ("fabric manager", 14, 0x3, {2: "fabric manager disconnected"}),
)  # fmt: skip


class FabricAnswer(TypedDict):
    """One GPU's fabric info as NVML gives it."""

    state: str  # one of STATES
    cluster_uuid: str  # 32 hex digits; all zero: no domain
    clique_id: int
    status: int  # nvmlReturn_t of the GPU's registration with the fabric (0: NVML_SUCCESS)
    health_mask: int


def answer(state: int, uuid: bytes | Sequence[int], clique: int, status: int, mask: int) -> FabricAnswer:
    """The fields of ``nvmlGpuFabricInfoV_t`` as plain data."""
    return {
        "state": STATES.get(state, f"state {state}"),
        "cluster_uuid": bytes(uuid).hex(),
        "clique_id": clique,
        "status": status,
        "health_mask": mask,
    }


def in_fabric(found: FabricAnswer) -> bool:
    """Whether the GPU belongs to a multi-node NVLink fabric at all (NVML supports the query for it)."""
    return found["state"] != NOT_SUPPORTED


def domain(found: FabricAnswer) -> str | None:
    """``<cluster UUID>/<clique>`` of a GPU NCCL would take into MNNVL; None for one it would not."""
    if found["state"] != COMPLETED or found["cluster_uuid"] == ZERO_UUID:
        return None
    return f"{found['cluster_uuid']}/{found['clique_id']}"


def problems(found: FabricAnswer) -> list[str]:
    """What is wrong with a GPU's place in its fabric: its state, its registration, its health mask."""
    if not in_fabric(found):
        return []
    wrong = [] if found["state"] == COMPLETED else [f"fabric state {found['state']}"]
    if found["status"] != 0:
        wrong.append(f"fabric registration failed (NVML return {found['status']})")
    for _name, shift, width, bad in _HEALTH_FIELDS:
        value = (found["health_mask"] >> shift) & width
        if value in bad:
            wrong.append(bad[value])
    if found["state"] == COMPLETED and found["cluster_uuid"] == ZERO_UUID:
        wrong.append("no cluster UUID")
    return wrong


def domains(nodes: Mapping[str, Sequence[FabricAnswer]]) -> dict[str, list[str]]:
    """Each NVLink domain (``domain``) -> the hosts whose GPUs are of it, in order."""
    found: dict[str, set[str]] = {}
    for host, gpus in nodes.items():
        for gpu in gpus:
            key = domain(gpu)
            if key is not None:
                found.setdefault(key, set()).add(host)
    return {key: sorted(hosts) for key, hosts in sorted(found.items())}


def label(key: str) -> str:
    """``clique 7 of fabric 1a2b3c4d``: a domain as a person reads it."""
    uuid, clique = key.split("/")
    return f"clique {clique} of fabric {uuid[:8]}"


def imex_channels(root: Path = IMEX_CHANNELS) -> list[str]:
    """The IMEX channels this node offers (``channel0``...); none where the folder is absent."""
    try:
        return sorted(p.name for p in root.iterdir() if p.name.startswith("channel"))
    except OSError:
        return []
