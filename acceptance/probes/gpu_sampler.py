"""What the GPU was doing while a figure was timed: utilisation and clock-event reasons, sampled with NVML.

NVML's utilisation is the share of the last sample period (1/6 s to 1 s, by product) in which a kernel ran
on the GPU (nvmlDeviceGetUtilizationRates, NVML API reference); a starved GPU shows up here even when its
throughput looks plausible. The clock-event reasons (nvmlDeviceGetCurrentClocksEventReasons) say why the
clocks are below their maximum at that moment: a power cap explains a sustained matmul figure, a thermal or
hardware slowdown is a fault. Each reason is reported as the share of samples in which it was set.

Once a second it also reads the GPU's running compute processes (nvmlDeviceGetComputeRunningProcesses): a
process that is not the run's own (not under the pytest that started it) is the cause of a slowed figure,
named with its pid, executable and memory, and when it was first seen; the preflight sees only the processes
there before the run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import torch

from acceptance.families.gpu_users import RUN_PID_ENV, ForeignSeen, Ours, PcieLow, XidSeen, descends_from, executable
from acceptance.families.training.figures import GpuUtil
from acceptance.probes.inventory import command_of
from acceptance.probes.nvml import CLOCK_EVENT_QUERIES, clock_event_names

PERIOD_S = 0.1
PROCESS_PERIOD_S = 1.0  # the process list: a foreign job runs for seconds at least


class GpuSampler:
    """Background sampling of this rank's GPU between ``start()`` and ``stop()``; off the GPU, the reason why."""

    def __init__(self, device: torch.device, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self.util: list[int] = []
        self.events: list[list[str]] = []
        self.reason: str | None = None
        self.events_reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._nvml: Any = None
        self._events_query: Any = None
        self._processes_query: Any = None
        self._ours: Ours = run_s_own()
        self._started = 0.0
        self._next_processes = 0.0
        self.process_samples = 0
        self.foreign: dict[int, ForeignSeen] = {}
        self._foreign_counts: dict[int, int] = {}
        self.pcie: list[tuple[int, int]] = []  # (generation, width) once a second while timed
        self._pcie_max: tuple[int, int] | None = None
        self.xids: list[XidSeen] = []
        self._xid_events: Any = None
        if device.type != "cuda":
            self.reason = self.events_reason = "no GPU: sampled with NVML on GPUs only"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            uuid = f"GPU-{torch.cuda.get_device_properties(device).uuid}"
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            self._nvml = pynvml
        except Exception as exc:  # no pynvml, no driver library, an old torch without .uuid: say which
            self.reason = self.events_reason = f"NVML unavailable: {type(exc).__name__}: {exc}"
            return
        # drivers before 535 know the clock-event query only by its older name
        found = (getattr(pynvml, name, None) for name in CLOCK_EVENT_QUERIES)
        self._events_query = next((q for q in found if q is not None), None)
        if self._events_query is None:
            self.events_reason = "this pynvml has no clock-event query"
        self._processes_query = getattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", None)
        try:  # what the GPU and its slot can reach (health's pcie_degraded holds the same maximum)
            self._pcie_max = (
                int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(self._handle)),
                int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(self._handle)),
            )
        except Exception:  # NVML "Not Supported" (a vGPU, an SXM board without it): no link cause
            self._pcie_max = None
        try:  # critical XIDs through NVML's event set, as the soak watches them (probes.soak_watch)
            self._xid_events = pynvml.nvmlEventSetCreate()
            pynvml.nvmlDeviceRegisterEvents(self._handle, pynvml.nvmlEventTypeXidCriticalError, self._xid_events)
        except Exception:  # not supported here (a vGPU, no privilege): the figures stand without the cause
            self._xid_events = None

    def start(self) -> None:
        if self._handle is None:
            return
        self._stop.clear()
        self._started = self._next_processes = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s) and self.reason is None:
            self._sample()

    def _sample(self) -> None:
        try:
            self.util.append(int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
        except Exception as exc:  # a GPU that fell off the bus mid-run: keep the reason, stop sampling
            self.reason = f"NVML sampling failed: {type(exc).__name__}: {exc}"
            return
        self._sample_processes()
        if self._events_query is None:
            return
        try:
            self.events.append(clock_event_names(int(self._events_query(self._handle))))
        except Exception as exc:  # NVML "Not Supported" on this GPU: utilisation is still worth having
            self.events_reason = f"clock-event reasons: {type(exc).__name__}: {exc}"
            self._events_query = None

    def _sample_processes(self) -> None:
        now = time.monotonic()
        if self._processes_query is None or now < self._next_processes:
            return
        self._next_processes = now + PROCESS_PERIOD_S
        self._sample_link(now)
        try:
            running = self._processes_query(self._handle)
        except Exception:  # NVML "Not Supported" (a vGPU, MIG): the figures stand without a cause
            self._processes_query = None
            return
        self.process_samples += 1
        for proc in running:
            pid = int(proc.pid)
            command = command_of(pid)
            # a pid /proc does not show is another pid namespace's: on older drivers inside a container NVML
            # answers with the host's pids, the run's own ranks among them, so it is never named as a cause
            # (nor is a process with no command line yet: forked, not yet exec'd)
            if command is None or self._ours(pid):
                continue
            self._foreign_counts[pid] = self._foreign_counts.get(pid, 0) + 1
            memory = getattr(proc, "usedGpuMemory", None)
            self.foreign.setdefault(
                pid,
                {
                    "pid": pid,
                    "command": executable(command),
                    "used_memory_bytes": int(memory) if isinstance(memory, int) else None,
                    "first_seen_s": round(now - self._started, 1),
                    "seen_share": 0.0,
                },
            )

    def _sample_link(self, now: float) -> None:
        """The PCIe link's generation and width now, and every critical XID since the last sample."""
        nvml = self._nvml
        if self._pcie_max is not None:
            try:
                gen = int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(self._handle))
                self.pcie.append((gen, int(nvml.nvmlDeviceGetCurrPcieLinkWidth(self._handle))))
            except Exception:
                self._pcie_max = None
        while self._xid_events is not None:
            try:
                data = nvml.nvmlEventSetWait_v2(self._xid_events, 0)
            except nvml.NVMLError_Timeout:  # none waiting
                return
            except Exception:
                self._xid_events = None
                return
            self.xids.append({"xid": int(data.eventData), "t_s": round(now - self._started, 1)})

    def pcie_low(self) -> PcieLow | None:
        """The link below its maximum in some sample while timed, its lowest reading; else None."""
        if self._pcie_max is None or not self.pcie:
            return None
        max_gen, max_width = self._pcie_max
        low = [s for s in self.pcie if s[0] < max_gen or s[1] < max_width]
        if not low:
            return None
        share = len(low) / len(self.pcie)
        gen, width = min(s[0] for s in low), min(s[1] for s in low)
        return {"gen": gen, "width": width, "max_gen": max_gen, "max_width": max_width, "share": share}

    def seen(self) -> list[ForeignSeen]:
        """The processes not of this run seen on the GPU, with the share of process samples each was in."""
        total = max(self.process_samples, 1)
        return [{**p, "seen_share": self._foreign_counts[pid] / total} for pid, p in sorted(self.foreign.items())]

    def stop(self) -> GpuUtil:
        """``mean_pct`` (None with ``reason``), and ``clock_events``: reason -> share of samples it was set in."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            # a loop shorter than a period still gets its link read, and every XID up to its end
            self._sample_link(time.monotonic())
        if self._xid_events is not None:
            with contextlib.suppress(Exception):  # freed with the process all the same
                self._nvml.nvmlEventSetFree(self._xid_events)
            self._xid_events = None
        out: GpuUtil = {
            "samples": len(self.util),
            "clock_events": None,
            "clock_events_reason": None,
            "mean_pct": None,
            "reason": self.reason or "no sample taken (run too short)",
        }
        if self.events:
            names = sorted({n for sample in self.events for n in sample})
            out["clock_events"] = {n: sum(n in s for s in self.events) / len(self.events) for n in names}
        else:
            out["clock_events_reason"] = self.events_reason or "no sample taken (timed loop too short)"
        if self.foreign:
            out["foreign"] = self.seen()
        if (pcie := self.pcie_low()) is not None:
            out["pcie_low"] = pcie
        if self.xids:
            out["xids"] = list(self.xids)
        if self.util:
            out["mean_pct"], out["reason"] = sum(self.util) / len(self.util), None
        return out


def run_s_own() -> Ours:
    """Whether a pid is the run's: under the pytest that started it (``RUN_PID_ENV``), or, where this rank is
    not (a node of its own under srun, whose agent the remote slurmd started), under this rank's agent."""
    given = os.environ.get(RUN_PID_ENV, "")
    root = int(given) if given.isdigit() else os.getppid()
    ours = descends_from(root)
    return ours if ours(os.getpid()) else descends_from(os.getppid())
