"""Point-to-point links measured in rounds: the pairs of a round all at once, one direction, then the other.

Used by the connectivity probe (every GPU pair inside each node, every rail across nodes) and by the
isolation rounds (the rails of a culprit). Each transfer starts after a barrier of every rank, so the
pairs of a round share the fabric as they would in a job; the receiver times its transfer and checks
every element. The first transfer of each direction warms the path up (and lets NCCL connect the pair)
and is not counted; the median of the others is.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from acceptance.families.connectivity import Link, Pair, RankDevice, RoundTransfer, Transfer
from acceptance.probes.rank import Ctx
from acceptance.schema.topology import NODE_ENV


def stable_node(ctx: Ctx) -> int:
    """This node's rank as the plugin knows it: the same in every job, unlike torchrun's GROUP_RANK, which the
    rendezvous assigns anew each time. Under the srun controller, Slurm's node id."""
    for name in (NODE_ENV, "SLURM_NODEID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return ctx.node_rank


def payload(rank: int, count: int, device: torch.device) -> torch.Tensor:
    """Position- and sender-dependent integers, exact in float32, so a misrouted or torn buffer shows."""
    return (torch.arange(count, device=device, dtype=torch.int64) % 1021 + rank).to(torch.float32)


def measure_rounds(
    ctx: Ctx, rounds: list[list[Pair]], nbytes: int, iters: int, group: Any = None
) -> list[RoundTransfer]:
    """The links this rank received, every round, both directions; the caller gathers and names them. ``group``:
    the communicator the transfers go through (this rank's node's, for the links inside it; None: the world's).
    """
    count = max(1, nbytes // 4)
    send = payload(ctx.rank, count, ctx.device)
    recv = torch.empty(count, device=ctx.device, dtype=torch.float32)
    mine: list[RoundTransfer] = []
    for number, pairs in enumerate(rounds, start=1):
        for directed in (pairs, [(b, a) for a, b in pairs]):
            ctx.phase(f"links round {number}")
            link = _transfer(ctx, directed, send, recv, iters, group)
            if link is not None:
                mine.append({**link, "round": number})
    return mine


def _transfer(
    ctx: Ctx, directed: list[Pair], send: torch.Tensor, recv: torch.Tensor, iters: int, group: Any
) -> Transfer | None:
    role = next(((src, dst) for src, dst in directed if ctx.rank in (src, dst)), None)
    times = []
    for _ in range(iters + 1):
        ctx.progress()
        dist.barrier()
        t0 = time.perf_counter()
        if role is not None:
            src, dst = role
            # batched P2P: NCCL runs it on the process group's communicator without serialising warnings
            op = (
                dist.P2POp(dist.isend, send, dst, group=group)
                if ctx.rank == src
                else dist.P2POp(dist.irecv, recv, src, group=group)
            )
            for work in dist.batch_isend_irecv([op]):
                work.wait()
        ctx.sync()
        times.append(time.perf_counter() - t0)
    if role is None or ctx.rank != role[1]:
        return None
    seconds = statistics.median(times[1:])
    nbytes = recv.numel() * recv.element_size()
    wrong = int((recv != payload(role[0], recv.numel(), ctx.device)).sum().item())
    return {
        "src": role[0],
        "dst": role[1],
        "bytes": nbytes,
        "time_us": seconds * 1e6,
        "gbps": nbytes / seconds / 1e9,
        "wrong": wrong,
    }


def name_links(
    links: list[RoundTransfer], ranks: list[RankDevice], node_of: dict[int, int] | None = None
) -> list[Link]:
    """Add where each end is (node, host, GPU index, UUID) from the gathered identities, keyed by rank."""
    by_rank = {r["rank"]: r for r in ranks}
    named: list[Link] = []
    for link in links:
        src, dst = by_rank[link["src"]], by_rank[link["dst"]]
        found: Link = {
            "src": link["src"],
            "dst": link["dst"],
            "bytes": link["bytes"],
            "time_us": link["time_us"],
            "gbps": link["gbps"],
            "wrong": link["wrong"],
            "round": link["round"],
            "src_node": node_of[link["src"]] if node_of else src["node_rank"],
            "src_host": src["host"],
            "src_gpu": src["local_rank"],
            "dst_node": node_of[link["dst"]] if node_of else dst["node_rank"],
            "dst_host": dst["host"],
            "dst_gpu": dst["local_rank"],
        }
        if src.get("uuid"):
            found["src_uuid"] = src["uuid"]
        if dst.get("uuid"):
            found["dst_uuid"] = dst["uuid"]
        named.append(found)
    return sorted(named, key=lambda k: (k["round"], k["src"], k["dst"]))


def ranks_by_node(ranks: list[RankDevice], key: str = "node_rank") -> dict[int, list[int]]:
    """Node -> its global ranks in local-rank order."""
    nodes: dict[int, list[tuple[int, int]]] = {}
    for r in ranks:
        nodes.setdefault(int(r["node"] if key == "node" else r["node_rank"]), []).append((r["local_rank"], r["rank"]))
    return {node: [rank for _, rank in sorted(members)] for node, members in sorted(nodes.items())}
