"""Why the per-GPU matmul windows rise from first to last: a trace of the bf16 matmul's speed and the SM
clock, from idle and after the probe's warm-up with idle gaps of several lengths before the timed loop."""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import threading
import time

import pynvml
import torch

N = 8192
FLOP = 2 * N**3
out_path = sys.argv[1]
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
gen = torch.Generator(device=dev)
gen.manual_seed(1)
a = torch.randn((N, N), generator=gen, device=dev, dtype=torch.bfloat16)
b = torch.randn((N, N), generator=gen, device=dev, dtype=torch.bfloat16)
o = torch.empty((N, N), dtype=torch.bfloat16, device=dev)
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
records: list[dict[str, object]] = []


class Clocks(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.rows: list[tuple[float, int, float, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.005):
            t = time.perf_counter()
            sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            power = pynvml.nvmlDeviceGetPowerUsage(h) / 1000
            ev = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            self.rows.append((t, sm, power, ev))


def mm() -> None:
    torch.mm(a, b, out=o)


def windows(total: int, per: int) -> list[float]:
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(total // per + 1)]
    marks[0].record()
    for i in range(total // per):
        for _ in range(per):
            mm()
        marks[i + 1].record()
    marks[-1].synchronize()
    return [round(per * FLOP / (x.elapsed_time(y) / 1e3) / 1e12, 1) for x, y in itertools.pairwise(marks)]


def warm(seconds: float) -> None:
    start = time.perf_counter()
    while True:
        for _ in range(10):
            mm()
        torch.cuda.synchronize()
        if time.perf_counter() - start >= seconds:
            return


def traced(name: str, fn) -> None:  # type: ignore[no-untyped-def]
    clocks = Clocks()
    clocks.start()
    t0 = time.perf_counter()
    result = fn()
    clocks.halt.set()
    clocks.join()
    rows = [(round(t - t0, 3), sm, round(p), ev) for t, sm, p, ev in clocks.rows]
    records.append({"name": name, "tflops": result, "clocks": rows})
    mid = statistics.median(result) if result else None
    sms = [r[1] for r in rows]
    sm_range = f"{min(sms, default=0)}-{max(sms, default=0)}"
    print(f"{name}: windows {result[:6]} ... {result[-6:]} median {mid}; sm clock {sm_range}", flush=True)


print(torch.cuda.get_device_name(dev), pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000, "W", flush=True)
warm(2.0)
time.sleep(3.0)  # idle
traced("from-idle 6 s in 10-call windows", lambda: windows(3600, 10))
for gap in (0.0, 0.05, 0.2, 0.5, 1.0, 3.0):
    time.sleep(3.0)

    def run(gap: float = gap) -> list[float]:
        warm(1.0)
        time.sleep(gap)
        return windows(100, 5)

    traced(f"warm 1 s, idle {gap} s, 100 calls in 20 windows", run)
for seconds in (3.0, 6.0):
    time.sleep(3.0)

    def run2(seconds: float = seconds) -> list[float]:
        warm(seconds)
        return windows(100, 5)

    traced(f"warm {seconds} s, no gap, 100 calls in 20 windows", run2)
time.sleep(3.0)
t = time.perf_counter()
pynvml.nvmlInit()
pynvml.nvmlDeviceGetHandleByIndex(0)
print(f"second nvmlInit + handle: {1e3 * (time.perf_counter() - t):.1f} ms", flush=True)
with open(out_path, "w") as f:
    json.dump(records, f)
