"""Runs the isolation rounds (``acceptance.families.internode.isolation``) when a figure across nodes has failed.

Every node's pytest runs the same rounds in the same order: each round is one probe job over every
node, and what the next round is follows only from the results, which rank 0 broadcast to every node.
Each round is cached under its own key, so a second failing figure replays the same verdict at no cost.
Round 1 starts from the slowest rails the connectivity probe measured in this run, where it ran; the
round echoes that hint in its result, so a replay starts from the same one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from acceptance.families import connectivity
from acceptance.families.collectives import COLLECTIVES
from acceptance.families.connectivity import CONNECTIVITY
from acceptance.families.internode import INTERNODE
from acceptance.families.internode.isolation import Isolation, Pair, Round
from acceptance.run import worker_pool
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError

# all_reduce: the collective a cross-node figure is most often about, and its busbw compares across sizes
PAIR_OP = "all_reduce"
# the slowest rails handed to round 1: enough for a slow node (it is at both ends of some) or a slow path
HINTS = 3


def enabled(run: ClusterRun) -> bool:
    return run.placement.nodes > 1 and INTERNODE.section_of(run.profile.model).isolation


def isolate(run: ClusterRun) -> Isolation:
    """Run rounds until the verdict is in; a round that fails ends the search and is named in the message."""
    section = INTERNODE.section_of(run.profile.model)
    iso = Isolation(run.placement.nodes, section.slow_pair_fraction, section.mild_pair_fraction, hint=hint(run))
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
    started = any(p.key == "isolation-1" for p in run.evidence.doc.probes)
    return isolate(run) if started else None


def _record(run: ClusterRun, key: str) -> Mapping[str, Any] | None:
    """The result of this run's probe ``key``, where it ran and succeeded."""
    for p in run.evidence.doc.probes:
        if p.key == key and p.status == "ok" and p.result is not None:
            return p.result
    return None


def hint(run: ClusterRun) -> tuple[Pair, ...]:
    """Round 1's start: the hint an earlier round 1 of this run was given, else the node pairs of the
    slowest rails of this run's connectivity probe (slowest first), else none."""
    first = _record(run, "isolation-1")
    if first is not None:
        return tuple((int(a), int(b)) for a, b in first.get("hint", []))
    conn = _record(run, "connectivity")
    rails = cast(list[connectivity.Link], conn.get("rails", []) if conn is not None else [])
    found: list[Pair] = []
    for link in sorted(rails, key=connectivity.rate):
        pair = (int(link["src_node"]), int(link["dst_node"]))
        if pair[0] != pair[1] and pair not in found and pair[::-1] not in found:
            found.append(pair)
        if len(found) == HINTS:
            break
    return tuple(found)


def collective_culprit(run: ClusterRun) -> str:
    """Where a slow collective's culprit is to be found, in words: the nodes an isolation of this run named,
    the slowest links this run measured (the connectivity probe: inside nodes and the rails across them),
    or the families that measure them. Never "the slowest rank": in a ring every rank waits for the
    slowest link, so the rank that took longest says nothing about where the fault is."""
    said: list[str] = []
    first = _record(run, "isolation-1")
    if first is not None:
        found = isolate(run)  # replayed from its cached rounds
        said.append(found.message())
    conn = _record(run, "connectivity")
    if conn is not None:
        measured = cast(list[connectivity.Link], [*conn.get("p2p", []), *conn.get("rails", [])])
        if measured:
            said.append(f"slowest links this run measured: {connectivity.slowest(measured)}")
    if not said:
        said.append(
            "the connectivity family names the slowest GPU links"
            + (", the internode family's isolation rounds the node or path" if run.placement.nodes > 1 else "")
        )
    return "culprit: " + "; ".join(said)


def round_spec(run: ClusterRun, rnd: Round) -> dict[str, object]:
    model = run.profile.model
    conn, coll = CONNECTIVITY.section_of(model), COLLECTIVES.section_of(model)
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
