"""One isolation round (``acceptance.families.internode.isolation`` decides which), in one job over every node.

``pairs`` rounds: every node pair of a step is a process group of its own (``dist.new_group`` through
``new_subgroups_by_enumeration``: every rank creates every group, in the same order), and all pairs run
the collective at once, measured as the collectives probe measures it (data check, warm-up, timing); a
pair's figure is its busbw. The steps run ``repeats`` times over, interleaved, and each pair keeps every
repeat's busbw (the isolation estimates the noise from them). ``rails`` rounds: GPU i of one node to
GPU i of the other, every rail of every pair at once, both directions (``acceptance.probes.links``).
Nodes are named by their own stable rank, so round 2 means the same machines as round 1.
"""

from __future__ import annotations

import torch.distributed as dist

from acceptance.families.collectives import CollectivesConfig, GroupFigure, RankMeasured
from acceptance.families.internode.isolation import IsolationConfig, PairRow, RoundResult
from acceptance.probes.collectives import measure
from acceptance.probes.connectivity import identity
from acceptance.probes.internode import figure
from acceptance.probes.links import measure_rounds, name_links, ranks_by_node
from acceptance.probes.rank import Ctx, ProbeSpec, main, section
from acceptance.schema.sizes import parse_size


def pair_steps(
    ctx: Ctx, steps: list[list[list[int]]], nodes: dict[int, list[int]], spec: ProbeSpec, repeats: int
) -> list[PairRow]:
    """Every step's pairs at once, the steps one after the other, all of it ``repeats`` times over
    (interleaved: a passing disturbance lands on different pairs, not on one pair's every reading)."""
    cfg, coll = section(spec, "isolation", IsolationConfig), section(spec, "collectives", CollectivesConfig)
    groups = [[sorted(nodes[a] + nodes[b]) for a, b in step] for step in steps]
    # every rank creates every group, in the same order, once
    mine = [ctx.subgroups(step_groups) if step_groups else None for step_groups in groups]
    readings: list[list[list[GroupFigure]]] = [[[] for _ in step] for step in steps]
    for repeat in range(repeats):
        for s, step in enumerate(steps):
            if not step:
                continue
            ctx.phase(f"step {s + 1} repeat {repeat + 1}")
            rows: list[RankMeasured] = []
            if mine[s] is not None:
                row = measure(ctx, cfg["op"], parse_size(cfg["size"]), coll, mine[s])
                rows.append({**row, "rank": ctx.rank})
            dist.barrier()  # the ranks that sat this step out wait here, so steps never overlap
            every = [row for per_rank in ctx.gather(rows) for row in per_rank]
            for i, ranks in enumerate(groups[s]):
                readings[s][i].append(figure(every, ranks))
    out: list[PairRow] = []
    for s, step in enumerate(steps):
        for (a, b), figs in zip(step, readings[s], strict=True):
            ordered = sorted(figs, key=lambda f: f["busbw_gbps"])
            middle = ordered[len(ordered) // 2]
            out.append(
                {
                    **middle,
                    "a": a,
                    "b": b,
                    "gbps": middle["busbw_gbps"],
                    "wrong": sum(f["wrong"] for f in figs),
                    "repeats_gbps": [f["busbw_gbps"] for f in figs],
                }
            )
    return out


def run(ctx: Ctx) -> RoundResult:
    cfg = section(ctx.spec, "isolation", IsolationConfig)
    rnd = cfg["round"]
    ranks = ctx.gather(identity(ctx))
    nodes = ranks_by_node(ranks, key="node")
    if len(nodes) != len({r["node_rank"] for r in ranks}):
        raise RuntimeError(f"nodes do not have distinct ranks: {sorted({(r['node'], r['host']) for r in ranks})}")
    out: RoundResult = {"round": rnd["number"], "kind": rnd["kind"], "hosts": {r["node"]: r["host"] for r in ranks}}
    if rnd["kind"] == "pairs":
        out["pairs"] = pair_steps(ctx, rnd["steps"], nodes, ctx.spec, rnd.get("repeats", 1))
        if "hint" in rnd:
            out["hint"] = rnd["hint"]
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
