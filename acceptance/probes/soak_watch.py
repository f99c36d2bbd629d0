"""What NVML says of one GPU while it soaks: a sample about once a second, error counters before and after,
and the XID events the driver reports in between.

Each sample reads the SM clock (nvmlDeviceGetClockInfo, NVML_CLOCK_SM), the board's power draw
(nvmlDeviceGetPowerUsage, milliwatts), the GPU's temperature (nvmlDeviceGetTemperature), the memory's
(field NVML_FI_DEV_MEMORY_TEMP: HBM GPUs only) and the clock-event reasons (``probes.nvml``). The counters
are the volatile ECC totals (nvmlDeviceGetTotalEccErrors) and the remapped rows (nvmlDeviceGetRemappedRows).
XIDs come through NVML's event set (nvmlDeviceRegisterEvents with nvmlEventTypeXidCriticalError, waited on
with nvmlEventSetWait_v2), which is also the sampler's clock: it waits for an event until the next sample
is due. All of these are in the NVML API reference ("Device Queries", "Event Handling Methods"); a query a
GPU or a container does not allow becomes "not measured" with NVML's reason, never a zero.

The library is a parameter so that a recorded NVML (the unit tests') goes through the same code.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from acceptance.families.answers import NotMeasured, not_measured
from acceptance.families.soak import Counters, NvmlRecord, Sample, Xid
from acceptance.probes.nvml import CLOCK_EVENT_QUERIES, clock_event_names, load_library


def _or_none(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # an NVMLError of one query on this GPU: that value is absent from the sample
        return None


def read_counters(lib: Any, handle: Any) -> Counters:
    def ecc(kind: int) -> int | NotMeasured:
        try:
            return int(lib.nvmlDeviceGetTotalEccErrors(handle, kind, lib.NVML_VOLATILE_ECC))
        except lib.NVMLError as exc:
            return not_measured(f"volatile ECC errors: {exc}")

    try:
        correctable, uncorrectable, pending, failure = lib.nvmlDeviceGetRemappedRows(handle)
        rows: int | NotMeasured = int(correctable) + int(uncorrectable)
        flags: tuple[bool | NotMeasured, bool | NotMeasured] = (bool(pending), bool(failure))
    except lib.NVMLError as exc:
        rows = not_measured(f"remapped rows: {exc}")
        flags = (rows, rows)
    return {
        "ecc_corrected": ecc(lib.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        "ecc_uncorrected": ecc(lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        "remapped_rows": rows,
        "remap_pending": flags[0],
        "remap_failure": flags[1],
    }


class SoakWatch:
    """NVML on the GPU ``uuid`` from ``start()`` to ``stop()``; ``record()`` is the NvmlRecord, ``snapshot()``
    the record so far while the watch runs."""

    def __init__(self, uuid: str, period_s: float, lib: Any = None) -> None:
        self.period_s = period_s
        self.samples: list[Sample] = []
        self.xids: list[Xid] = []
        self.samples_reason: str | None = None
        self.xids_reason: str | None = None
        self.before: Counters | NotMeasured = not_measured("NVML not started")
        self.after: Counters | NotMeasured = not_measured("NVML not started")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._events_set: Any = None
        self._events_query: Any = None
        self.lib = load_library() if lib is None else lib
        self.handle: Any = None
        if isinstance(self.lib, dict):
            self.samples_reason = self.xids_reason = self.lib["not_measured"]
            self.before = self.after = not_measured(self.lib["not_measured"])
            return
        try:
            self.lib.nvmlInit()
            self.handle = self.lib.nvmlDeviceGetHandleByUUID(uuid)
        except self.lib.NVMLError as exc:
            self.samples_reason = self.xids_reason = f"NVML: {exc}"
            self.before = self.after = not_measured(f"NVML: {exc}")
            return
        # drivers before 535 know the clock-event query only by its older name
        found = (getattr(self.lib, name, None) for name in CLOCK_EVENT_QUERIES)
        self._events_query = next((q for q in found if q is not None), None)

    def start(self, t0: float) -> None:
        """Counters read now; samples timed from ``t0`` (``time.perf_counter()`` at the soak's start)."""
        if self.handle is None:
            return
        self._t0 = t0
        self.before = read_counters(self.lib, self.handle)
        try:
            self._events_set = self.lib.nvmlEventSetCreate()
            self.lib.nvmlDeviceRegisterEvents(self.handle, self.lib.nvmlEventTypeXidCriticalError, self._events_set)
        except self.lib.NVMLError as exc:
            self.xids_reason = f"XID events: {exc}"
            self._events_set = None
        self._thread = threading.Thread(target=self._loop, name="soak-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        due = time.perf_counter()
        while not self._stop.is_set():
            now = time.perf_counter()
            if now >= due:
                self.samples.append(self.sample(now - self._t0))
                due += self.period_s
                continue
            self._wait(due - now)

    def _wait(self, seconds: float) -> None:
        """Until the next sample: on NVML's event set where there is one (an XID ends the wait early)."""
        if self._events_set is None:
            self._stop.wait(seconds)
            return
        try:
            data = self.lib.nvmlEventSetWait_v2(self._events_set, max(1, int(seconds * 1000)))
        except self.lib.NVMLError_Timeout:
            return
        except self.lib.NVMLError as exc:
            self.xids_reason = f"XID events: waiting failed: {exc}"
            self._events_set = None
            return
        self.xids.append({"t": round(time.perf_counter() - self._t0, 3), "xid": int(data.eventData)})

    def sample(self, t: float) -> Sample:
        lib, h = self.lib, self.handle
        power = _or_none(lib.nvmlDeviceGetPowerUsage, h)
        bits = _or_none(self._events_query, h) if self._events_query is not None else None
        return {
            "t": round(t, 3),
            "sm_mhz": _or_none(lib.nvmlDeviceGetClockInfo, h, lib.NVML_CLOCK_SM),
            "power_w": None if power is None else power / 1000.0,  # NVML answers in milliwatts
            "temp_c": _or_none(lib.nvmlDeviceGetTemperature, h, lib.NVML_TEMPERATURE_GPU),
            "mem_temp_c": self._memory_temperature(),
            "events": [] if bits is None else clock_event_names(int(bits)),
        }

    def _memory_temperature(self) -> int | None:
        field = getattr(self.lib, "NVML_FI_DEV_MEMORY_TEMP", None)
        if field is None:
            return None
        values = _or_none(self.lib.nvmlDeviceGetFieldValues, self.handle, [field])
        if not values or int(values[0].nvmlReturn) != 0:
            return None  # GDDR boards report no memory temperature
        return int(values[0].value.uiVal)

    def stop(self) -> NvmlRecord:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.handle is not None:
            self.after = read_counters(self.lib, self.handle)
            if self._events_set is not None:
                _or_none(self.lib.nvmlEventSetFree, self._events_set)
            _or_none(self.lib.nvmlShutdown)
            self.handle = None
        return self.record()

    def snapshot(self) -> NvmlRecord:
        """The record so far, the watch left running (a checkpoint's): the counters read now stand for
        ``after``, and the samples and XIDs are copies, so that the thread's later appends change neither."""
        now = read_counters(self.lib, self.handle) if self.handle is not None else self.after
        return self._record(list(self.samples), list(self.xids), now)

    def record(self) -> NvmlRecord:
        return self._record(self.samples, self.xids, self.after)

    def _record(self, samples: list[Sample], seen: list[Xid], after: Counters | NotMeasured) -> NvmlRecord:
        reason = self.samples_reason or (None if samples else "no sample taken (soak too short)")
        # an XID seen before the watch failed still counts; none seen and no watch is not a zero
        xids: list[Xid] | NotMeasured = not_measured(self.xids_reason) if self.xids_reason and not seen else seen
        return {
            "samples": samples,
            "samples_reason": reason,
            "before": self.before,
            "after": after,
            "xids": xids,
        }
