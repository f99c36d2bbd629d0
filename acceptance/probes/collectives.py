"""Collective bandwidth sweep, measured the way nccl-tests measures it.

For each op and size (the ops' halves: ``schema.collectives`` and ``probes.ops``): a data check (the
count of wrong elements, like nccl-tests' #wrong, exact at any world size: ``verifiable``), warm-up, then
``iters`` timed calls. On GPUs the timed calls are captured in one CUDA graph and replayed, so the
figure is the collective's time rather than Python's launch cost; on the CPU (gloo) a synchronised
host clock times a plain loop. The timed calls are cut into up to five windows (``probes.windows``; on
GPUs a timing event captured between two windows in the graph): a rank's time per call is its median
window's, then averaged across ranks (nccl-tests' default ``-a 1``); the slowest rank's time is kept too,
and every window's busbw beside the figure. The transport NCCL chose between each two ranks comes from
its own report (``probes.nccl_log``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from acceptance.families.collectives import CollectiveRow, CollectivesConfig, Measured, SweepResult, figures
from acceptance.masking import masked_env
from acceptance.probes import nccl_log, windows
from acceptance.probes.gpu_sampler import GpuSampler
from acceptance.probes.ops import Op
from acceptance.probes.rank import Ctx, main, section, write_json
from acceptance.schema.sizes import format_size, parse_size

# the GPU's processes once a second (gpu_sampler.PROCESS_PERIOD_S); utilisation no more often: the sweep's
# small sizes are timed on the host's clock where CUDA graphs are off, beside this thread
SWEEP_SAMPLE_S = 1.0


def time_eager(op: Op, ctx: Ctx, warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        op()
    ctx.sync()
    ctx.progress()
    dist.barrier(group=op.group)
    return windows.timed_windows(ctx, op, windows.split(iters))


def time_graph(op: Op, ctx: Ctx, warmup: int, iters: int) -> list[float]:
    stream = torch.cuda.Stream(device=ctx.device)
    stream.wait_stream(torch.cuda.current_stream(ctx.device))
    with torch.cuda.stream(stream):
        for _ in range(max(1, warmup)):
            op()
    torch.cuda.current_stream(ctx.device).wait_stream(stream)
    ctx.sync()
    graph = windows.GraphWindows(op, windows.split(iters), stream)
    graph.replay()
    ctx.sync()
    ctx.progress()
    dist.barrier(group=op.group)
    return graph.replay()


def measure(ctx: Ctx, name: str, nbytes: int, cfg: CollectivesConfig, group: Any = None) -> Measured:
    """One op at one size on this rank (a member of ``group``): its #wrong and seconds per call in each
    timed window.
    ``size_bytes`` is the size asked for; ``bytes`` and ``count`` what the call moved (the parts rounded)."""
    ctx.phase(f"{name} {format_size(nbytes)}")
    op = Op(name, nbytes, cfg["dtype"], ctx.device, group)
    wrong = 0
    if cfg.get("check_data", True):
        op.fill()
        ctx.progress()
        op()
        ctx.sync()
        wrong = op.wrong()
    ctx.progress()
    mode = cfg["timing"]
    if mode == "auto":
        mode = "cuda_graph" if ctx.is_cuda else "eager"
    if mode == "cuda_graph":
        try:
            seconds = time_graph(op, ctx, cfg["warmup_iters"], cfg["iters"])
        except RuntimeError as exc:  # a build or backend that cannot capture collectives: say so, time eagerly
            mode = f"eager (CUDA graph capture failed: {str(exc).splitlines()[0][:200]})"
            seconds = time_eager(op, ctx, cfg["warmup_iters"], cfg["iters"])
    else:
        seconds = time_eager(op, ctx, cfg["warmup_iters"], cfg["iters"])
    sizing = op.sizing
    del op
    return {
        "op": name,
        "size": format_size(nbytes),
        "size_bytes": nbytes,
        "bytes": sizing.nbytes,
        "count": sizing.count,
        "seconds": seconds,
        "wrong": wrong,
        "timing": mode,
    }


def reduce_rows(ctx: Ctx, mine: list[Measured]) -> list[CollectiveRow]:
    every = ctx.gather(mine)
    rows: list[CollectiveRow] = []
    for i, row in enumerate(mine):
        seconds = [ranks[i]["seconds"] for ranks in every]
        # the measurement's fields in its own order, its seconds replaced by the figures
        rows.append(
            {
                "op": row["op"],
                "size": row["size"],
                "size_bytes": row["size_bytes"],
                "bytes": row["bytes"],
                "count": row["count"],
                "wrong": sum(ranks[i]["wrong"] for ranks in every),
                "timing": row["timing"],
                **figures(row["op"], row["bytes"], seconds, ctx.world_size),
            }
        )
    return rows


def nccl_version() -> str | None:
    if not torch.cuda.is_available():
        return None
    version = torch.cuda.nccl.version()
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def nccl_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The NCCL variables the run had, for the evidence and the probe's result: a pkey or a password among
    them masked (``masking``), as every record of the environment is."""
    ours = nccl_log.set_here()  # the debug report the probe asked for is no setting of the run's
    return masked_env({k: v for k, v in sorted(environ.items()) if k.startswith("NCCL_") and k not in ours})


def run(ctx: Ctx) -> SweepResult:
    cfg = section(ctx.spec, "collectives", CollectivesConfig)
    rows: list[CollectiveRow] = []
    # another job's process that starts on a rank's GPU meanwhile slows every collective: named as the cause
    sampler = GpuSampler(ctx.device, period_s=SWEEP_SAMPLE_S)
    sampler.start()
    for op in cfg["ops"]:
        for size in cfg["sizes"]:
            # each size's row once every rank has timed it (a gather between sizes, outside any timed
            # region): rank 0 leaves the rows so far in partial.json, which the launcher's watcher prints
            # as they come and keeps if the probe fails later
            rows += reduce_rows(ctx, [measure(ctx, op, parse_size(size), cfg)])
            if ctx.rank == 0:
                write_json(ctx.out / "partial.json", {"rows": rows}, durable=False)
    sampler.stop()
    seen = ctx.gather(sampler.seen())
    result: SweepResult = {
        "world_size": ctx.world_size,
        "dtype": cfg["dtype"],
        "backend": ctx.backend,
        "rows": rows,
        "nccl_version": nccl_version() if ctx.backend == "nccl" else None,
        "nccl_algo": os.environ.get("NCCL_ALGO", "auto (chosen by NCCL per size)"),
        "nccl_env": nccl_settings(os.environ),
        # every connection NCCL made in this process so far, the sweep's included (a worker's earlier probes
        # may have connected the world's ring first: the same GPUs, the same transport)
        "transport": nccl_log.record(ctx),
    }
    foreign = {str(rank): found for rank, found in enumerate(seen) if found}
    if foreign:
        result["foreign"] = foreign
    return result


if __name__ == "__main__":
    main(run)
