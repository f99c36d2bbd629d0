"""Host-link GB/s (pinned, 1 GiB, both GPUs at once, as the compute probe times them) with and without
processes importing what the staged training job imports, alternating rounds.

    torchrun --standalone --nproc-per-node 2 benchmarks/hostlinks_ab.py ROUNDS SECONDS_BEFORE_TIMING
"""

import itertools
import json
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist

IMPORTS = (
    "import torch, torch.distributed; import transformers; "
    "import transformers.models.llama.modeling_llama; import deepspeed; import torch._inductor.compile_fx"
)


def timed(fn, iters=10, windows=5, warm_s=1.0):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        fn()
        torch.cuda.synchronize()
    dist.barrier()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(windows + 1)]
    marks[0].record()
    for m in marks[1:]:
        for _ in range(iters // windows):
            fn()
        m.record()
    marks[-1].synchronize()
    per = [a.elapsed_time(b) / 1e3 / (iters // windows) for a, b in itertools.pairwise(marks)]
    return sorted(2**30 / 1e9 / s for s in per)


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    host = torch.empty(2**30, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_(0, 256)
    rounds = int(sys.argv[1])
    out = []
    for r in range(rounds):
        load = r % 2 == 1
        procs = []
        dist.barrier()
        if load:  # each rank starts one importer, like the staged job's ranks
            devnull = subprocess.DEVNULL
            procs = [subprocess.Popen([sys.executable, "-c", IMPORTS], stdout=devnull, stderr=devnull)]
            time.sleep(float(sys.argv[2]))
        h2d = timed(lambda: dev.copy_(host, non_blocking=True))
        d2h = timed(lambda: host.copy_(dev, non_blocking=True))
        still = [p.poll() is None for p in procs]
        for p in procs:
            p.wait()
        row = {"round": r, "load": load, "rank": rank, "h2d_med": h2d[2], "d2h_med": d2h[2], "h2d": h2d, "d2h": d2h}
        row["importer_running_after"] = still
        out.append(row)
        shown = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items() if k not in ("h2d", "d2h")}
        print(json.dumps(shown), flush=True)
    with open(os.path.join(os.environ["OUT"], f"hostlinks-rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


main()
