"""The collectives' figures from measured times, the way nccl-tests computes them (one helper for the sweep
and the internode comparison); the rank the others waited for in the sweep's spread pass is ``lateness``'s."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, field_validator
from typing_extensions import NotRequired, TypedDict

from acceptance.families.collectives import lateness
from acceptance.families.collectives.floors import floors
from acceptance.families.collectives.initial import INITIAL
from acceptance.families.collectives.lateness import RankPlace, Spread
from acceptance.families.collectives.noise import noise
from acceptance.families.collectives.report import REPORT
from acceptance.families.collectives.timing import TimingAsked, calls_nccl
from acceptance.families.gpu_users import ForeignSeen
from acceptance.families.transport import TransportRecord
from acceptance.numbers import spread
from acceptance.schema.bounds import Threshold
from acceptance.schema.collectives import COLLECTIVE_OPS, OPS
from acceptance.schema.dtypes import DTYPE_NAMES
from acceptance.schema.family import GPU_ONLY, Behaviour, Device, Family, Shapes
from acceptance.schema.fields import PositiveInt, Size, Strict
from acceptance.schema.sizes import parse_size
from acceptance.schema.toolchain import Need

# Below 1 MiB a collective is bound by its launch and NCCL's latency protocol (LL), not by its links: on 2x
# H200 nccl-tests' all_reduce took 21 us a call at 1 MiB and ~10 us at 64 B (REFERENCE.md; docs/measurements.md)
LATENCY_BELOW = parse_size("1M")


class Collectives(Strict):
    ops: list[Literal[COLLECTIVE_OPS]] = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]  # type: ignore[valid-type]
    sizes: list[Size] = ["1M", "16M", "256M", "1G"]
    dtype: Literal[DTYPE_NAMES] = "bfloat16"  # type: ignore[valid-type]
    warmup_iters: Annotated[int, Field(ge=0)] = 5
    iters: PositiveInt = 20
    timing: TimingAsked = "auto"  # how the sweep is timed: ``timing``'s modes, auto picking one
    # a host-timed loop lasts at least this long (more calls than ``iters`` where a call takes microseconds):
    # a small message's time is then the pace of many calls, not the loop's start and its window marks,
    # which cost a few microseconds each (measured on 2x H200: 13.5 us a call over 20 calls, 10.7 over 200).
    # The start costs ~100 us once (the ranks leave the line-up at different moments): on a cold 4x H200 a
    # loop of 2 ms read 13-20 us a call at 64 B, its first window 1.2-1.8x slower than the others, where
    # loops of 200 calls after 20 warm-up calls read 7-10 us. 20 ms makes it 0.5%; a size whose calls
    # already last that long is unchanged, so the sweep grows by at most 20 ms per op and small size.
    min_timed_s: Annotated[float, Field(ge=0, le=10)] = 0.02
    check_data: bool = True
    # The spread pass (``collectives.lateness``), after the sweep, which it leaves as it was: this many
    # blocking calls, each marked on the rank's own timeline, for the ops whose calls end on every rank
    # together, at the sizes of ``spread_sizes`` (its own: a profile's sweep may start at 256M, where a rule
    # over a handful of cases would name a rank for one stall); 0: none. 100 calls give 99 ways back into a
    # call, whose nearest-rank p99 is the largest: one stall makes a case stand out, and what keeps a healthy
    # rank's lone stalls from naming it is ``spread_min_share`` (a quarter of the cases). A blocking call up to
    # 64 MiB takes tens of microseconds to a few milliseconds on GPUs (the pass took 0.22 s of a 2x H200 sweep)
    spread_iters: Annotated[int, Field(ge=0, le=10000)] = 100
    spread_sizes: list[Size] = ["1M", "4M", "16M", "64M"]
    # A rank stands out (``collectives.late_ranks``) where its lateness p99 is above spread_ratio x the
    # median of the other ranks' plus spread_floor_us. The slowdowns the rule is for are late by milliseconds
    # (a host core shared under Linux's scheduler: 4.0-12.1 ms on 2x H200), while a healthy rank comes back
    # into a call tens of microseconds after its peers (11-88 us there): 4x the peers and 100 us above them.
    # Measured on one node of 2x H200 only: a cluster of several nodes, or one joined by sockets, is not
    spread_ratio: Annotated[float, Field(ge=1)] = 4.0
    spread_floor_us: Annotated[float, Field(ge=0)] = 100.0
    # ... in at least this share of the pass's op/size cases. Measured on 2x H200 (docs/measurements.md,
    # "The rank the others waited for"): a healthy rank's host stalls past that bound now and then (a
    # millisecond, in 1-2 of 16 cases in four runs of five), a rank whose core two busy loops share in 14 of 16
    spread_min_share: Annotated[float, Field(ge=0, le=1)] = 0.25

    @field_validator("spread_iters")
    @classmethod
    def _a_way_back(cls, calls: int) -> int:
        if calls == 1:
            raise ValueError("spread_iters is 0 (no pass) or at least 2: one call has no way back into another")
        return calls

    @field_validator("spread_sizes")
    @classmethod
    def _each_once(cls, sizes: list[str]) -> list[str]:
        twice = sorted({s for s in sizes if sizes.count(s) > 1})
        if twice:  # a case counted twice would weigh twice in spread_min_share
            raise ValueError(f"spread_sizes names {', '.join(twice)} more than once")
        return sizes


_COLL = "collectives.<op>.<busbw_gbps|time_us|wrong>@<size>"


def _ops(s: Collectives) -> Sequence[str]:
    return s.ops


def _sizes(s: Collectives) -> Sequence[str]:
    return s.sizes


def latency_sizes(s: Collectives) -> list[str]:
    """the sweep's sizes below 1M, where latency_us is a figure (LATENCY_BELOW)"""
    return [size for size in s.sizes if parse_size(size) < LATENCY_BELOW]


