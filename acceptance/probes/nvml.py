"""The one place NVML is called (through pynvml, from the nvidia-ml-py package).

``read_node()`` answers with plain data only: numbers, strings, lists and dicts, so the health rules can
be judged on recorded answers. A query NVML cannot answer (an older GPU, no permission, a lost GPU)
becomes ``{"not_measured": "<query>: <NVML's reason>"}``, an answer no rule can take for a pass.

The library is a parameter so that a recorded NVML (the unit tests') goes through the same code.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, TypeVar, cast

from typing_extensions import TypedDict

from acceptance.families import nvlink_domain
from acceptance.families.answers import NOT_MEASURED as NOT_MEASURED
from acceptance.families.answers import NotMeasured, not_measured, unanswered
from acceptance.families.answers import is_measured as is_measured
from acceptance.families.gpu_users import GpuProcess, GpuUse
from acceptance.families.health import GpuAnswers, GpuIdentity, GpuMemoryHealth, NodeAnswers, PcieAnswers, RowRemap
from acceptance.families.nvlink_domain import FabricAnswer

T = TypeVar("T")

# Clock-event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*, the same values as the older
# nvmlClocksThrottleReason* names that pynvml keeps for drivers before 535).
CLOCK_EVENT_BITS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Asker:
    """Runs one NVML query; an NVML error becomes a not-measured answer naming the query."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any, then: Callable[[Any], Any] | None = None) -> Any:
        try:
            value = fn(*args)
        except self.lib.NVMLError as exc:
            return not_measured(f"{what}: {exc}")
        return then(value) if then is not None else value


def load_library() -> Any:
    """pynvml, or the reason it cannot be used."""
    try:
        import pynvml
    except ImportError as exc:
        return not_measured(f"NVML: pynvml is not installed (pip install nvidia-ml-py): {exc}")
    return pynvml


def session(lib: Any, read: Callable[[Any], T]) -> T | NotMeasured:
    """``read(lib)`` between NVML's init and shutdown (``lib``: pynvml, or None to load it)."""
    lib = load_library() if lib is None else lib
    if not is_measured(lib):
        return not_measured(lib[NOT_MEASURED])
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        return not_measured(f"NVML init: {exc}")
    try:
        return read(lib)
    finally:
        lib.nvmlShutdown()


def read_node(lib: Any = None) -> NodeAnswers | NotMeasured:
    """Driver versions and every GPU NVML sees on this node (NVML ignores CUDA_VISIBLE_DEVICES)."""
    return session(lib, _node)


def _node(lib: Any) -> NodeAnswers:
    ask = Asker(lib)
    count = ask("GPU count", lib.nvmlDeviceGetCount)
    gpus = [read_gpu(lib, i) for i in range(count)] if is_measured(count) else count
    return {
        "driver_version": ask("driver version", lib.nvmlSystemGetDriverVersion, then=text),
        "cuda_driver_version": ask("CUDA driver version", lib.nvmlSystemGetCudaDriverVersion_v2, then=_cuda),
        "gpu_count": count,
        "gpus": gpus,
    }


def read_nvlink_pairs(lib: Any = None) -> dict[str, bool] | NotMeasured:
    """For every two GPUs of this node (``"a-b"``, NVML indices, the lower first): whether NVLink joins them
    (``nvmlDeviceGetP2PStatus`` with the NVLink capability), which decides the transport NCCL should take."""
    return session(lib, _nvlink_pairs)


def _nvlink_pairs(lib: Any) -> dict[str, bool] | NotMeasured:
    ask = Asker(lib)
    count = ask("GPU count", lib.nvmlDeviceGetCount)
    if not is_measured(count):
        return cast(NotMeasured, count)
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    found: dict[str, bool] = {}
    for a in range(count):
        for b in range(a + 1, count):
            nvlink = lib.NVML_P2P_CAPS_INDEX_NVLINK
            status = ask("P2P status", lib.nvmlDeviceGetP2PStatus, handles[a], handles[b], nvlink)
            if not is_measured(status):
                return cast(NotMeasured, status)
            found[f"{a}-{b}"] = status == lib.NVML_P2P_STATUS_OK
    return found


def _cuda(version: int) -> str:
    """NVML encodes CUDA 12.4 as 12040."""
    return f"{version // 1000}.{version % 1000 // 10}"


