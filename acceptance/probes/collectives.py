"""Collective bandwidth sweep, measured the way nccl-tests measures it.

For each op and size (the ops' halves: ``schema.collectives`` and ``probes.ops``): a data check (the
count of wrong elements, like nccl-tests' #wrong, exact at any world size: ``verifiable``), warm-up, then
``iters`` timed calls the way nccl-tests' ``BenchTime`` times them (``src/common.cu``, 2.19.6): one untimed
call awaited, a barrier, a host clock started, the calls launched back to back, the stream awaited, the
clock read; seconds per call = elapsed / iters, then the mean over ranks (``families.collectives.figures``).
Inside the loop, as nccl-tests' ``-I 1`` does, a mark before each call (a CUDA event on a GPU, the host
clock on the CPU), and here one after it too, so that each rank's calls can be told apart from its waits
for the others (``families.collectives.own_times``). With ``timing: cuda_graph`` the calls are then also
replayed from a CUDA graph (nccl-tests' ``-G``): a second figure, labelled, never gated. The transport NCCL
chose between each two ranks comes from its own report (``probes.nccl_log``).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
import torch.distributed as dist

from acceptance.families.collectives import CollectiveRow, CollectivesConfig, Measured, SweepResult, Timed, figures
from acceptance.masking import masked_env
from acceptance.probes import nccl_log
from acceptance.probes.gpu_sampler import GpuSampler
from acceptance.probes.ops import Op
from acceptance.probes.rank import Ctx, main, write_json
from acceptance.schema.collectives import OPS
from acceptance.schema.dtypes import DTYPES
from acceptance.schema.sizes import format_size, parse_size

# the GPU's processes once a second (gpu_sampler.PROCESS_PERIOD_S); utilisation no more often: the sweep's
# small sizes are timed on the host's clock where CUDA graphs are off, beside this thread
SWEEP_SAMPLE_S = 1.0


def timed_calls(
    ctx: Ctx, fn: Callable[[], object], iters: int, group: Any = None, between: Callable[[int], object] | None = None
) -> Timed:
    """``iters`` calls of ``fn`` timed as nccl-tests' ``BenchTime`` times them (``src/common.cu``): after a
    barrier, the host clock around the calls launched back to back and the final wait for the stream
    (``completeColl``), divided by ``iters``; the clock read after the last launch too (its ``cputime``,
    ``-C``). The marks around each call (``per_iter_timing``'s ``recordEvents``, a stop mark added) give each
    call's time without a wait inside the loop. ``between(i)``, where given, runs before call i's first mark
    (a test makes one rank come late with it, as a shared CPU core or GPU would)."""
    dist.barrier(group=group)  # nccl-tests: Barrier(args) right before timer tim
    if ctx.is_cuda:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        t0 = time.perf_counter()
        for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
            if between is not None:
                between(i)
            start.record()
            fn()
            end.record()
        launched = time.perf_counter() - t0
        ctx.sync()
        elapsed = time.perf_counter() - t0
        marks = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
        calls = [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(starts)] + [marks[-1]]
        return {"elapsed": elapsed / iters, "launched": launched / iters, "calls": calls, "in_call": marks}
    stamps: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    for i in range(iters):
        if between is not None:
            between(i)
        before = time.perf_counter()
        fn()
        stamps.append((before, time.perf_counter()))
    elapsed = time.perf_counter() - t0  # gloo's calls return complete: nothing left to wait for
    starts_s = [b for b, _ in stamps] + [stamps[-1][1]]
    return {
        "elapsed": elapsed / iters,
        "launched": elapsed / iters,
        "calls": [b - a for a, b in itertools.pairwise(starts_s)],
        "in_call": [e - b for b, e in stamps],
    }


def graph_seconds(op: Op, ctx: Ctx, iters: int) -> float:
    """Seconds per call with the ``iters`` calls captured in one CUDA graph and replayed, timed as nccl-tests'
    ``-G`` times them: after a barrier, the host clock around the replay and the wait for its end."""
    stream = torch.cuda.Stream(device=ctx.device)
    stream.wait_stream(torch.cuda.current_stream(ctx.device))
    with torch.cuda.stream(stream):
        op()  # a call outside capture first: NCCL connects its peers outside the graph
    torch.cuda.current_stream(ctx.device).wait_stream(stream)
    ctx.sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(iters):
            op()
    graph.replay()  # warm: the first replay uploads the graph
    ctx.sync()
    dist.barrier(group=op.group)
    t0 = time.perf_counter()
    graph.replay()
    ctx.sync()
    return (time.perf_counter() - t0) / iters


def measure(ctx: Ctx, name: str, nbytes: int, cfg: CollectivesConfig, group: Any = None) -> Measured:
    """One op at one size on this rank (a member of ``group``): its #wrong and its timed calls.
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
    # nccl-tests warms up with -w calls per size, then one more untimed call awaited (BenchTime's "Sync")
    for _ in range(cfg["warmup_iters"] + 1):
        op()
    ctx.sync()
    ctx.progress()
    timed = timed_calls(ctx, op, cfg["iters"], group)
    mode = "eager"
    graph: float | None = None
    if cfg["timing"] == "cuda_graph" and ctx.is_cuda:
        try:
            ctx.progress()
            graph = graph_seconds(op, ctx, cfg["iters"])
            mode = "eager; CUDA graph as a second figure"
        except RuntimeError as exc:  # a build or backend that cannot capture collectives: say so
            mode = f"eager (CUDA graph capture failed: {str(exc).splitlines()[0][:200]})"
    sizing = op.sizing
    del op
    found: Measured = {
        "op": name,
        "size": format_size(nbytes),
        "size_bytes": nbytes,
        "bytes": sizing.nbytes,
        "count": sizing.count,
        "elapsed": timed["elapsed"],
        "launched": timed["launched"],
        "calls": timed["calls"],
        "in_call": timed["in_call"],
        "wrong": wrong,
        "timing": mode,
        "host": ctx.host,
        "gpu": str(ctx.device),
    }
    if graph is not None:
        found["graph_seconds"] = graph
    return found


def reduce_rows(ctx: Ctx, mine: list[Measured]) -> list[CollectiveRow]:
    every = ctx.gather(mine)
    rows: list[CollectiveRow] = []
    for i, row in enumerate(mine):
        timed = [ranks[i] for ranks in every]
        found = figures(row["op"], row["bytes"], timed, ctx.world_size, [(t["host"], t["gpu"]) for t in timed])
        graph = [t["graph_seconds"] for t in timed if "graph_seconds" in t]
        if len(graph) == len(timed):  # nccl-tests' -G: the mean over ranks, a second figure
            seconds = statistics.fmean(graph)
            found["graph_time_us"] = seconds * 1e6
            found["graph_busbw_gbps"] = row["bytes"] / seconds / 1e9 * OPS[row["op"]].busbw_factor(ctx.world_size)
        # the measurement's fields in its own order, its seconds replaced by the figures
        rows.append(
            cast(
                CollectiveRow,  # every key of the row but same_as, which only a repeated size's copy has
                {
                    "op": row["op"],
                    "size": row["size"],
                    "size_bytes": row["size_bytes"],
                    "bytes": row["bytes"],
                    "count": row["count"],
                    "wrong": sum(ranks[i]["wrong"] for ranks in every),
                    "timing": row["timing"],
                    **found,
                },
            )
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
    cfg = ctx.spec["collectives"]
    rows: list[CollectiveRow] = []
    # another job's process that starts on a rank's GPU meanwhile slows every collective: named as the cause
    sampler = GpuSampler(ctx.device, period_s=SWEEP_SAMPLE_S)
    sampler.start()
    elem = DTYPES[cfg["dtype"]].nbytes
    for op in cfg["ops"]:
        moved: dict[int, CollectiveRow] = {}  # bytes moved -> the row that measured them
        for size in cfg["sizes"]:
            nbytes = parse_size(size)
            earlier = moved.get(OPS[op].sizing(nbytes, ctx.world_size, elem).nbytes)
            if earlier is not None:
                # a size rounded up to the same call as an earlier one (8 B of all_gather on 4 ranks moves
                # 64 B, one 16 B part per rank): measured once, its row repeated under this size for the
                # profile's figures, marked so that a table prints it once
                again = earlier.copy()
                again["size"], again["size_bytes"], again["same_as"] = format_size(nbytes), nbytes, earlier["size"]
                rows.append(again)
                continue
            # each size's row once every rank has timed it (a gather between sizes, outside any timed
            # region): rank 0 leaves the rows so far in partial.json, which the launcher's watcher prints
            # as they come and keeps if the probe fails later
            new = reduce_rows(ctx, [measure(ctx, op, nbytes, cfg)])
            moved[new[0]["bytes"]] = new[0]
            rows += new
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
