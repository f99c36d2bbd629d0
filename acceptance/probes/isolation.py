"""One isolation round (``acceptance.families.isolation`` decides which), in one job over every node.

``pairs`` rounds: every node pair of a step is a process group of its own (``dist.new_group`` through
``new_subgroups_by_enumeration``: every rank creates every group, in the same order), and all pairs run
the collective at once, measured as the collectives probe measures it (data check, warm-up, timing); a
pair's figure is its busbw. ``rails`` rounds: GPU i of one node to GPU i of the other, every rail of every
pair at once, both directions (``acceptance.probes.links``). Nodes are named by their own stable rank,
so round 2 means the same machines as round 1.
"""

from __future__ import annotations

import torch.distributed as dist

from acceptance.families.collectives import RankMeasured
from acceptance.families.isolation import PairRow, RoundResult
from acceptance.probes.collectives import measure
from acceptance.probes.connectivity import identity
from acceptance.probes.internode import figure
from acceptance.probes.links import measure_rounds, name_links, ranks_by_node
from acceptance.probes.rank import Ctx, ProbeSpec, main
from acceptance.profile.sizes import parse_size


def pair_step(ctx: Ctx, step: list[list[int]], nodes: dict[int, list[int]], spec: ProbeSpec) -> list[PairRow]:
    cfg = spec["isolation"]
    groups = [sorted(nodes[a] + nodes[b]) for a, b in step]
    mine = ctx.subgroups(groups)
    rows: list[RankMeasured] = []
    if mine is not None:
        row = measure(ctx, cfg["op"], parse_size(cfg["size"]), spec["collectives"], mine)
        rows.append({**row, "rank": ctx.rank})
    dist.barrier()  # the ranks that sat this step out wait here, so steps never overlap
    every = [row for per_rank in ctx.gather(rows) for row in per_rank]
    out: list[PairRow] = []
    for (a, b), ranks in zip(step, groups, strict=True):
        fig = figure(every, ranks)
        out.append({"a": a, "b": b, "gbps": fig["busbw_gbps"], **fig})
    return out


def run(ctx: Ctx) -> RoundResult:
    cfg = ctx.spec["isolation"]
    rnd = cfg["round"]
    ranks = ctx.gather(identity(ctx))
    nodes = ranks_by_node(ranks, key="node")
    if len(nodes) != len({r["node_rank"] for r in ranks}):
        raise RuntimeError(f"nodes do not have distinct ranks: {sorted({(r['node'], r['host']) for r in ranks})}")
    out: RoundResult = {"round": rnd["number"], "kind": rnd["kind"], "hosts": {r["node"]: r["host"] for r in ranks}}
    if rnd["kind"] == "pairs":
        out["pairs"] = [fig for step in rnd["steps"] for fig in pair_step(ctx, step, nodes, ctx.spec)]
        return out
    rounds = [
        [(nodes[a][i], nodes[b][i]) for a, b in step for i in range(min(len(nodes[a]), len(nodes[b])))]
        for step in rnd["steps"]
    ]
    mine = measure_rounds(ctx, rounds, parse_size(cfg["size"]), cfg["iters"])
    measured = [link for per_rank in ctx.gather(mine) for link in per_rank]
    out["links"] = name_links(measured, ranks, node_of={r["rank"]: r["node"] for r in ranks})
    return out


if __name__ == "__main__":
    main(run)
