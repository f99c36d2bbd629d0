"""Collectives across nodes next to the same collectives inside each node, so the network's share shows.

Scopes, each a process group over the ranks of this run, measured one after the other:

* ``all``: every rank of every node (the sweep's own figure, at the sizes chosen for this comparison);
* ``intranode``: each node's ranks alone, all nodes at once (no traffic crosses nodes, so they do not
  disturb each other); each node gets its own figure;
* ``one_gpu_per_node``: local rank 0 of each node, the others idle: the network alone, without the
  intra-node hop.

``internode_efficiency`` = busbw(all) / busbw(intranode) at the same size, the figure acceptance reports
quote as "16 GPUs vs 8 GPUs". The NCCL_ALGO=Ring variant is this probe started again with that
variable set (NCCL reads it when a communicator is created).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from acceptance.families.collectives import CollectivesConfig, GroupFigure, RankMeasured, figures
from acceptance.families.internode import InternodeResult, InternodeRow, ScopedMeasured
from acceptance.probes.collectives import measure, nccl_version
from acceptance.probes.rank import Ctx, main, section
from acceptance.schema.sizes import parse_size

SCOPES = ("all", "intranode", "one_gpu_per_node")


def scope_groups(ctx: Ctx) -> dict[str, tuple[Any, list[list[int]]]]:
    """Scope -> (this rank's group, or None when it sits this scope out; every group's global ranks)."""
    where = ctx.gather((ctx.rank, ctx.node_rank, ctx.local_rank))
    by_node: dict[int, list[int]] = {}
    for rank, node, _ in where:
        by_node.setdefault(node, []).append(rank)
    per_node = [sorted(by_node[node]) for node in sorted(by_node)]
    # every rank creates every group, in the same order, as torch.distributed requires
    mine = ctx.subgroups(per_node)
    leaders = sorted(rank for rank, _, local in where if local == 0)
    leader_group = ctx.group(leaders)
    return {
        "all": (dist.group.WORLD, [list(range(ctx.world_size))]),
        "intranode": (mine, per_node),
        "one_gpu_per_node": (leader_group if ctx.local_rank == 0 else None, [leaders]),
    }


def sweep(ctx: Ctx, scope: str, group: Any, cfg: CollectivesConfig) -> list[ScopedMeasured]:
    if group is None:
        return []
    return [
        {**measure(ctx, op, parse_size(size), cfg, group), "scope": scope, "rank": ctx.rank}
        for op in cfg["ops"]
        for size in cfg["sizes"]
    ]


def figure(rows: Sequence[RankMeasured], ranks: list[int]) -> GroupFigure:
    """One group's figure for one op and size: mean time over its ranks, busbw with its size's factor."""
    mine = sorted((r for r in rows if r["rank"] in ranks), key=lambda r: r["rank"])
    found = figures(
        mine[0]["op"], mine[0]["bytes"], [r["seconds"] for r in mine], len(ranks), [r.get("loop_seconds") for r in mine]
    )
    return {
        "ranks": len(ranks),
        **found,
        "slowest_rank": mine[int(found["slowest_rank"])]["rank"],
        "wrong": sum(r["wrong"] for r in mine),
        "timing": mine[0]["timing"],
    }


def summarise(
    every: list[ScopedMeasured], scope: str, groups: list[list[int]], cfg: CollectivesConfig
) -> list[InternodeRow]:
    out: list[InternodeRow] = []
    for op in cfg["ops"]:
        for size in cfg["sizes"]:
            rows = [r for r in every if r["scope"] == scope and r["op"] == op and r["size_bytes"] == parse_size(size)]
            figures = [figure(rows, ranks) for ranks in groups]
            slowest = min(range(len(figures)), key=lambda i: figures[i]["busbw_gbps"])
            out.append(
                {
                    "scope": scope,
                    "op": op,
                    "size": rows[0]["size"],
                    **figures[slowest],
                    # the slowest group bounds the figure; the mean is "one node" for the efficiency
                    "busbw_gbps_mean": sum(f["busbw_gbps"] for f in figures) / len(figures),
                    "wrong": sum(f["wrong"] for f in figures),
                    "groups": [{"ranks_of_group": g, **f} for g, f in zip(groups, figures, strict=True)],
                }
            )
    return out


def run(ctx: Ctx) -> InternodeResult:
    cfg = section(ctx.spec, "collectives", CollectivesConfig)
    scopes = [s for s in ctx.spec["scopes"] if s in SCOPES]
    groups = scope_groups(ctx)
    mine = []
    for scope in scopes:
        ctx.phase(f"scope {scope}")
        mine += sweep(ctx, scope, groups[scope][0], cfg)
        dist.barrier()  # the ranks that sat this scope out wait here, so scopes never overlap
    every = [row for rows in ctx.gather(mine) for row in rows]
    return {
        "world_size": ctx.world_size,
        "nodes": len(groups["intranode"][1]),
        "dtype": cfg["dtype"],
        "backend": ctx.backend,
        "rows": [row for scope in scopes for row in summarise(every, scope, groups[scope][1], cfg)],
        "nccl_version": nccl_version() if ctx.backend == "nccl" else None,
        "nccl_algo": os.environ.get("NCCL_ALGO", "auto (chosen by NCCL per size)"),
    }


if __name__ == "__main__":
    main(run)
