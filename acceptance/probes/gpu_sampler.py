"""What the GPU was doing while a figure was timed: utilisation and clock-event reasons, sampled with NVML.

NVML's utilisation is the share of the last sample period (1/6 s to 1 s, by product) in which a kernel ran
on the GPU (nvmlDeviceGetUtilizationRates, NVML API reference); a starved GPU shows up here even when its
throughput looks plausible. The clock-event reasons (nvmlDeviceGetCurrentClocksEventReasons) say why the
clocks are below their maximum at that moment: a power cap explains a sustained matmul figure, a thermal or
hardware slowdown is a fault. Each reason is reported as the share of samples in which it was set.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from acceptance.families.training.figures import GpuUtil
from acceptance.probes.nvml import CLOCK_EVENT_QUERIES, clock_event_names

PERIOD_S = 0.1


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

    def start(self) -> None:
        if self._handle is None:
            return
        self._stop.clear()
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
        if self._events_query is None:
            return
        try:
            self.events.append(clock_event_names(int(self._events_query(self._handle))))
        except Exception as exc:  # NVML "Not Supported" on this GPU: utilisation is still worth having
            self.events_reason = f"clock-event reasons: {type(exc).__name__}: {exc}"
            self._events_query = None

    def stop(self) -> GpuUtil:
        """``mean_pct`` (None with ``reason``), and ``clock_events``: reason -> share of samples it was set in."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
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
        if self.util:
            out["mean_pct"], out["reason"] = sum(self.util) / len(self.util), None
        return out
