"""Collective bandwidth sweep, measured the way nccl-tests measures it.

For each op and size: a data check (count of wrong elements, like nccl-tests' #wrong), warm-up, then
``iters`` timed calls. On GPUs the timed calls are captured in one CUDA graph and replayed, so the
figure is the collective's time rather than Python's launch cost; on the CPU (gloo) a synchronised
host clock times a plain loop. Time per call is the mean over iterations, then averaged across ranks
(nccl-tests' default ``-a 1``); the slowest rank's time is kept too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from acceptance.probes.rank import DTYPES, Ctx, main
from acceptance.profile.sizes import format_size, parse_size

# Bus-bandwidth factors from nccl-tests (src/*.cu, GetBw in NVIDIA/nccl-tests; doc/PERFORMANCE.md):
# busbw = algbw * factor, the fraction of the data each rank must move over its slowest link.
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
# relative tolerance of the data check: a few ulps of each type (nccl-tests uses per-type tolerances too)
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}
CHECK_CHUNK = 1 << 26


def pattern(rank: int, start: int, count: int, device: torch.device) -> torch.Tensor:
    """Rank- and position-dependent values, small integers so sums stay exact in float64."""
    idx = torch.arange(start, start + count, device=device, dtype=torch.int64)
    return ((idx + rank) % 5 + 1).to(torch.float64)


class Op:
    """Buffers and one call of a collective; ``expected`` is what this rank must hold afterwards.

    ``group`` (default: every rank) lets a probe measure inside a subset, e.g. one node; ranks and
    sizes are then the group's, and only its members may build the op."""

    def __init__(self, name: str, nbytes: int, dtype: torch.dtype, ctx: Ctx, group: Any = None) -> None:
        self.name, self.ctx, self.dtype, self.group = name, ctx, dtype, group
        self.n, self.r = dist.get_world_size(group), dist.get_rank(group)
        n, elem = self.n, torch.tensor([], dtype=dtype).element_size()
        chunk = max(1, nbytes // elem // n) if name in ("all_gather", "reduce_scatter", "all_to_all") else 0
        self.count = chunk * n if chunk else max(1, nbytes // elem)
        self.chunk = chunk
        new = lambda k: torch.empty(k, dtype=dtype, device=ctx.device)  # noqa: E731
        self.inp = new(self.count if name != "all_gather" else chunk)
        self.out = new(self.count if name != "reduce_scatter" else chunk)

    @property
    def nbytes(self) -> int:
        return self.count * self.inp.element_size()

    def global_rank(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def fill(self) -> None:
        r, dev = self.r, self.ctx.device
        start = r * self.chunk if self.name == "all_gather" else 0
        self.inp.copy_(pattern(r, start, self.inp.numel(), dev))
        if self.name in ("all_reduce", "broadcast", "reduce"):
            self.out = self.inp

    def __call__(self) -> None:
        n, r, name, group = self.n, self.r, self.name, self.group
        if name == "all_reduce":
            dist.all_reduce(self.inp, group=group)
        elif name == "all_gather":
            dist.all_gather_into_tensor(self.out, self.inp, group=group)
        elif name == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.inp, group=group)
        elif name == "all_to_all":
            dist.all_to_all_single(self.out, self.inp, group=group)
        elif name == "broadcast":
            dist.broadcast(self.inp, src=self.global_rank(0), group=group)
        elif name == "reduce":
            dist.reduce(self.inp, dst=self.global_rank(0), group=group)
        elif name == "sendrecv":
            ops = [
                dist.P2POp(dist.isend, self.inp, self.global_rank((r + 1) % n), group),
                dist.P2POp(dist.irecv, self.out, self.global_rank((r - 1) % n), group),
            ]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        else:
            raise ValueError(f"unknown collective {name!r}")

    def expected(self, start: int, count: int) -> torch.Tensor | None:
        n, r, dev, name = self.n, self.r, self.ctx.device, self.name
        if name == "all_reduce" or (name == "reduce" and r == 0):
            return sum(pattern(k, start, count, dev) for k in range(n))  # type: ignore[return-value]
        if name == "reduce_scatter":
            return sum(pattern(k, r * self.chunk + start, count, dev) for k in range(n))  # type: ignore[return-value]
        if name == "all_gather":
            idx = torch.arange(start, start + count, device=dev)
            return ((idx + idx // self.chunk) % 5 + 1).to(torch.float64)
        if name == "all_to_all":
            idx = torch.arange(start, start + count, device=dev)
            src = idx // self.chunk
            return ((r * self.chunk + idx % self.chunk + src) % 5 + 1).to(torch.float64)
        if name == "broadcast":
            return pattern(0, start, count, dev)
        if name == "sendrecv":
            return pattern((r - 1) % n, start, count, dev)
        return None

    def wrong(self) -> int:
        """Elements of this rank's output that differ from the expected value beyond the type's tolerance."""
        tol, bad = TOLERANCE[self.dtype], 0
        for start in range(0, self.out.numel(), CHECK_CHUNK):
            count = min(CHECK_CHUNK, self.out.numel() - start)
            want = self.expected(start, count)
            if want is None:
                continue
            got = self.out[start : start + count].to(torch.float64)
            # written as "not within" so that a NaN counts as wrong
            bad += int((~((got - want).abs() <= tol * want.abs())).sum().item())
        return bad


def time_eager(op: Op, ctx: Ctx, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        op()
    ctx.sync()
    ctx.progress()
    dist.barrier(group=op.group)
    start = time.perf_counter()
    for _ in range(iters):
        op()
    ctx.sync()
    return (time.perf_counter() - start) / iters


def time_graph(op: Op, ctx: Ctx, warmup: int, iters: int) -> float:
    stream = torch.cuda.Stream(device=ctx.device)
    stream.wait_stream(torch.cuda.current_stream(ctx.device))
    with torch.cuda.stream(stream):
        for _ in range(max(1, warmup)):
            op()
    torch.cuda.current_stream(ctx.device).wait_stream(stream)
    ctx.sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(iters):
            op()
    graph.replay()
    ctx.sync()
    ctx.progress()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier(group=op.group)
    begin.record()
    graph.replay()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / iters


def measure(ctx: Ctx, name: str, nbytes: int, cfg: dict[str, Any], group: Any = None) -> dict[str, Any]:
    dtype = DTYPES[cfg["dtype"]]
    ctx.phase(f"{name} {format_size(nbytes)}")
    op = Op(name, nbytes, dtype, ctx, group)
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
    count = op.count
    del op
    return {
        "op": name,
        "size": format_size(nbytes),
        "size_bytes": nbytes,
        "count": count,
        "seconds": seconds,
        "wrong": wrong,
        "timing": mode,
    }


def reduce_rows(ctx: Ctx, mine: list[dict[str, Any]]) -> list[dict[str, Any]]:
    every = ctx.gather(mine)
    rows = []
    for i, row in enumerate(mine):
        times = [ranks[i]["seconds"] for ranks in every]
        mean, worst = sum(times) / len(times), max(times)
        algbw = row["size_bytes"] / mean / 1e9
        rows.append(
            {
                **{k: v for k, v in row.items() if k != "seconds"},
                "time_us": mean * 1e6,
                "time_us_max": worst * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * BUSBW_FACTOR[row["op"]](ctx.world_size),
                "wrong": sum(ranks[i]["wrong"] for ranks in every),
                "slowest_rank": max(range(len(times)), key=times.__getitem__),
            }
        )
    return rows


def nccl_version() -> str | None:
    if not torch.cuda.is_available():
        return None
    version = torch.cuda.nccl.version()
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def run(ctx: Ctx) -> dict[str, Any]:
    cfg = ctx.spec["collectives"]
    mine = [measure(ctx, op, parse_size(size), cfg) for op in cfg["ops"] for size in cfg["sizes"]]
    rows = reduce_rows(ctx, mine)
    return {
        "world_size": ctx.world_size,
        "dtype": cfg["dtype"],
        "backend": ctx.backend,
        "rows": rows,
        "nccl_version": nccl_version() if ctx.backend == "nccl" else None,
        "nccl_algo": os.environ.get("NCCL_ALGO", "auto (chosen by NCCL per size)"),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    }


if __name__ == "__main__":
    main(run)
