"""Connectivity: who is there, can everyone talk to everyone, and which link is slowest.

All-gathers each rank's identity (host, node rank, local rank, device name, GPU UUID), checks the
shape of the world, runs a small all-reduce whose result is checked, a point-to-point ring in which
each rank sends to the next in turn (so a slow link is named, not averaged away), and barrier latency.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from acceptance.probes.rank import Ctx, main
from acceptance.profile.sizes import format_size, parse_size


def identity(ctx: Ctx) -> dict[str, Any]:
    ident: dict[str, Any] = {
        "rank": ctx.rank,
        "node_rank": ctx.node_rank,
        "local_rank": ctx.local_rank,
        "host": ctx.host,
        "ip": _ip(),
        "device": str(ctx.device),
        "init_s": round(ctx.init_s, 3),
    }
    if ctx.is_cuda:
        props = torch.cuda.get_device_properties(ctx.device)
        pci = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
        ident.update(
            device_name=props.name,
            uuid=f"GPU-{props.uuid}",
            memory_gib=round(props.total_memory / 2**30, 1),
            pci_bus_id=f"{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}.0" if None not in pci else None,
        )
    return ident


def _ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "unknown"


def small_allreduce(ctx: Ctx) -> int:
    """Wrong elements after summing rank+1 over all ranks (expected n(n+1)/2 everywhere)."""
    ctx.phase("small all_reduce")
    x = torch.full((4096,), float(ctx.rank + 1), device=ctx.device, dtype=torch.float32)
    dist.all_reduce(x)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    return int((x != expected).sum().item())


def p2p_ring(ctx: Ctx, nbytes: int, iters: int) -> list[dict[str, Any]]:
    """Each rank in turn sends to the next one alone on the wire; the receiver times and checks it."""
    n, mine = ctx.world_size, []
    count = nbytes // 4
    send = torch.full((count,), float(ctx.rank), device=ctx.device)
    recv = torch.empty(count, device=ctx.device)
    for src in range(n):
        dst = (src + 1) % n
        ctx.phase(f"p2p {src}->{dst}")
        times = []
        for _ in range(iters + 1):
            ctx.progress()
            dist.barrier()
            t0 = time.perf_counter()
            # batched P2P: NCCL runs it on the process group's communicator without serialising warnings
            if ctx.rank == src:
                _wait(dist.batch_isend_irecv([dist.P2POp(dist.isend, send, dst)]))
            elif ctx.rank == dst:
                _wait(dist.batch_isend_irecv([dist.P2POp(dist.irecv, recv, src)]))
            ctx.sync()
            times.append(time.perf_counter() - t0)
        if ctx.rank == dst:
            seconds = statistics.median(times[1:])
            wrong = int((recv != float(src)).sum().item())
            mine.append(
                {
                    "src": src,
                    "dst": dst,
                    "bytes": nbytes,
                    "time_us": seconds * 1e6,
                    "gbps": nbytes / seconds / 1e9,
                    "wrong": wrong,
                }
            )
    return mine


def _wait(works: list[Any]) -> None:
    for work in works:
        work.wait()


def barrier_latency_us(ctx: Ctx, iters: int) -> float:
    ctx.phase("barrier latency")
    ctx.progress()
    dist.barrier()
    ctx.progress()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.barrier()
    return (time.perf_counter() - t0) / iters * 1e6


def run(ctx: Ctx) -> dict[str, Any]:
    cfg = ctx.spec["connectivity"]
    expected_world = int(ctx.spec["expected_world_size"])
    ranks = ctx.gather(identity(ctx))
    wrong = sum(ctx.gather(small_allreduce(ctx)))
    pairs = p2p_ring(ctx, parse_size(cfg["p2p_size"]), cfg["p2p_iters"]) if ctx.world_size > 1 else []
    pairs = [pair for per_rank in ctx.gather(pairs) for pair in per_rank]
    latency = barrier_latency_us(ctx, cfg["barrier_iters"])
    by_rank = {r["rank"]: r for r in ranks}
    for pair in pairs:
        pair["src_host"], pair["dst_host"] = by_rank[pair["src"]]["host"], by_rank[pair["dst"]]["host"]
    nodes: dict[str, list[int]] = {}
    for r in ranks:
        nodes.setdefault(f"{r['node_rank']}:{r['host']}", []).append(r["rank"])
    uuids = Counter(r["uuid"] for r in ranks if "uuid" in r)
    slowest = min(pairs, key=lambda p: p["gbps"]) if pairs else None
    return {
        "world_size": ctx.world_size,
        "expected_world_size": expected_world,
        "ranks": ranks,
        "nodes": nodes,
        "expected_ranks_per_node": int(ctx.spec["ranks_per_node"]),
        "short_nodes": {k: len(v) for k, v in nodes.items() if len(v) != int(ctx.spec["ranks_per_node"])},
        "missing_ranks": sorted(set(range(expected_world)) - set(by_rank)),
        "duplicate_uuids": sorted(u for u, c in uuids.items() if c > 1),
        "allreduce_wrong": wrong,
        "p2p": pairs,
        "p2p_size": format_size(parse_size(cfg["p2p_size"])),
        "p2p_slowest": slowest,
        "p2p_wrong": sum(p["wrong"] for p in pairs),
        "barrier_latency_us": sum(ctx.gather(latency)) / ctx.world_size,
        "rendezvous_s": max(r["init_s"] for r in ranks),
        "software": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if ctx.backend == "nccl" else None,
        },
    }


if __name__ == "__main__":
    main(run)
