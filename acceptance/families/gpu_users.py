"""Who else uses this node's GPUs before the run: NVML's running compute processes and the memory in use.

A GPU another job computes on halves every figure measured on it, and the figures alone name the effect, not
the cause (a matmul loop beside the suite read only as "37% under the median, clock events sw_power_cap").
The preflight names the cause instead: the pid and executable of each process on a GPU that is not the
run's own (its whole command line, masked, only in the evidence's ``cluster.preflight.foreign``), or the
memory in use on a GPU whose processes NVML cannot show (another container's, another pid namespace's).
``acceptance.probes.nvml.read_gpu_users`` reads the answers; ``foreign_use`` judges them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from typing_extensions import TypedDict

# The most memory an idle GPU shows in use, as NVML's ``nvmlMemory_v2_t.used`` counts it (the driver's own
# reservation is in ``reserved``, apart: nvml.h, "nvmlMemory_v2_t"); a CUDA context of another process alone
# takes far more (CUDA C Programming Guide, "Initialization": the context holds the module's code and data).
IDLE_USED_MAX_BYTES = 64 * 2**20


class GpuProcess(TypedDict):
    pid: int
    used_memory_bytes: int | None  # None: NVML does not say (nvmlProcessInfo_t.usedGpuMemory unavailable)
    command: str | None  # its command line from /proc; None: not visible from here (another pid namespace)


class ForeignSeen(TypedDict):
    """A process not of this run seen on a rank's GPU while a figure was timed (``probes.gpu_sampler``)."""

    pid: int
    command: str  # the executable's base name (``executable``): never the arguments
    used_memory_bytes: int | None
    first_seen_s: float  # after the timed loop started
    seen_share: float  # of the process-list samples taken while timed


class PcieLow(TypedDict):
    """A GPU's PCIe link below its maximum while a host-link figure was timed (the link trains down under
    power saving only when idle; under a copy it is at its maximum unless the slot, riser or GPU is degraded)."""

    gen: int  # the lowest seen while timed
    width: int
    max_gen: int
    max_width: int
    share: float  # of the link samples taken while timed


class XidSeen(TypedDict):
    """A critical XID event (NVML's nvmlEventTypeXidCriticalError) on the GPU while a figure was timed."""

    xid: int
    t_s: float  # after the timed loop started


class GpuUse(TypedDict):
    index: int
    uuid: str | None
    pci_bus_id: str | None
    memory_used_bytes: int | None
    processes: list[GpuProcess]


def _gib(value: int | None) -> str:
    return "memory not reported" if value is None else f"{value / 2**30:.2f} GiB"


def _where(gpu: GpuUse) -> str:
    parts = ", ".join(p for p in (gpu["pci_bus_id"], gpu["uuid"]) if p)
    return f"GPU {gpu['index']} ({parts})" if parts else f"GPU {gpu['index']}"


def executable(command: str | None) -> str:
    """The base name of a command line's executable (``/opt/conda/bin/python train.py --token x`` -> python):
    what a one-line message may show, where every user reads it (``sinfo -R``, a node's annotation); the
    whole command line, masked, stays in the evidence."""
    first = (command or "").split(" ", 1)[0]
    return first.rsplit("/", 1)[-1] or "command not visible from here"


FOREIGN_LOAD = "another process on this GPU while timed"  # how a slowed figure names its cause


def seen_text(seen: Sequence[ForeignSeen]) -> str:
    """``another process on this GPU while timed: pid 4242 `python` (3.20 GiB) from 1.2 s, in 80% of the
    samples`` (the cause a slowed figure names), or "" when none was seen."""
    if not seen:
        return ""
    named = "; ".join(
        f"pid {p['pid']} `{p['command']}` ({_gib(p['used_memory_bytes'])}) from {p['first_seen_s']:.1f} s, "
        f"in {p['seen_share']:.0%} of the samples"
        for p in seen
    )
    return f"{FOREIGN_LOAD}: {named}"