def read_gpu(lib: Any, index: int) -> GpuAnswers:
    ask = Asker(lib)
    handle = ask("device handle", lib.nvmlDeviceGetHandleByIndex, index)
    if not is_measured(handle):
        return {"index": index, "not_measured": handle[NOT_MEASURED]}
    # the link first: it is read while the probe keeps the GPU's PCIe link busy
    pcie = pcie_link(ask, lib, handle)
    ident, memory = identity(ask, lib, handle), _memory_health(ask, lib, handle)
    return {
        "index": index,
        "pcie": pcie,
        "uuid": ident["uuid"],
        "serial": ident["serial"],
        "pci_bus_id": ident["pci_bus_id"],
        "name": ident["name"],
        "memory_total_bytes": ident["memory_total_bytes"],
        "vbios": ident["vbios"],
        "persistence_mode": ident["persistence_mode"],
        "mig_mode": ident["mig_mode"],
        "ecc_mode": memory["ecc_mode"],
        "ecc_uncorrectable_volatile": memory["ecc_uncorrectable_volatile"],
        "ecc_uncorrectable_aggregate": memory["ecc_uncorrectable_aggregate"],
        "retired_pages_pending": memory["retired_pages_pending"],
        "row_remap": memory["row_remap"],
        "nvlink_active": _nvlink_active(lib, handle),
        "fabric": fabric_info(ask, lib, handle),
        "clock_event_reasons": _clock_events(ask, lib, handle),
        "temperature_c": ask("temperature", lib.nvmlDeviceGetTemperature, handle, lib.NVML_TEMPERATURE_GPU),
        "slowdown_temperature_c": ask(
            "slowdown temperature",
            lib.nvmlDeviceGetTemperatureThreshold,
            handle,
            lib.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        ),
    }


def fabric_info(ask: Asker, lib: Any, handle: Any) -> FabricAnswer | NotMeasured:
    """The GPU's place in a multi-node NVLink fabric (``nvmlDeviceGetGpuFabricInfoV``); NOT_SUPPORTED, as every
    GPU outside such a fabric answers (H100/H200 HGX), is the state "not supported", not a failed query."""
    if not hasattr(lib, "nvmlDeviceGetGpuFabricInfoV"):
        return not_measured("fabric info: this nvidia-ml-py has no nvmlDeviceGetGpuFabricInfoV: upgrade it")
    info = lib.c_nvmlGpuFabricInfoV_t()
    # a versioned struct, passed by pointer (nvidia-ml-py hands its argument to the C call as it is: the struct
    # itself given there crashes the process); its version is NVML_STRUCT_VERSION(GpuFabricInfo, 2) of nvml.h,
    # the struct's size and 2 << 24
    info.version = getattr(lib, "nvmlGpuFabricInfo_v2", ctypes.sizeof(info) | 2 << 24)
    try:
        lib.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    except (lib.NVMLError_NotSupported, lib.NVMLError_FunctionNotFound):  # a driver before the query: no fabric
        return nvlink_domain.answer(lib.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, bytes(16), 0, 0, 0)
    except lib.NVMLError as exc:
        return not_measured(f"fabric info: {exc}")
    return nvlink_domain.answer(info.state, bytes(info.clusterUuid), info.cliqueId, info.status, info.healthMask)


def read_fabric(lib: Any = None) -> list[GpuFabric] | NotMeasured:
    """Every GPU's PCI bus id and fabric info, by NVML index: where NCCL's ``nvmlDev`` sits on the PCIe tree,
    and which NVLink domain it is of."""
    return session(lib, _fabric)


class GpuFabric(TypedDict):
    index: int
    pci_bus_id: str | NotMeasured
    fabric: FabricAnswer | NotMeasured


def _fabric(lib: Any) -> list[GpuFabric] | NotMeasured:
    ask = Asker(lib)
    count = ask("GPU count", lib.nvmlDeviceGetCount)
    if not is_measured(count):
        return cast(NotMeasured, count)
    found: list[GpuFabric] = []
    for index in range(count):
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        bus = ask("PCI info", lib.nvmlDeviceGetPciInfo, handle, then=lambda p: text(p.busId))
        found.append({"index": index, "pci_bus_id": bus, "fabric": fabric_info(ask, lib, handle)})
    return found


def identity(ask: Asker, lib: Any, handle: Any) -> GpuIdentity:
    return {
        "uuid": ask("UUID", lib.nvmlDeviceGetUUID, handle, then=text),
        "serial": ask("serial", lib.nvmlDeviceGetSerial, handle, then=text),
        "pci_bus_id": ask("PCI info", lib.nvmlDeviceGetPciInfo, handle, then=lambda p: text(p.busId)),
        "name": ask("name", lib.nvmlDeviceGetName, handle, then=text),
        "memory_total_bytes": ask("memory info", lib.nvmlDeviceGetMemoryInfo, handle, then=lambda m: int(m.total)),
        "vbios": ask("VBIOS version", lib.nvmlDeviceGetVbiosVersion, handle, then=text),
        "persistence_mode": ask("persistence mode", lib.nvmlDeviceGetPersistenceMode, handle, then=bool),
        "mig_mode": ask("MIG mode", lib.nvmlDeviceGetMigMode, handle, then=lambda m: bool(m[0])),
    }


