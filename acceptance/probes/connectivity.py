"""Connectivity: who is there, can everyone talk to everyone, and which link is slowest.

All-gathers each rank's identity (host, node rank, local rank, device name, GPU UUID), checks the
shape of the world, runs a small all-reduce whose result is checked, measures every link in concurrent
rounds (``acceptance.families.connectivity``: every GPU pair inside each node, then every rail across nodes,
each in both directions, every element checked), so a slow link is named, not averaged away, and
barrier latency. The transport NCCL chose for each pair is read from its own report
(``probes.nccl_log``) and set beside what NVML says joins the GPUs.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from acceptance.families import connectivity
from acceptance.families.connectivity import ConnectivityConfig, ConnectivityResult, Link, LinkFigures, RankDevice
from acceptance.probes import nccl_log
from acceptance.probes.links import measure_rounds, name_links, ranks_by_node, stable_node
from acceptance.probes.rank import Ctx, main, section
from acceptance.schema.sizes import format_size, parse_size


def identity(ctx: Ctx) -> RankDevice:
    ident: RankDevice = {
        "rank": ctx.rank,
        "node_rank": ctx.node_rank,
        "node": stable_node(ctx),  # the node's own rank, as isolation rounds name it
        "local_rank": ctx.local_rank,
        "host": ctx.host,
        "ip": _ip(),
        "device": str(ctx.device),
        "init_s": round(ctx.init_s, 3),
    }
    if ctx.is_cuda:
        props = torch.cuda.get_device_properties(ctx.device)
        pci = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
        ident["device_name"] = props.name
        ident["uuid"] = f"GPU-{props.uuid}"
        ident["memory_gib"] = round(props.total_memory / 2**30, 1)
        ident["pci_bus_id"] = f"{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}.0" if None not in pci else None
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


def barrier_latency_us(ctx: Ctx, iters: int) -> float:
    ctx.phase("barrier latency")
    ctx.progress()
    dist.barrier()
    ctx.progress()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.barrier()
    return (time.perf_counter() - t0) / iters * 1e6


def every_link(ctx: Ctx, ranks: list[RankDevice], cfg: ConnectivityConfig) -> LinkFigures:
    """Inside nodes, then across them: the two never share a round, so each figure is the link's own."""
    nodes = list(ranks_by_node(ranks, key="node").values())
    nbytes = parse_size(cfg["p2p_size"])

    def measured(rounds: list[list[connectivity.Pair]], group: Any = None) -> list[Link]:
        mine = measure_rounds(ctx, rounds, nbytes, cfg["p2p_iters"], group)
        found = [k for theirs in ctx.gather(mine) for k in theirs]
        return name_links(found, ranks, node_of={r["rank"]: r["node"] for r in ranks})

    p2p_rounds, rail_rounds = connectivity.intranode_rounds(nodes), connectivity.rail_rounds(nodes)
    # The links inside a node go through the node's own communicator, as a job's tensor-parallel group's do.
    # On the world's, NCCL gives point-to-point traffic no more channels than the world's rings have (its
    # ncclTopoComputeP2pChannels), which the network between nodes sets: two nodes joined by sockets read
    # 48.5 GB/s over NVLink that carries 287-305 within one node (docs/measurements.md).
    inside = ctx.subgroups(nodes) if len(nodes) > 1 else None
    if inside is not None:  # every member meets on it once: a node of odd size leaves one rank out of round 1
        dist.barrier(group=inside)
    p2p = measured(p2p_rounds, inside)
    rails = measured(rail_rounds)
    return {
        "p2p": p2p,
        "p2p_rounds": len(p2p_rounds),
        "p2p_slowest": min(p2p, key=lambda k: k["gbps"]) if p2p else None,
        "p2p_wrong": sum(k["wrong"] for k in p2p),
        "rails": rails,
        "rails_rounds": len(rail_rounds),
        "rails_slowest": min(rails, key=lambda k: k["gbps"]) if rails else None,
        "rails_wrong": sum(k["wrong"] for k in rails),
    }


def run(ctx: Ctx) -> ConnectivityResult:
    cfg = section(ctx.spec, "connectivity", ConnectivityConfig)
    expected_world = int(ctx.spec["expected_world_size"])
    ranks = ctx.gather(identity(ctx))
    wrong = sum(ctx.gather(small_allreduce(ctx)))
    measured = every_link(ctx, ranks, cfg)
    used = nccl_log.record(ctx)  # what NCCL connected so far: the all-reduce's ring and every link
    latency = barrier_latency_us(ctx, cfg["barrier_iters"])
    by_rank = {r["rank"]: r for r in ranks}
    nodes: dict[str, list[int]] = {}
    for r in ranks:
        nodes.setdefault(f"{r['node_rank']}:{r['host']}", []).append(r["rank"])
    uuids = Counter(r["uuid"] for r in ranks if "uuid" in r)
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
        **measured,
        "transport": used,
        "p2p_size": format_size(parse_size(cfg["p2p_size"])),
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
