"""Collective bandwidth sweep, measured the way nccl-tests measures it.

For each op and size (its definition: ``schema.collectives``; its buffers and call: ``probes.ops``): a data
check (the count of wrong elements, like nccl-tests' #wrong, exact at any world size: ``verifiable``),
warm-up, then ``iters`` timed calls in one timed loop, whose mode (``collectives.timing``) is chosen apart from
its reason: on GPUs libnccl called directly from a C loop the host times (nccl-tests' time), or the calls
captured in one CUDA graph and replayed; on the CPU (gloo) a synchronised host clock times torch's calls. The
timed calls are cut into up to five windows (``probes.windows``; in a graph a timing event captured between
two windows): a rank's time per call is its whole loop's where the host timed it, else its median window's,
then averaged across ranks (nccl-tests' default ``-a 1``); the slowest rank's time is kept too, and every
window's busbw beside the figure. The transport NCCL chose between each two ranks comes from its own report
(``probes.nccl_log``). After the sweep, the spread pass at sizes of its own: blocking calls through the
sweep's own call, each marked on the rank's own timeline, which say which rank the others waited for
(``collectives.lateness``).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from acceptance.families.collectives import CollectiveRow, CollectivesConfig, Measured, SweepResult, figures, lateness
from acceptance.families.collectives.lateness import RankPlace, Spread
from acceptance.families.collectives.timing import Reason, Timing, TimingAsked, TimingMode, calls_nccl
from acceptance.masking import masked_env
from acceptance.probes import nccl_calls, nccl_log, nccl_loop, windows
from acceptance.probes.gpu_sampler import GpuSampler
from acceptance.probes.links import stable_node
from acceptance.probes.ops import Arena, Op
from acceptance.probes.rank import Ctx, main, section, write_json
from acceptance.schema.sizes import format_size, parse_size

# the GPU's processes once a second (gpu_sampler.PROCESS_PERIOD_S); utilisation no more often: the sweep's
# small sizes are timed on the host's clock where CUDA graphs are off, beside this thread
SWEEP_SAMPLE_S = 1.0


@dataclass(frozen=True)
class HostTimed:
    """A host-timed loop's parts: the call the warm-up and the data check make (raising on an error), the
    burst the timed loop issues (NCCL's bare calls from the C loop, their result code checked by the loop:
    ``windows.Burst``), and how the ranks line up before the loop (nccl-tests' ``Barrier``)."""

    call: Callable[[], object]
    burst: windows.Burst
    line_up: Callable[[], object]
    # what the calls reach by address alone (the op's buffers, the line-up's element): alive as long as they are
    held: tuple[object, ...] = ()


def _torch_timed(op: Op) -> HostTimed:
    return HostTimed(op, windows.repeat(op), lambda: dist.barrier(group=op.group))


def direct_timed(op: Op, device: torch.device, dtype: str, comms: nccl_calls.Communicators) -> HostTimed:
    """``op`` through NCCL directly, on the current stream; the ranks lined up by a one-element all_reduce on
    the same communicator, waited for on the host (every rank leaves it within the GPU's own skew, where
    torch's barrier adds its own work and watchdog)."""
    sizing, place = op.sizing, op.place
    own = nccl_calls.Buffers(
        op.inp.data_ptr(),
        op.out.data_ptr(),
        sizing.send,
        sizing.part,
        sizing.elem,
        place.rank,
        place.ranks,
        send_slot=op.send_bytes,
        recv_slot=op.recv_bytes,
        slots=op.slots,
    )
    call = _bound(op.name, op.group, own, device, dtype, comms)
    one = torch.zeros(1, dtype=torch.float32, device=device)
    scratch = nccl_calls.Buffers(one.data_ptr(), one.data_ptr(), 1, 1, one.element_size(), place.rank, place.ranks)
    meet = _bound("all_reduce", op.group, scratch, device, "float32", comms)
    stream = torch.cuda.current_stream(device)

    def line_up() -> None:
        meet()
        stream.synchronize()

    return HostTimed(call, call.burst, line_up, held=(op, one))


def time_eager(timed: HostTimed, ctx: Ctx, group: Any, cfg: CollectivesConfig) -> tuple[list[float], float]:
    """Warm-up, the ranks lined up, then the timed calls back to back: each timed window's seconds per call
    and the whole loop's on the host's clock (``windows.timed_loop``), as nccl-tests' ``BenchTime``. The calls
    are ``iters``, or as many more as fill ``min_timed_s`` at the warm-up's pace (the most any rank of the
    group asks for: every rank must issue as many)."""
    warmup, iters = cfg["warmup_iters"], cfg["iters"]
    start = time.perf_counter()
    for _ in range(warmup):
        timed.call()
    ctx.sync()
    per_call = (time.perf_counter() - start) / warmup if warmup else 0.0
    least = cfg.get("min_timed_s", 0.0)
    calls = max(iters, math.ceil(least / per_call)) if per_call > 0 and least > 0 else iters
    ctx.progress()
    if least > 0:
        agreed = torch.tensor([calls], dtype=torch.int64, device=ctx.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
        calls = int(agreed.item())
    timed.line_up()
    return windows.timed_loop(ctx, timed.burst, windows.split(calls))


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


def spread_pass(ctx: Ctx, timed: HostTimed, calls: int) -> windows.Blocking:
    """The spread pass (``collectives.lateness``): the ranks lined up, then ``calls`` blocking calls, each marked
    on this rank's own timeline (``windows.blocking_calls``). Through the checked call of
    the timed loop's own path: NCCL called directly where the loop was, else torch's eager op (a CUDA graph's
    loop has no call of its own to block on)."""
    ctx.progress()
    timed.line_up()
    return windows.blocking_calls(ctx, timed.call, calls)


def spread_case(
    ctx: Ctx, name: str, size: str, cfg: CollectivesConfig, nccl: nccl_calls.Communicators | str | None
) -> Spread:
    """The spread pass of ``name`` at ``size`` over the world: the op made and warmed up as the sweep's timed
    loop is (its own call: NCCL directly where the sweep's loop calls it, else torch's eager op), then
    ``spread_pass``; every rank's figures on every rank."""
    nbytes = parse_size(size)
    ctx.phase(f"{name} {format_size(nbytes)} spread")
    op = Op(name, nbytes, cfg["dtype"], ctx.device)
    timed = host_timed(op, ctx, cfg["dtype"], timing_of(ctx, cfg["timing"], None, nccl), nccl)
    for _ in range(max(1, cfg["warmup_iters"])):
        timed.call()
    ctx.sync()
    blocking = spread_pass(ctx, timed, cfg.get("spread_iters", 0))
    del op, timed
    every = ctx.gather({"seconds": blocking.seconds, "gaps": blocking.gaps})
    return lateness.spread(name, format_size(nbytes), [r["seconds"] for r in every], [r["gaps"] for r in every])


def place(ctx: Ctx) -> RankPlace:
    """Where this rank runs, as a late rank is named."""
    uuid = f"GPU-{torch.cuda.get_device_properties(ctx.device).uuid}" if ctx.is_cuda else None
    return {
        "rank": ctx.rank,
        "node": stable_node(ctx),
        "host": ctx.host,
        "gpu": ctx.device.index if ctx.is_cuda else None,
        "uuid": uuid,
    }


def share_id(uid: bytes | None, group: Any) -> bytes:
    """The group's first rank's NCCL unique id, on every rank of the group."""
    box = [uid]
    dist.broadcast_object_list(box, src=0 if group is None else dist.get_global_rank(group, 0), group=group)
    found = box[0]
    assert isinstance(found, bytes), "the first rank shares its id"
    return found


def direct_nccl(ctx: Ctx) -> nccl_calls.Communicators | str:
    """The probe's own communicators over the libnccl torch loaded, or why there are none."""
    if not ctx.is_cuda or ctx.backend != "nccl":
        return f"no NCCL on {ctx.device.type}"
    try:
        return nccl_calls.Communicators(nccl_calls.Library.load(), share_id)
    except (OSError, AttributeError) as exc:  # a build with NCCL linked in statically, or none
        return f"libnccl not callable: {str(exc)[:200]}"


def timing_of(ctx: Ctx, asked: TimingAsked, group: Any, nccl: nccl_calls.Communicators | str | None) -> Timing:
    """How this op is timed: ``auto`` is NCCL called directly for the whole world on GPUs (nccl-tests' time),
    a CUDA graph inside a subgroup (an isolation pair, an internode scope: one communicator each would cost
    more than the figure), the host clock on the CPU. Where the direct calls were asked for (or ``auto``'s)
    and cannot be made, the mode it is timed in instead, and why; where they are issued from Python, why."""
    fallback: TimingMode = "cuda_graph" if ctx.is_cuda else "eager"
    if asked == "auto":
        if not ctx.is_cuda or group is not None or nccl is None:
            return Timing(fallback)
        asked = "nccl"
    if asked == "nccl":
        if not isinstance(nccl, nccl_calls.Communicators):
            return Timing(fallback, Reason("no_nccl", nccl or "no NCCL communicator given"))
        if isinstance(nccl.lib.looper, str):  # slower than nccl-tests below 1 MiB: said
            return Timing("nccl", Reason("from_python", nccl.lib.looper))
        return Timing("nccl")
    return Timing("cuda_graph" if asked == "cuda_graph" else "eager")


def host_timed(op: Op, ctx: Ctx, dtype: str, timing: Timing, nccl: nccl_calls.Communicators | str | None) -> HostTimed:
    """The op's call as the host issues it in ``timing``'s mode: NCCL's own where it is called directly, else
    torch's (a CUDA graph's warm-up, data check and spread pass go through torch's call too)."""
    if timing.mode == "nccl" and isinstance(nccl, nccl_calls.Communicators):
        return direct_timed(op, ctx.device, dtype, nccl)
    return _torch_timed(op)


def timed_loop(
    ctx: Ctx, op: Op, timed: HostTimed, timing: Timing, group: Any, cfg: CollectivesConfig
) -> tuple[list[float], float | None, Timing]:
    """The op's timed loop in its mode: each timed window's seconds per call, the whole loop's on the host's
    clock (None for a CUDA graph, timed on the device), and the timing it had: a graph that cannot capture the
    collective is timed eagerly, and says why."""
    if timing.mode == "cuda_graph":
        try:
            return time_graph(op, ctx, cfg["warmup_iters"], cfg["iters"]), None, timing
        except RuntimeError as exc:  # a build or backend that cannot capture collectives
            timing = Timing("eager", Reason("graph_failed", str(exc).splitlines()[0][:200]))
            timed = _torch_timed(op)
    seconds, loop = time_eager(timed, ctx, group, cfg)
    return seconds, loop, timing


def _bound(
    name: str,
    group: Any,
    buffers: nccl_calls.Buffers,
    device: torch.device,
    dtype: str,
    comms: nccl_calls.Communicators,
) -> nccl_calls.Bound:
    """One direct NCCL call of ``name`` over ``buffers``, on the group's communicator and the current stream."""
    comm = comms.of(group, buffers.rank, buffers.ranks)
    return nccl_calls.bind(comms.lib, name, buffers, dtype, comm, torch.cuda.current_stream(device).cuda_stream)


def measure(
    ctx: Ctx,
    name: str,
    nbytes: int,
    cfg: CollectivesConfig,
    group: Any = None,
    nccl: nccl_calls.Communicators | str | None = None,
    arena: Arena | None = None,
) -> Measured:
    """One op at one size on this rank (a member of ``group``): its #wrong, seconds per call in each timed
    window and, timed by the host (NCCL called directly, or the CPU), the whole loop's seconds per call.
    ``nccl``: the probe's own communicators (``direct_nccl``), or why it has none; ``arena``: the op's buffers
    for the sweep, which the direct loop's calls move on into (``ops.Arena``).
    ``size_bytes`` is the size asked for; ``bytes`` and ``count`` what the call moved (the parts rounded)."""
    ctx.phase(f"{name} {format_size(nbytes)}")
    op = Op(name, nbytes, cfg["dtype"], ctx.device, group, arena)
    timing = timing_of(ctx, cfg["timing"], group, nccl)
    timed = host_timed(op, ctx, cfg["dtype"], timing, nccl)  # the data check goes through the timed call too
    wrong = 0
    if cfg.get("check_data", True):
        op.fill()
        ctx.progress()
        timed.call()
        ctx.sync()
        wrong = op.wrong()
    ctx.progress()
    seconds, loop, timing = timed_loop(ctx, op, timed, timing, group, cfg)
    sizing = op.sizing
    del op, timed
    measured: Measured = {
        "op": name,
        "size": format_size(nbytes),
        "size_bytes": nbytes,
        "bytes": sizing.nbytes,
        "count": sizing.count,
        "seconds": seconds,
        "wrong": wrong,
        "timing": timing.label,
    }
    if loop is not None:
        measured["loop_seconds"] = loop
    return measured


def reduce_rows(ctx: Ctx, mine: list[Measured]) -> list[CollectiveRow]:
    every = ctx.gather(mine)
    rows: list[CollectiveRow] = []
    for i, row in enumerate(mine):
        seconds = [ranks[i]["seconds"] for ranks in every]
        loops = [ranks[i].get("loop_seconds") for ranks in every]
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
                **figures(row["op"], row["bytes"], seconds, ctx.world_size, loops),
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


def _sweep(
    ctx: Ctx,
    cfg: CollectivesConfig,
    nccl: nccl_calls.Communicators | str | None,
    rows: list[CollectiveRow],
    spreads: list[Spread],
) -> None:
    """Every op at every size into ``rows``, then the spread pass into ``spreads``."""
    sizes = [parse_size(size) for size in cfg["sizes"]]
    # the C loop moves each call on into buffers as large as the op's largest size, as nccl-tests does (the
    # Python loop does not: its label says it is issued from Python)
    looper = nccl.lib.looper if isinstance(nccl, nccl_calls.Communicators) else None
    shifted = timing_of(ctx, cfg["timing"], None, nccl).mode == "nccl" and isinstance(looper, nccl_loop.Looper)
    for op in cfg["ops"]:
        arena = Arena.for_sweep(op, sizes, cfg["dtype"], ctx.device) if shifted else None
        for nbytes in sizes:
            # each size's row once every rank has timed it (a gather between sizes, outside any timed
            # region): rank 0 leaves the rows so far in partial.json, which the launcher's watcher prints
            # as they come and keeps if the probe fails later
            rows += reduce_rows(ctx, [measure(ctx, op, nbytes, cfg, nccl=nccl, arena=arena)])
            if ctx.rank == 0:
                write_json(ctx.out / "partial.json", {"rows": rows}, durable=False)
        del arena
    # who the others wait for, after the sweep (which it leaves as it was), at the pass's own sizes
    if cfg.get("spread_iters", 0) > 0:
        for op in cfg["ops"]:
            if lateness.applies(op, cfg["spread_iters"]):
                spreads += [spread_case(ctx, op, size, cfg, nccl) for size in cfg.get("spread_sizes", [])]


def run(ctx: Ctx) -> SweepResult:
    cfg = section(ctx.spec, "collectives", CollectivesConfig)
    rows: list[CollectiveRow] = []
    spreads: list[Spread] = []
    # another job's process that starts on a rank's GPU meanwhile slows every collective: named as the cause
    sampler = GpuSampler(ctx.device, period_s=SWEEP_SAMPLE_S)
    sampler.start()
    nccl = direct_nccl(ctx) if calls_nccl(cfg["timing"]) else None
    # the sweep on a stream of its own, non-blocking as nccl-tests' (src/common.cu): NCCL on the legacy default
    # stream cost 1-2 us more a call on an H200 host (docs/measurements.md)
    own = torch.cuda.stream(torch.cuda.Stream(ctx.device)) if ctx.is_cuda else contextlib.nullcontext()
    try:
        with own:
            _sweep(ctx, cfg, nccl, rows, spreads)
    finally:
        sampler.stop()
        if isinstance(nccl, nccl_calls.Communicators):
            nccl.close()
    seen = ctx.gather(sampler.seen())
    places = ctx.gather(place(ctx))
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
        "spread": spreads,
        "places": places,
    }
    foreign = {str(rank): found for rank, found in enumerate(seen) if found}
    if foreign:
        result["foreign"] = foreign
    return result


if __name__ == "__main__":
    main(run)
