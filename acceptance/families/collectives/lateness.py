"""Per-call spread of the collectives, and the rank that arrives late: who the others waited for.

A collective keeps its ranks in lock step: a call lasts on every rank until the last one arrives, so every
rank's call times are the same whichever rank is slow (a GPU that another process shares, a host core that
another task takes, a NIC that stalls), and a rank's p99 of them names nobody. What differs is who arrives
late. After each op's timed loop the sweep makes ``spread_iters`` blocking calls (each waited for before the
next is issued, as nccl-tests' ``-z 1``), each marked on the rank's own timeline right before and after it
(CUDA events on the rank's stream, the host clock on the CPU): e_r(i) is rank r's time in call i, g_r(i) its
time from the end of call i - 1 to the start of call i, its own way back into the next call. Where the op
ends on every rank together (``OPS[op].waits_for_all``), the end of a call is one moment on every rank, so
the rank that reached call i last is the one with the longest way back, and the others waited for it:

    lateness_r(i) = g_r(i) - min over ranks of g(i)

which needs no clock shared between ranks or nodes. The time inside a call cannot tell who was late: with
two ranks, one that arrived late and one stalled inside the call (its GPU taken by another process mid-way,
which lets its peer finish its own part first) leave the same difference between their times in the call,
and counting it as lateness named the healthy rank on a GPU machine (docs/measurements.md). A rank stands
out where its lateness p99 is above ``spread_ratio`` x the median of the other ranks' lateness p99s plus
``spread_floor_us``, and is named where it stands out in at least ``spread_min_share`` of the cases: a rank
against its peers of the same run, so the rule needs no measured reference.

Percentiles are nearest-rank, as nccl-tests' per-iteration report (``-I 1``: ``computeIterStats`` in
src/util.cu); the CV is the population standard deviation over the mean, as its ``cv`` column (a fraction here).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from typing_extensions import TypedDict

from acceptance.numbers import fmt
from acceptance.schema.collectives import OPS

P99 = 99


class RankSpread(TypedDict):
    """One rank's blocking calls at one op and size: its time in the calls, and how late it arrived."""

    median_us: float
    p99_us: float
    cv: float  # standard deviation / mean of its time in the calls
    lateness_p99_us: float
    lateness_mean_us: float


class Spread(TypedDict):
    """The spread pass of one op at one size: the calls each rank made, and each rank's figures (in rank order)."""

    op: str
    size: str  # as the profile spells it
    calls: int
    ranks: list[RankSpread]


class RankPlace(TypedDict):
    """Where a rank runs, as a late one is named: its node (the plugin's node rank), host, GPU and UUID."""

    rank: int
    node: int
    host: str
    gpu: int | None  # None on the CPU
    uuid: str | None


def applies(op: str, calls: int) -> bool:
    """Whether the sweep makes the spread pass for ``op``: an op whose calls end on every rank together, with
    calls asked for."""
    return calls > 0 and OPS[op].waits_for_all


