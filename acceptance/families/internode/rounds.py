"""The isolation's rounds as the run drives them (``acceptance.run.isolation_rounds``): what each round's job
measures, where round 1 starts, and what a slow collective says of its culprit.

Each round is one probe job over every node, and what the next round is follows only from the results, which
rank 0 broadcast to every node. Round 1 starts from the slowest rails the connectivity probe measured in this
run, where it ran; the round echoes that hint in its result, so a replay starts from the same one.
"""

from __future__ import annotations

from typing import cast

from acceptance.families import connectivity
from acceptance.families.collectives import COLLECTIVES
from acceptance.families.connectivity import CONNECTIVITY
from acceptance.families.internode.isolation import Isolation, Pair, Round
from acceptance.schema.family import Records, RunRound, Search

# all_reduce: the collective a cross-node figure is most often about, and its busbw compares across sizes
PAIR_OP = "all_reduce"
# the slowest rails handed to round 1: enough for a slow node (it is at both ends of some) or a slow path
HINTS = 3
PROBE = "isolation"  # the probe each round runs
FIRST = f"{PROBE}-1"  # round 1's key: an isolation of this run started


def isolate(iso: Isolation, model: object, run_round: RunRound) -> Isolation:
    """Rounds until the verdict is in; a round that fails ends the search and is named in the message."""
    while (rnd := iso.next_round()) is not None:
        found = run_round(round_spec(model, rnd), f"{PROBE}-{rnd.number}")
        if isinstance(found, str):
            iso.fail(rnd, found)
            break
        iso.record(rnd, found)
    return iso


def hint(records: Records) -> tuple[Pair, ...]:
    """Round 1's start: the hint an earlier round 1 of this run was given, else the node pairs of the
    slowest rails of this run's connectivity probe (slowest first), else none."""
    first = records(FIRST)
    if first is not None:
        return tuple((int(a), int(b)) for a, b in first.get("hint", []))
    conn = records(CONNECTIVITY.name)
    rails = cast(list[connectivity.Link], conn.get("rails", []) if conn is not None else [])
    found: list[Pair] = []
    for link in sorted(rails, key=connectivity.rate):
        pair = (int(link["src_node"]), int(link["dst_node"]))
        if pair[0] != pair[1] and pair not in found and pair[::-1] not in found:
            found.append(pair)
        if len(found) == HINTS:
            break
    return tuple(found)


def culprit(records: Records, replayed: Search | None, nodes: int) -> str:
    """Where a slow collective's culprit is to be found, in words: the nodes an isolation of this run named
    (``replayed``), the slowest links this run measured (the connectivity probe: inside nodes and the rails
    across them), or the families that measure them. Never "the slowest rank": in a ring every rank waits for
    the slowest link, so the rank that took longest says nothing about where the fault is."""
    said: list[str] = [replayed.message()] if replayed is not None else []
    conn = records(CONNECTIVITY.name)
    if conn is not None:
        measured = cast(list[connectivity.Link], [*conn.get("p2p", []), *conn.get("rails", [])])
        if measured:
            said.append(f"slowest links this run measured: {connectivity.slowest(measured)}")
    if not said:
        said.append(
            "the connectivity family names the slowest GPU links"
            + (", the internode family's isolation rounds the node or path" if nodes > 1 else "")
        )
    return "culprit: " + "; ".join(said)


def round_spec(model: object, rnd: Round) -> dict[str, object]:
    """A round's sections of the isolation probe's spec: the links' own size and count (small enough that a
    throttled pair still finishes in seconds), timed as the collectives are."""
    conn, coll = CONNECTIVITY.section_of(model), COLLECTIVES.section_of(model)
    return {
        "isolation": {"round": rnd.spec(), "op": PAIR_OP, "size": conn.p2p_size, "iters": conn.p2p_iters},
        "collectives": {
            "dtype": coll.dtype,
            "timing": coll.timing,
            "warmup_iters": 1,
            "iters": conn.p2p_iters,
            "check_data": coll.check_data,
        },
    }
