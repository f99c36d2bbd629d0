"""Runs the isolation rounds (``acceptance.families.isolation``) when a figure across nodes has failed.

Every node's pytest runs the same rounds in the same order: each round is one probe job over every
node, and what the next round is follows only from the results, which rank 0 broadcast to every node.
Each round is cached under its own key, so a second failing figure replays the same verdict at no cost.
"""

from __future__ import annotations

from acceptance.families.isolation import Isolation, Round
from acceptance.run import worker_pool
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError

# all_reduce: the collective a cross-node figure is most often about, and its busbw compares across sizes
PAIR_OP = "all_reduce"


def enabled(run: ClusterRun) -> bool:
    return run.placement.nodes > 1 and run.profile.model.internode.isolation


def isolate(run: ClusterRun) -> Isolation:
    """Run rounds until the verdict is in; a round that fails ends the search and is named in the message."""
    iso = Isolation(run.placement.nodes, run.profile.model.internode.slow_pair_fraction)
    while (rnd := iso.next_round()) is not None:
        try:
            result = run.probe("isolation", round_spec(run, rnd), key=f"isolation-{rnd.number}", env=node_env(run))
        except ProbeError as exc:
            iso.fail(rnd, str(exc))
            break
        iso.record(rnd, result)
    return iso


def earlier(run: ClusterRun) -> Isolation | None:
    """The isolation an earlier figure of this session started, replayed from its cached rounds; None if none ran."""
    started = any(p.get("key") == "isolation-1" for p in run.evidence.data["probes"])
    return isolate(run) if started else None


def round_spec(run: ClusterRun, rnd: Round) -> dict[str, object]:
    model = run.profile.model
    conn, coll = model.connectivity, model.collectives
    spec: dict[str, object] = dict(run.spec("isolation"))
    # the links' own size and count: small enough that a throttled pair still finishes in seconds
    spec["isolation"] = {"round": rnd.spec(), "op": PAIR_OP, "size": conn.p2p_size, "iters": conn.p2p_iters}
    spec["collectives"] = {
        "dtype": coll.dtype,
        "timing": coll.timing,
        "warmup_iters": 1,
        "iters": conn.p2p_iters,
        "check_data": coll.check_data,
    }
    return spec


def node_env(run: ClusterRun) -> dict[str, str]:
    """One pytest per node: each hands its own rank to its ranks (``acceptance.run.worker_pool.node_env``)."""
    return worker_pool.node_env(run.topology, run.placement)
