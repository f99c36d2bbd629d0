"""The direct NCCL loop's parts one at a time, on this machine's GPUs (under torchrun, one process per GPU):
per op and size, the time per call of the suite's loop (``probes.collectives``: a stream of its own, the calls
issued from the C loop, ``probes.nccl_loop``) beside the same calls issued from Python, on torch's default
stream, without window marks and with fewer calls; each printed with its first and last window, so a start
effect shows apart from the steady pace.

    torchrun --nproc-per-node 2 benchmarks/nccl_loop_ab.py [--ops all_gather,all_reduce] [--sizes 64K,1M]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.distributed as dist

from acceptance.probes import nccl_calls, windows
from acceptance.probes.collectives import direct_timed, share_id
from acceptance.probes.ops import Op
from acceptance.schema.sizes import parse_size

REPEATS = 5


def loop(burst: windows.Burst, calls: int, marks: bool) -> tuple[float, float, float]:
    """Host seconds per call over the loop, and the first and last fifth's per call (events) when marked."""
    stream = torch.cuda.current_stream()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(6)] if marks else []
    fifth = calls // 5
    start = time.perf_counter()
    if marks:
        events[0].record(stream)
        for mark in events[1:]:
            burst(fifth)
            mark.record(stream)
    else:
        burst(calls)
    stream.synchronize()
    whole = (time.perf_counter() - start) / calls
    if not marks:
        return whole, 0.0, 0.0
    return whole, events[0].elapsed_time(events[1]) / 1e3 / fifth, events[4].elapsed_time(events[5]) / 1e3 / fifth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="all_gather,all_reduce")
    parser.add_argument("--sizes", default="8,64K,1M")
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    device = torch.device("cuda", local)
    comms = nccl_calls.Communicators(nccl_calls.Library.load(), share_id)
    if isinstance(comms.lib.looper, str):
        raise SystemExit(f"no C loop: {comms.lib.looper}")
    python = nccl_calls.Library(ctypes.CDLL(nccl_calls.loaded_library()), "issued from Python")
    held = nccl_calls.Communicators(python, share_id)
    own = torch.cuda.Stream(device)

    def on_own() -> AbstractContextManager[object]:
        return torch.cuda.stream(own)

    # label: (calls, marks, the stream's context, the communicators whose library issues the calls)
    variants: dict[str, tuple[int, bool, Callable[[], AbstractContextManager[object]], nccl_calls.Communicators]] = {
        "C, own stream, 20": (20, True, on_own, comms),
        "C, own stream, 200": (200, True, on_own, comms),
        "C, own stream, 200, no marks": (200, False, on_own, comms),
        "C, default stream, 200": (200, True, nullcontext, comms),
        "Python, own stream, 200": (200, True, on_own, held),
        "Python, default stream, 20": (20, True, nullcontext, held),
        "Python, default stream, 200": (200, True, nullcontext, held),
    }
    for name in args.ops.split(","):
        for size in args.sizes.split(","):
            op = Op(name, parse_size(size), "bfloat16", device)
            for label, (calls, marks, context, through) in variants.items():
                found = []
                with context():
                    timed = direct_timed(op, device, "bfloat16", through)
                    for _ in range(REPEATS):
                        for _ in range(5):
                            timed.call()
                        torch.cuda.current_stream().synchronize()
                        timed.line_up()
                        found.append(loop(timed.burst, calls, marks))
                every: list[list[tuple[float, float, float]]] = [[] for _ in range(dist.get_world_size())]
                dist.all_gather_object(every, found)
                if dist.get_rank() == 0:
                    whole = [statistics.fmean(r[i][0] for r in every) * 1e6 for i in range(REPEATS)]
                    first = [statistics.fmean(r[i][1] for r in every) * 1e6 for i in range(REPEATS)]
                    last = [statistics.fmean(r[i][2] for r in every) * 1e6 for i in range(REPEATS)]
                    print(
                        f"{name:14s} {size:>4s} {label:30s} us/call median {statistics.median(whole):7.2f} "
                        f"(runs {min(whole):6.2f}-{max(whole):6.2f}); first fifth {statistics.median(first):7.2f}, "
                        f"last {statistics.median(last):7.2f}",
                        flush=True,
                    )
    comms.close()
    held.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
