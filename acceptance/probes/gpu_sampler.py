"""GPU utilisation sampled with NVML while the timed steps run.

NVML's utilisation is the share of the last sample period (1/6 s to 1 s, by product) in which a kernel ran
on the GPU (nvmlDeviceGetUtilizationRates, NVML API reference); a starved GPU shows up here even when its
throughput looks plausible.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

PERIOD_S = 0.1


class UtilSampler:
    """Background sampling of this rank's GPU; ``stop()`` returns the mean, or None with the reason."""

    def __init__(self, device: torch.device) -> None:
        self.samples: list[int] = []
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._nvml: Any = None
        if device.type != "cuda":
            self.reason = "no GPU: utilisation is sampled with NVML on GPUs only"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            uuid = f"GPU-{torch.cuda.get_device_properties(device).uuid}"
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            self._nvml = pynvml
        except Exception as exc:  # no pynvml, no driver library, an old torch without .uuid: say which
            self.reason = f"NVML unavailable: {type(exc).__name__}: {exc}"

    def start(self) -> None:
        if self._handle is None:
            return
        self._thread = threading.Thread(target=self._loop, name="nvml-util", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(PERIOD_S):
            try:
                self.samples.append(int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
            except Exception as exc:  # a GPU that fell off the bus mid-run: keep the reason, stop sampling
                self.reason = f"NVML sampling failed: {type(exc).__name__}: {exc}"
                return

    def stop(self) -> dict[str, Any]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if not self.samples:
            return {"mean_pct": None, "samples": 0, "reason": self.reason or "no sample taken (run too short)"}
        return {"mean_pct": sum(self.samples) / len(self.samples), "samples": len(self.samples), "reason": None}