def _memory_health(ask: Asker, lib: Any, handle: Any) -> GpuMemoryHealth:
    errors, volatile, aggregate = lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, lib.NVML_VOLATILE_ECC, lib.NVML_AGGREGATE_ECC
    return {
        "ecc_mode": ask("ECC mode", lib.nvmlDeviceGetEccMode, handle, then=lambda m: bool(m[0])),
        "ecc_uncorrectable_volatile": ask(
            "volatile uncorrectable ECC errors", lib.nvmlDeviceGetTotalEccErrors, handle, errors, volatile, then=int
        ),
        "ecc_uncorrectable_aggregate": ask(
            "aggregate uncorrectable ECC errors", lib.nvmlDeviceGetTotalEccErrors, handle, errors, aggregate, then=int
        ),
        "retired_pages_pending": ask(
            "retired pages pending", lib.nvmlDeviceGetRetiredPagesPendingStatus, handle, then=bool
        ),
        "row_remap": ask("remapped rows", lib.nvmlDeviceGetRemappedRows, handle, then=_remap),
    }


def _remap(rows: tuple[int, int, int, int]) -> RowRemap:
    correctable, uncorrectable, pending, failure = rows
    return {
        "correctable": int(correctable),
        "uncorrectable": int(uncorrectable),
        "pending": bool(pending),
        "failure": bool(failure),
    }