# how a slowed figure names a fault of the GPU itself seen while it was timed: hardware, never foreign load
GPU_FAULT = "seen on this GPU while timed"


def gpu_fault_text(pcie: PcieLow | None, xids: Sequence[XidSeen]) -> str:
    """``seen on this GPU while timed: PCIe link at Gen4 x16, below its maximum Gen5 x16 (in 100% of the
    samples); XID 79 at 3.2 s`` (NVIDIA's XID catalog says what each code means), or "" when neither."""
    parts = []
    if pcie is not None:
        parts.append(
            f"PCIe link at Gen{pcie['gen']} x{pcie['width']}, below its maximum Gen{pcie['max_gen']} "
            f"x{pcie['max_width']} (in {pcie['share']:.0%} of the samples)"
        )
    parts += [f"XID {x['xid']} at {x['t_s']:.1f} s" for x in xids]
    return f"{GPU_FAULT}: {'; '.join(parts)}" if parts else ""


def foreign(gpus: Sequence[GpuUse], ours: Callable[[int], bool]) -> list[GpuProcess]:
    """Every process on a GPU that is not the run's own, with its command line (masked when read)."""
    return [p for gpu in gpus for p in gpu["processes"] if not ours(p["pid"])]


def foreign_use(gpus: Sequence[GpuUse], ours: Callable[[int], bool]) -> list[str]:
    """One line per GPU another process uses: each foreign pid with its executable's base name and memory
    (never its arguments: the line becomes a node's drain reason, which every user of the cluster reads);
    or, where NVML lists no process at all, the memory in use beyond an idle GPU's. ``ours(pid)`` says
    whether a pid is the run's own (a rank of the probe worker started beside the preflight)."""
    found: list[str] = []
    for gpu in gpus:
        others = foreign([gpu], ours)
        if others:
            named = "; ".join(
                f"pid {p['pid']} `{executable(p['command'])}` ({_gib(p['used_memory_bytes'])})" for p in others
            )
            found.append(f"{_where(gpu)} is in use by another process: {named}")
            continue
        used = gpu["memory_used_bytes"]
        if not gpu["processes"] and used is not None and used > IDLE_USED_MAX_BYTES:
            found.append(
                f"{_where(gpu)} has {_gib(used)} in use before the run and no process NVML can show "
                "(another container or pid namespace)"
            )
    return found


Ours = Callable[[int], bool]
PROC = Path("/proc")


def parent_of(pid: int, proc: Path = PROC) -> int | None:
    """The parent pid from /proc/PID/stat (proc(5): the 4th field, after the command in parentheses)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        return int(stat.rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


RUN_PID_ENV = "ACCEPTANCE_RUN_PID"  # the pytest that started the run (acceptance.run.launcher.child_env)


def descends_from(root: int, proc: Path = PROC) -> Ours:
    """Whether a pid is ``root`` or a process under it; a pid /proc does not show is not (another pid
    namespace's: NVML answers with the host's pids)."""

    def ours(pid: int) -> bool:
        seen: set[int] = set()
        current: int | None = pid
        while current is not None and current > 1 and current not in seen:
            if current == root:
                return True
            seen.add(current)
            current = parent_of(current, proc)
        return False

    return ours


def foreign_text(foreign: dict[str, list[ForeignSeen]] | None, xids: dict[str, list[XidSeen]] | None = None) -> str:
    """Per rank, the critical XIDs and the processes not of this run seen on its GPU while a figure was
    measured (the causes a slowed figure names, ``acceptance.probes.gpu_sampler``), one line each; "" when
    none was seen."""
    lines = [f"rank {rank}: {gpu_fault_text(None, seen)}" for rank, seen in (xids or {}).items() if seen]
    lines += [f"rank {rank}: {seen_text(seen)}" for rank, seen in (foreign or {}).items() if seen]
    return "\n".join(lines)