def nearest_rank(values: Sequence[float], percent: int) -> float:
    """The ``percent`` percentile, nearest-rank, as nccl-tests' ``percentileIndex`` (src/util.cu): the sorted
    value at min(n - 1, ceil(n x percent / 100) - 1); p99 of 100 calls is the second largest, of 50 the largest."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, (len(ordered) * percent + 99) // 100 - 1)]


def cv(values: Sequence[float]) -> float:
    """Population standard deviation / mean (nccl-tests' ``stdev / avg``); 0 for a mean of 0."""
    mean = statistics.fmean(values)
    return statistics.pstdev(values, mean) / mean if mean > 0 else 0.0


def lateness(gaps: Sequence[Sequence[float]]) -> list[list[float]]:
    """Per rank and call, how much later than the first it got back into the call: g_r(i) - min over ranks of
    g(i) (``gaps[r][i]`` = g_r(i), every rank the same calls). The rank the others waited for came back last."""
    first = [min(call) for call in zip(*gaps, strict=True)]
    return [[mine - soonest for soonest, mine in zip(first, rank, strict=True)] for rank in gaps]


def spread(op: str, size: str, seconds: Sequence[Sequence[float]], gaps: Sequence[Sequence[float]]) -> Spread:
    """Every rank's figures of ``op`` at ``size`` from every rank's seconds in each blocking call
    (``seconds[r][i]``) and between two of them (``gaps[r][i]``: from the end of call i to the start of i + 1)."""
    late = lateness(gaps)
    ranks: list[RankSpread] = [
        {
            "median_us": statistics.median(mine) * 1e6,
            "p99_us": nearest_rank(mine, P99) * 1e6,
            "cv": cv(mine),
            "lateness_p99_us": nearest_rank(waited, P99) * 1e6 if waited else 0.0,
            "lateness_mean_us": statistics.fmean(waited) * 1e6 if waited else 0.0,
        }
        for mine, waited in zip(seconds, late, strict=True)
    ]
    return {"op": op, "size": size, "calls": len(seconds[0]) if seconds else 0, "ranks": ranks}


@dataclass(frozen=True)
class Late:
    """A rank that stood out at one op and size: its figures, the median of the others' lateness p99s, the bound."""

    rank: int
    op: str
    size: str
    figures: RankSpread
    peers_us: float
    bound_us: float


def stands_out(found: Spread, ratio: float, floor_us: float) -> list[Late]:
    """The ranks whose lateness p99 is above ``ratio`` x the median of the other ranks' plus ``floor_us``. The
    floor keeps microsecond noise at small sizes from naming a healthy rank; the ratio lets the others' own
    waits scale the bound where every rank waits long (a large message, a loaded host)."""
    ranks = found["ranks"]
    out = []
    for rank, mine in enumerate(ranks):
        others = [r["lateness_p99_us"] for i, r in enumerate(ranks) if i != rank]
        if not others:
            continue
        peers = statistics.median(others)
        bound = ratio * peers + floor_us
        if mine["lateness_p99_us"] > bound:
            out.append(Late(rank, found["op"], found["size"], mine, peers, bound))
    return out


def late_ranks(cases: Sequence[Spread], ratio: float, floor_us: float, share: float = 0.0) -> list[Late]:
    """Every (rank, op, size) that stood out over the cases, in the cases' order, of the ranks that stood out
    in at least ``share`` of the cases (one at least): a host stalls once in a while on any healthy rank, a
    rank held back by its core or its GPU is late case after case."""
    found = [late for case in cases for late in stands_out(case, ratio, floor_us)]
    least = max(1, math.ceil(share * len(cases) - 1e-9))
    counts = Counter(late.rank for late in found)
    return [late for late in found if counts[late.rank] >= least]


def worst(found: Spread) -> int:
    """The rank with the largest lateness p99 (the first of equals)."""
    return max(range(len(found["ranks"])), key=lambda r: found["ranks"][r]["lateness_p99_us"])


def place_text(rank: int, places: Sequence[RankPlace]) -> str:
    """``rank 3 (node 1: gpu-b GPU 3, GPU-3f2a...)``, ``rank 1 (node 0: host, cpu)``; the rank alone where the
    sweep recorded no places (a result from before they were recorded)."""
    place = next((p for p in places if p["rank"] == rank), None)
    if place is None:
        return f"rank {rank}"
    if place["gpu"] is None:
        return f"rank {rank} (node {place['node']}: {place['host']}, cpu)"
    uuid = f", {place['uuid']}" if place["uuid"] else ""
    return f"rank {rank} (node {place['node']}: {place['host']} GPU {place['gpu']}{uuid})"


def figures_text(mine: RankSpread) -> str:
    """``lateness p99 2,340 us (mean 812 us); its calls median 45.1 us, p99 2,400 us, CV 1.21``"""
    return (
        f"lateness p99 {fmt(mine['lateness_p99_us'])} us (mean {fmt(mine['lateness_mean_us'])} us); its calls "
        f"median {fmt(mine['median_us'])} us, p99 {fmt(mine['p99_us'])} us, CV {fmt(mine['cv'])}"
    )


def late_text(found: Sequence[Late], places: Sequence[RankPlace], ratio: float, floor_us: float) -> str:
    """One line per late rank naming it, then one per op and size where it stood out, with its figures."""
    lines = []
    for rank in dict.fromkeys(late.rank for late in found):
        mine = [late for late in found if late.rank == rank]
        lines.append(f"{place_text(rank, places)} arrived late at {len(mine)} op/size case(s):")
        lines += [
            f"  {late.op} {late.size}: {figures_text(late.figures)}; the other ranks' median lateness p99 "
            f"{fmt(late.peers_us)} us, bound {fmt(ratio)} x {fmt(late.peers_us)} + {fmt(floor_us)} = "
            f"{fmt(late.bound_us)} us"
            for late in mine
        ]
    return "\n".join(lines)