def spread_cases(s: Collectives) -> list[tuple[str, str]]:
    """The op and size cases the spread pass measures (``lateness.applies``)."""
    return [(op, size) for op in s.ops for size in s.spread_sizes if lateness.applies(op, s.spread_iters)]


def _spread_ops(s: Collectives) -> Sequence[str]:
    return list(dict.fromkeys(op for op, _ in spread_cases(s)))


def _spread_sizes(s: Collectives) -> Sequence[str]:
    return list(dict.fromkeys(size for _, size in spread_cases(s)))


def _late_bound(s: Collectives) -> Threshold:
    return Threshold(
        eq=0,
        source=f"a rank's lateness p99 above collectives.spread_ratio {s.spread_ratio:g} x the other ranks' "
        f"median + spread_floor_us {s.spread_floor_us:g}, in at least spread_min_share {s.spread_min_share:g} "
        "of the cases",
    )


# acceptance/probes/nccl_loop.py: $CC, else cc; without it the calls are issued from Python, and labelled so
NCCL_LOOP = Need("collectives", "the collectives' C loop ({setting}) is built", "CC", ("cc",),
                 "acceptance/probes/nccl_loop.py", stops=False)  # fmt: skip


def _builds_with(s: Collectives, device: Device) -> list[tuple[Need, str]]:
    """The C loop's compiler where the sweeps call libnccl on GPUs."""
    return [(NCCL_LOOP, f"collectives.timing: {s.timing}")] if device == "cuda" and calls_nccl(s.timing) else []


_SWEEP = Shapes[Collectives](_COLL, {"op": _ops, "size": _sizes})
_LATENCY = Shapes[Collectives]("collectives.<op>.latency_us@<size>", {"op": _ops, "size": latency_sizes})
_SPREAD = Shapes[Collectives]("collectives.<op>.lateness_p99_us@<size>", {"op": _spread_ops, "size": _spread_sizes})
_RUN = Shapes[Collectives]("collectives.<figure>")
COLLECTIVES = Family(
    "collectives",
    "collective bandwidth sweep inside the run, nccl-tests' way",
    Collectives,
    (
        _SWEEP.figure(r"(?P<op>\w+)\.busbw_gbps@(?P<size>\w+)", "higher"),
        _SWEEP.figure(r"(?P<op>\w+)\.time_us@(?P<size>\w+)", "lower"),
        # a small message's latency: the median window's time per call (``figures``), which one stall of the
        # host does not move; nccl-tests' time (the whole loop's) carries such a stall whole
        _LATENCY.figure(r"(?P<op>\w+)\.latency_us@(?P<size>\w+)", "lower"),
        _SWEEP.count(r"(?P<op>\w+)\.wrong@(?P<size>\w+)"),
        # the worst rank's lateness p99 in the spread pass: information (the gate is late_ranks, a rank against
        # its peers), judged by a bound alone where a profile sets one (a run's own wait noise is no baseline)
        _SPREAD.figure(r"(?P<op>\w+)\.lateness_p99_us@(?P<size>\w+)", "lower", scale="bound"),
        # the ranks that arrived late in the spread pass. Not a node's own figure: a late rank's cause may be its
        # node's (a jittery core or NIC) or a task another job or daemon runs beside it, so across nodes the
        # drain list marks its node for review rather than drains it
        _RUN.figure(r"(late_ranks)", "lower", scale="bound", builtin=_late_bound),
        # the profile's op@size cases the sweep did not measure: each would otherwise go unjudged
        _RUN.count(r"(missing_cases)"),
        _RUN.count(r"(transport_mismatches)", devices=GPU_ONLY),
    ),
    probes=("collectives",),
    in_worker=("collectives",),
    gpu_timed=True,
    host_loops=True,
    behaviour=Behaviour(builds_with=_builds_with, noise=noise, floors=floors, report=REPORT, initial=INITIAL),
)


