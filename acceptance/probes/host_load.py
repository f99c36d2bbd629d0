"""What the host was doing while a training figure was timed: how busy this rank's Python thread was, how
often the kernel took its CPU away, and how much of the machine's CPU time went elsewhere.

A strategy whose GPU waits on host-side work (ZeRO-3 gathers and releases parameters from Python hooks) runs
only as fast as its thread gets a CPU: ``thread_busy`` near 1 with low GPU utilisation says the rank is
host-bound; involuntary context switches and the host's steal time (a virtual machine whose hypervisor ran
someone else) say the CPU was taken away. Linux only: ``/proc/stat`` (proc(5)) and ``RUSAGE_THREAD``
(getrusage(2)); elsewhere the figures are None with the reason.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

from acceptance.families.training.figures import HostLoadFigures

PROC_STAT = Path("/proc/stat")
# the fields of /proc/stat's "cpu" line, in USER_HZ ticks (proc(5))
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _host_ticks() -> dict[str, int] | None:
    try:
        first = PROC_STAT.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    return dict(zip(STAT_FIELDS, (int(v) for v in first[1 : 1 + len(STAT_FIELDS)]), strict=False))


class HostLoad:
    """Between ``start()`` and ``stop()``, on the calling thread (the one that drives the GPU)."""

    def start(self) -> None:
        self._wall = time.perf_counter()
        self._thread_cpu = time.thread_time()
        self._usage = resource.getrusage(resource.RUSAGE_THREAD) if hasattr(resource, "RUSAGE_THREAD") else None
        self._ticks = _host_ticks()

    def stop(self) -> HostLoadFigures:
        wall = time.perf_counter() - self._wall
        thread_cpu_s = time.thread_time() - self._thread_cpu
        out: HostLoadFigures = {
            "wall_s": wall,
            "thread_cpu_s": thread_cpu_s,
            "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "thread_busy": thread_cpu_s / wall if wall > 0 else None,
        }
        if self._usage is not None:
            now = resource.getrusage(resource.RUSAGE_THREAD)
            out["involuntary_switches"] = now.ru_nivcsw - self._usage.ru_nivcsw
        ticks = _host_ticks()
        if self._ticks is not None and ticks is not None:
            spent = {k: ticks[k] - self._ticks.get(k, 0) for k in ticks}
            total = sum(spent.values()) or 1
            out["host_busy_pct"] = 100.0 * (total - spent["idle"] - spent.get("iowait", 0)) / total
            out["host_steal_pct"] = 100.0 * spent.get("steal", 0) / total
        else:
            out["host_reason"] = f"{PROC_STAT} unreadable: not Linux"
        return out