def pcie_link(ask: Asker, lib: Any, handle: Any) -> PcieAnswers:
    return {
        "gen": ask("PCIe generation", lib.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "width": ask("PCIe width", lib.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "max_gen": ask("PCIe max generation", lib.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "max_width": ask("PCIe max width", lib.nvmlDeviceGetMaxPcieLinkWidth, handle),
    }


def _nvlink_states(lib: Any, handle: Any) -> list[bool] | NotMeasured:
    """Each NVLink's state (up or not); NVML answers links past the GPU's last one with an error, so the list
    stops there (at the first link: no NVLink to ask about, not measured)."""
    states: list[bool] = []
    for link in range(lib.NVML_NVLINK_MAX_LINKS):
        try:
            state = lib.nvmlDeviceGetNvLinkState(handle, link)
        except lib.NVMLError as exc:
            if link == 0:
                return not_measured(f"NVLink state: {exc}")
            break
        states.append(state == lib.NVML_FEATURE_ENABLED)
    return states


def _nvlink_active(lib: Any, handle: Any) -> int | NotMeasured:
    """Active links (health's gate)."""
    states = _nvlink_states(lib, handle)
    return states if unanswered(states) else sum(states)


CLOCK_EVENT_QUERIES = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def clock_event_names(bits: int) -> list[str]:
    """The reasons of CLOCK_EVENT_BITS set in an NVML clock-event bit mask, by name."""
    return sorted(name for name, bit in CLOCK_EVENT_BITS.items() if int(bits) & bit)


def _clock_events(ask: Asker, lib: Any, handle: Any) -> list[str] | NotMeasured:
    # drivers before 535 know the query only by its older name
    bits: Any = not_measured("clock event reasons: this pynvml has neither query")
    for name in CLOCK_EVENT_QUERIES:
        query = getattr(lib, name, None)
        if query is not None:
            bits = ask("clock event reasons", query, handle)
            if is_measured(bits):
                break
    if not is_measured(bits):
        return bits
    return clock_event_names(int(bits))


def read_gpu_users(lib: Any = None) -> list[GpuUse] | NotMeasured:
    """Every GPU's running compute processes and memory in use (``acceptance.families.gpu_users``); the
    commands are left for the caller, who sees /proc (``GpuProcess.command`` None here)."""
    return session(lib, _gpu_users)


def _gpu_users(lib: Any) -> list[GpuUse] | NotMeasured:
    ask = Asker(lib)
    count = ask("GPU count", lib.nvmlDeviceGetCount)
    return [_gpu_use(ask, lib, index) for index in range(count)] if is_measured(count) else count  # type: ignore[no-any-return]


def _gpu_use(ask: Asker, lib: Any, index: int) -> GpuUse:
    handle = ask("device handle", lib.nvmlDeviceGetHandleByIndex, index)
    if not is_measured(handle):
        return {"index": index, "uuid": None, "pci_bus_id": None, "memory_used_bytes": None, "processes": []}
    found = ask("running compute processes", lib.nvmlDeviceGetComputeRunningProcesses, handle)
    processes: list[GpuProcess] = [
        {"pid": int(p.pid), "used_memory_bytes": _bytes(getattr(p, "usedGpuMemory", None)), "command": None}
        for p in (found if isinstance(found, list) else [])
    ]
    # nvmlMemory_v2_t keeps the driver's reservation out of ``used`` (nvml.h); without it ``used`` holds the
    # reservation too, and an idle GPU would read as used: not judged then
    memory = (
        ask("memory info", lib.nvmlDeviceGetMemoryInfo, handle, lib.nvmlMemory_v2, then=lambda m: int(m.used))
        if hasattr(lib, "nvmlMemory_v2")
        else None
    )
    uuid = ask("UUID", lib.nvmlDeviceGetUUID, handle, then=text)
    bus = ask("PCI info", lib.nvmlDeviceGetPciInfo, handle, then=lambda p: text(p.busId))
    return {
        "index": index,
        "uuid": uuid if isinstance(uuid, str) else None,
        "pci_bus_id": bus if isinstance(bus, str) else None,
        "memory_used_bytes": memory if isinstance(memory, int) else None,
        "processes": processes,
    }


def _bytes(value: Any) -> int | None:
    # pynvml turns NVML_VALUE_NOT_AVAILABLE into None (no permission, or a MIG-enabled GPU)
    return int(value) if isinstance(value, int) else None


class NvLinkAnswer(TypedDict):
    """One NVLink of a GPU as NVML answers it (``read_nvlinks``)."""

    link: int
    up: bool  # nvmlDeviceGetNvLinkState: NVML_FEATURE_ENABLED
    # nvmlDeviceGetNvLinkVersion: an nvmlNvlinkVersion_t (nvml.h), not the NVLink number: 6 is NVLink 4.0
    version: int | NotMeasured
    # nvmlDeviceGetNvLinkRemoteDeviceType: "gpu", "switch" (an NVSwitch), "npu" or "unknown"
    remote_type: str | NotMeasured
    remote_bus_id: str | NotMeasured  # nvmlDeviceGetNvLinkRemotePciInfo: the PCI bus id at the other end


class GpuLinksAnswer(TypedDict):
    index: int
    bus_id: str | NotMeasured
    links: list[NvLinkAnswer] | NotMeasured  # not measured: NVML knows no NVLink on this GPU (a PCIe card)


# nvmlNvLinkDeviceType_t (nvml.h): what a link reaches
REMOTE_TYPES = {0x00: "gpu", 0x01: "npu", 0x02: "switch"}


def read_nvlinks(lib: Any = None) -> list[GpuLinksAnswer] | NotMeasured:
    """Every GPU's NVLinks: per link its state, version and what is at the other end (``init``'s floors)."""
    return session(lib, _all_links)


def _all_links(lib: Any) -> list[GpuLinksAnswer] | NotMeasured:
    ask = Asker(lib)
    count = ask("GPU count", lib.nvmlDeviceGetCount)
    if not is_measured(count):
        return count  # type: ignore[no-any-return]
    out: list[GpuLinksAnswer] = []
    for index in range(count):
        handle = ask("device handle", lib.nvmlDeviceGetHandleByIndex, index)
        if not is_measured(handle):
            out.append({"index": index, "bus_id": handle, "links": handle})
            continue
        bus = ask("PCI info", lib.nvmlDeviceGetPciInfo, handle, then=lambda p: text(p.busId))
        out.append({"index": index, "bus_id": bus, "links": _links(ask, lib, handle)})
    return out


def _links(ask: Asker, lib: Any, handle: Any) -> list[NvLinkAnswer] | NotMeasured:
    """Each link NVML knows, with its version and far end."""
    states = _nvlink_states(lib, handle)
    if unanswered(states):
        return states
    return [_link(ask, lib, handle, link, up) for link, up in enumerate(states)]


def _link(ask: Asker, lib: Any, handle: Any, link: int, up: bool) -> NvLinkAnswer:
    kind = ask(
        "NVLink remote device type", lib.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link,
        then=lambda t: REMOTE_TYPES.get(int(t), "unknown"),
    )  # fmt: skip
    down = not_measured("NVLink remote PCI info: the link is down")
    remote = ask(
        "NVLink remote PCI info", lib.nvmlDeviceGetNvLinkRemotePciInfo, handle, link, then=lambda p: text(p.busId)
    )
    return {
        "link": link,
        "up": up,
        "version": ask("NVLink version", lib.nvmlDeviceGetNvLinkVersion, handle, link, then=int),
        "remote_type": kind,
        "remote_bus_id": remote if up else down,
    }
