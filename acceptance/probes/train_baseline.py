"""The scaling baseline as a part of the training job: the scaling strategy again, on a process group of the
baseline's ranks, the first ``ranks_per_node`` ranks of every node, each node on its own (one GPU, or one
node: what a job of that size per node would measure). The other ranks wait in the part's teardown.

It saves the baseline a torchrun job of its own: start-up, imports, rendezvous and the first compilation
(the layers' compiled graphs are cached in this process by then).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from acceptance.families.training import BASELINE_PART, BaselineSpec, StrategyResult
from acceptance.probes.rank import Ctx, section

# one_strategy(ctx, name, store, part, within): see acceptance.probes.training
OneStrategy = Callable[[Ctx, str, Any, str, "Ctx | None"], StrategyResult]


def node_group(ctx: Ctx, ranks_per_node: int) -> Ctx | None:
    """This rank's place in its node's baseline group, or None where it is not in one.

    torch.distributed.new_group must be called by every rank for every group, in the same order, so each
    rank creates every node's group (``Ctx.group``: released with the probe) and keeps its own."""
    places = ctx.gather((ctx.node_rank, ctx.local_rank, ctx.rank))
    mine = None
    for node in sorted({n for n, _, _ in places}):
        ranks = sorted(r for n, local, r in places if n == node and local < ranks_per_node)
        group = ctx.group(ranks)
        if ctx.rank in ranks:
            mine = dataclasses.replace(ctx, rank=ranks.index(ctx.rank), world_size=len(ranks), within=group)
    return mine


def run_baseline(ctx: Ctx, store: Any, one_strategy: OneStrategy) -> StrategyResult:
    """Every node's baseline figures (``by_node``, keyed by node rank), node 0's at the top level, or the
    part's error."""
    spec = section(ctx.spec, "baseline", BaselineSpec)
    within = node_group(ctx, int(spec["ranks_per_node"]))
    out = one_strategy(ctx, spec["strategy"], store, BASELINE_PART, within)
    leader = within is not None and within.rank == 0
    found = ctx.gather((ctx.node_rank, out) if leader else None)
    if out.get("error"):  # every rank agreed on it in the teardown
        return out
    by_node = {str(node): figures for node, figures in (f for f in found if f is not None)}
    return {**by_node["0"], "by_node": by_node}
