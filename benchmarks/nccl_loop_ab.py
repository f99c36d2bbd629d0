"""The direct NCCL loop's parts one at a time, on this machine's GPUs (under torchrun, one process per GPU):
per op and size, the time per call of the suite's loop (``probes.collectives``) beside the same loop without
its window marks, without lining the ranks up first, with torch's barrier instead, and with more calls; each
printed with its first and last window, so a start effect shows apart from the steady pace.

    torchrun --nproc-per-node 2 benchmarks/nccl_loop_ab.py [--ops all_gather,all_reduce] [--sizes 64K,1M]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from acceptance.probes import nccl_calls
from acceptance.probes.collectives import HostTimed, direct_timed, share_id
from acceptance.probes.ops import Op
from acceptance.schema.sizes import parse_size

REPEATS = 5


def loop(issue: Callable[[], object], calls: int, marks: bool) -> tuple[float, float, float]:
    """Host seconds per call over the loop, and the first and last fifth's per call (events) when marked."""
    stream = torch.cuda.current_stream()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(6)] if marks else []
    fifth = max(1, calls // 5)
    start = time.perf_counter()
    if marks:
        events[0].record(stream)
    for i in range(calls):
        issue()
        if marks and (i + 1) % fifth == 0 and (i + 1) // fifth <= 5:
            events[(i + 1) // fifth].record(stream)
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

    def barrier(timed: HostTimed) -> None:
        dist.barrier()

    def nothing(timed: HostTimed) -> None:
        torch.cuda.current_stream().synchronize()

    def own(timed: HostTimed) -> None:
        timed.line_up()

    variants: dict[str, tuple[int, bool, Callable[[HostTimed], None]]] = {
        "suite (20, marks, own line-up)": (20, True, own),
        "no marks": (20, False, own),
        "torch barrier": (20, True, barrier),
        "no line-up": (20, True, nothing),
        "200 calls": (200, True, own),
    }
    for name in args.ops.split(","):
        for size in args.sizes.split(","):
            timed = direct_timed(Op(name, parse_size(size), "bfloat16", device), device, "bfloat16", comms)
            for label, (calls, marks, meet_up) in variants.items():
                found = []
                for _ in range(REPEATS):
                    for _ in range(5):
                        timed.call()
                    torch.cuda.current_stream().synchronize()
                    meet_up(timed)
                    found.append(loop(timed.issue, calls, marks))
                every: list[list[tuple[float, float, float]]] = [[] for _ in range(dist.get_world_size())]
                dist.all_gather_object(every, found)
                if dist.get_rank() == 0:
                    whole = [statistics.fmean(r[i][0] for r in every) * 1e6 for i in range(REPEATS)]
                    first = [statistics.fmean(r[i][1] for r in every) * 1e6 for i in range(REPEATS)]
                    last = [statistics.fmean(r[i][2] for r in every) * 1e6 for i in range(REPEATS)]
                    print(
                        f"{name:14s} {size:>4s} {label:32s} us/call median {statistics.median(whole):7.2f} "
                        f"(runs {min(whole):6.2f}-{max(whole):6.2f}); first fifth {statistics.median(first):7.2f}, "
                        f"last {statistics.median(last):7.2f}",
                        flush=True,
                    )
    comms.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