class CollectivesConfig(TypedDict):
    """The probe's ``collectives`` section: the profile's, or an isolation round's (no ops, no sizes)."""

    dtype: str
    timing: TimingAsked
    warmup_iters: int
    iters: int
    check_data: NotRequired[bool]
    min_timed_s: NotRequired[float]  # absent: ``iters`` calls, whatever they last (an isolation round's)
    ops: NotRequired[list[str]]
    sizes: NotRequired[list[str]]
    # the spread pass's (the sweep's alone: an isolation round and the internode scopes make none)
    spread_iters: NotRequired[int]
    spread_sizes: NotRequired[list[str]]
    spread_ratio: NotRequired[float]
    spread_floor_us: NotRequired[float]
    spread_min_share: NotRequired[float]


class Figures(TypedDict):
    """nccl-tests' figures of one op at one size (``figures``)."""

    time_us: float
    time_us_max: float
    latency_us: float  # the median window's time per call, each window's the mean over ranks
    algbw_gbps: float
    busbw_gbps: float
    slowest_rank: int
    busbw_windows_gbps: list[float]
    window_spread: float


class Measured(TypedDict):
    """One op at one size on one rank (``probes.collectives.measure``)."""

    op: str
    size: str  # as the profile spells it, canonical
    size_bytes: int  # asked for
    bytes: int  # moved (the parts rounded)
    count: int
    seconds: list[float]  # per call, in each timed window
    # per call, the whole timed loop on the host's clock to the device's end: nccl-tests' time (host-timed
    # loops: nccl, eager); absent for a CUDA graph, whose figure is its median window
    loop_seconds: NotRequired[float]
    wrong: int
    timing: str  # how it was timed: ``timing.Timing.label``, its mode and the reason for it in words


class CollectiveRow(Figures):
    """One op at one size over every rank: a row of the sweep's result (``Figures`` and what was asked)."""

    op: str
    size: str
    size_bytes: int
    bytes: int
    count: int
    wrong: int  # summed over ranks
    timing: str


class RankMeasured(Measured):
    """A rank's measurement in one group: a pair of an isolation round, a scope of the internode probe."""

    rank: int


class GroupFigure(TypedDict):
    """One process group's figure for one op and size (``probes.internode.figure``)."""

    ranks: int
    time_us: float
    time_us_max: float
    latency_us: float
    algbw_gbps: float
    busbw_gbps: float
    slowest_rank: int  # a global rank
    busbw_windows_gbps: list[float]
    window_spread: float
    wrong: int
    timing: str


class SweepResult(TypedDict):
    world_size: int
    dtype: str
    backend: str
    rows: list[CollectiveRow]
    nccl_version: str | None
    nccl_algo: str
    nccl_env: dict[str, str]
    # per rank, processes not of this run seen on its GPU during the sweep: the cause of a slow collective
    foreign: NotRequired[dict[str, list[ForeignSeen]]]
    transport: NotRequired[TransportRecord]  # NotRequired: evidence from before it was recorded
    # the spread pass's figures per op and size where it made one, and every rank's node, host and GPU, as a
    # late rank is named (NotRequired: evidence from before the pass)
    spread: NotRequired[list[Spread]]
    places: NotRequired[list[RankPlace]]


def figures(
    op: str, nbytes: int, seconds: Sequence[Sequence[float]], ranks: int, loops: Sequence[float | None] = ()
) -> Figures:
    """nccl-tests' figures from each rank's seconds per call in each timed window (``probes.windows``) and,
    where the host timed the loop, its whole loop's seconds per call (``loops``).

    A rank's time is its whole loop's per call (nccl-tests' ``BenchTime``), else its median window's (a CUDA
    graph, timed on the device between windows); the time is the mean over ranks (nccl-tests' default ``-a 1``),
    algbw = bytes / time (GB = 1e9 B), busbw = algbw x the op's factor for ``ranks``. The slowest rank's time
    is kept beside the mean, and which rank it was (index into ``seconds``). Each window's busbw (its time
    the mean over ranks: a collective keeps them in step) and their spread, (max - min) / median, say how
    steady the figure was. ``latency_us`` is the median window's time: a small message's latency that one
    stall of the host (~17 ms in a 20 ms loop of 64 B calls on a healthy 4x H200: 28.6 us a call for the
    loop, 13.9 for its median window) leaves alone, where nccl-tests' time carries it whole."""
    whole = list(loops) if loops and all(t is not None for t in loops) else [None] * len(seconds)
    per_rank = [t if t is not None else statistics.median(w) for w, t in zip(seconds, whole, strict=True)]
    mean = statistics.fmean(per_rank)
    factor = OPS[op].busbw_factor(ranks)
    slowest = max(range(len(per_rank)), key=per_rank.__getitem__)
    window_times = [statistics.fmean(t) for t in zip(*seconds, strict=True)]
    busbw_windows = [nbytes / t / 1e9 * factor for t in window_times]
    return {
        "time_us": mean * 1e6,
        "time_us_max": per_rank[slowest] * 1e6,
        "latency_us": statistics.median(window_times) * 1e6,
        "algbw_gbps": nbytes / mean / 1e9,
        "busbw_gbps": nbytes / mean / 1e9 * factor,
        "slowest_rank": slowest,
        "busbw_windows_gbps": busbw_windows,
        "window_spread": spread(busbw_windows),
    }
