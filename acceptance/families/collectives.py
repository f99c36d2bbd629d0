"""The collectives' figures from measured times, the way nccl-tests computes them (one helper for the sweep
and the internode comparison), and the rule that names a rank whose calls are jittery.

nccl-tests' time (NVIDIA/nccl-tests 2.19.6, ``src/common.cu``, ``BenchTime``): after one untimed call and a
``Barrier``, a host timer (``src/timer.cc``: ``std::chrono::steady_clock``) starts; ``iters`` calls are
launched back to back with no synchronisation between them; ``completeColl`` waits for the stream; the time
per call is ``tim.elapsed() / (iters * agg_iters)``, then ``Allreduce(args, &deltaSec, average)`` takes the
mean over ranks (``-a 1``, the default). algbw = bytes / time and busbw = algbw x factor (``GetBw`` in
``src/<op>.cu``). With ``-I 1`` a CUDA event is recorded before each call and after the last, inside that
same timed loop, and each iteration's time is the span between two of them. ``-G`` (a CUDA graph of the
loop, replayed) is a different figure: the suite keeps one only as a labelled second figure, never gated.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, TypedDict

from pydantic import Field
from typing_extensions import NotRequired

from acceptance.families.gpu_users import ForeignSeen
from acceptance.families.transport import TransportRecord
from acceptance.numbers import spread
from acceptance.schema.bounds import Threshold, must_be_zero
from acceptance.schema.collectives import COLLECTIVE_OPS, OPS
from acceptance.schema.dtypes import DTYPE_NAMES
from acceptance.schema.family import GPU_ONLY, Family, Metric
from acceptance.schema.fields import PositiveInt, Size, Strict


class Collectives(Strict):
    ops: list[Literal[COLLECTIVE_OPS]] = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]  # type: ignore[valid-type]
    sizes: list[Size] = ["1M", "16M", "256M", "1G"]
    dtype: Literal[DTYPE_NAMES] = "bfloat16"  # type: ignore[valid-type]
    warmup_iters: Annotated[int, Field(ge=0)] = 5
    iters: PositiveInt = 20
    # the gated time is always nccl-tests' (a host clock around ``iters`` calls launched back to back);
    # cuda_graph: on GPUs the same calls are also replayed from a CUDA graph, a second figure (``graph_time_us``)
    # labelled as such and never gated; auto and eager: nccl-tests' figure alone
    timing: Literal["auto", "cuda_graph", "eager"] = "auto"
    check_data: bool = True


_COLL = "collectives.<op>.<busbw_gbps|time_us|wrong>@<size>"
# A rank whose p99 own time per call (``own_times``), in the sweep's typical row, is this many times the other
# ranks' median p99, or whose CV is this many points above theirs, is named. Ours, not a measured figure: a
# rank of a healthy collective sits at 1x the others (every call ends on all ranks together); 3x leaves room
# for the CPU runs' noise (two ranks sharing two cores with the test runner) and a GPU profile bounds it
# tighter from its own healthy runs (docs/measurements.md, "Per-call spread").
RANK_P99_RATIO_MAX = 3.0
RANK_CV_EXCESS_MAX = 0.5


def _p99_default(_section: Collectives) -> Threshold:
    return Threshold(max=RANK_P99_RATIO_MAX, source="built-in: a rank's p99 call at 3x the other ranks' median p99")


def _cv_default(_section: Collectives) -> Threshold:
    return Threshold(max=RANK_CV_EXCESS_MAX, source="built-in: a rank's CV 50 points above the other ranks' median")


def _ops(s: Collectives) -> Sequence[str]:
    return s.ops


def _sizes(s: Collectives) -> Sequence[str]:
    return s.sizes


_SWEEP = {"op": _ops, "size": _sizes}
COLLECTIVES = Family(
    "collectives",
    "collective bandwidth sweep inside the run, nccl-tests' way",
    Collectives,
    (
        Metric[Collectives](r"(?P<op>\w+)\.busbw_gbps@(?P<size>\w+)", _COLL, "higher", domains=_SWEEP),
        Metric[Collectives](r"(?P<op>\w+)\.time_us@(?P<size>\w+)", _COLL, "lower", domains=_SWEEP),
        Metric[Collectives](
            r"(?P<op>\w+)\.wrong@(?P<size>\w+)",
            _COLL,
            "lower",
            kind="correctness",
            domains=_SWEEP,
            builtin=must_be_zero,
        ),
        # the profile's op@size cases the sweep did not measure: each would otherwise go unjudged
        Metric[Collectives](
            r"(missing_cases)", "collectives.<figure>", "lower", kind="correctness", builtin=must_be_zero
        ),
        Metric[Collectives](r"(rank_p99_ratio)", "collectives.<figure>", "lower", floor=None, builtin=_p99_default),
        Metric[Collectives](
            r"(rank_cv_excess)", "collectives.<figure>", "lower", scale="points", floor=None, builtin=_cv_default
        ),
        Metric[Collectives](
            r"(transport_mismatches)",
            "collectives.<figure>",
            "lower",
            kind="correctness",
            devices=GPU_ONLY,
            builtin=must_be_zero,
        ),
    ),
    probes=("collectives",),
    in_worker=("collectives",),
    # timed on the host's clock, as nccl-tests times (``probes.collectives.timed_calls``): a job starting on
    # the host beside it would move its small sizes, so the training job does not start during it
    gpu_timed=False,
)


class CollectivesConfig(TypedDict):
    """The probe's ``collectives`` section: the profile's, or an isolation round's (no ops, no sizes)."""

    dtype: str
    timing: str  # auto, cuda_graph or eager
    warmup_iters: int
    iters: int
    check_data: NotRequired[bool]
    ops: NotRequired[list[str]]
    sizes: NotRequired[list[str]]


class RankSpread(TypedDict):
    """One rank's timed calls at one op and size, as nccl-tests' ``-I`` summarises an iteration series
    (``computeIterStats`` in ``src/util.cu``), of the rank's own time per call (``own_times``)."""

    rank: int
    host: str
    gpu: str  # the rank's device: cuda:N, or cpu
    median_us: float
    p99_us: float
    cv: float  # standard deviation / mean (0.3 = 30%)


class Figures(TypedDict):
    """nccl-tests' figures of one op at one size (``figures``)."""

    time_us: float
    time_us_max: float
    algbw_gbps: float
    busbw_gbps: float
    slowest_rank: int
    busbw_windows_gbps: list[float]
    window_spread: float
    launch_us: float  # host time per call to launch the calls (nccl-tests' -C cputime), mean over ranks
    ranks_spread: list[RankSpread]
    # on GPUs with ``timing: cuda_graph``: the same calls replayed from a CUDA graph; a labelled second
    # figure (nccl-tests' -G), never gated
    graph_time_us: NotRequired[float]
    graph_busbw_gbps: NotRequired[float]


class Timed(TypedDict):
    """One rank's timed loop (``probes.collectives.timed_calls``)."""

    elapsed: float  # host seconds per call over the whole loop, its end synchronised: nccl-tests' time
    launched: float  # host seconds per call until the last call was launched (nccl-tests' cputime)
    calls: list[float]  # each call: from the mark before it to the mark before the next (the last: its end)
    in_call: list[float]  # each call: from the mark before it to the mark right after it


class Measured(Timed):
    """One op at one size on one rank (``probes.collectives.measure``)."""

    op: str
    size: str  # as the profile spells it, canonical
    size_bytes: int  # asked for
    bytes: int  # moved (the parts rounded)
    count: int
    wrong: int
    timing: str  # how it was timed (eager, or eager and a CUDA graph, or why the graph failed)
    host: str
    gpu: str
    graph_seconds: NotRequired[float]  # per call, replayed from a CUDA graph


class CollectiveRow(Figures):
    """One op at one size over every rank: a row of the sweep's result (``Figures`` and what was asked)."""

    op: str
    size: str
    size_bytes: int
    bytes: int
    count: int
    wrong: int  # summed over ranks
    timing: str
    same_as: NotRequired[str]  # the earlier size whose call this size's rounding gave again: one row


class RankMeasured(Measured):
    """A rank's measurement in one group: a pair of an isolation round, a scope of the internode probe."""

    rank: int


class GroupFigure(Figures):
    """One process group's figure for one op and size (``probes.internode.figure``)."""

    ranks: int
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


def nccl_percentile(values: Sequence[float], percentile: int) -> float:
    """nccl-tests' nearest-rank percentile (``percentileIndex`` in ``src/util.cu``): of 20 calls, p99 is the
    slowest."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered[min(n - 1, (n * percentile + 99) // 100 - 1)]


def iteration_stats(values: Sequence[float]) -> tuple[float, float, float]:
    """Median, p99 and CV of a series as nccl-tests' ``computeIterStats`` (``src/util.cu``) computes them:
    p50 is ``sorted[n / 2]``, the standard deviation the population's (divided by n)."""
    ordered = sorted(values)
    mean = statistics.fmean(ordered)
    cv = statistics.pstdev(ordered, mean) / mean if mean > 0 else 0.0
    return ordered[len(ordered) // 2], nccl_percentile(ordered, 99), cv


def own_times(timed: Sequence[Timed]) -> list[list[float]]:
    """Each rank's own time per call: the call's time on the rank (from the mark before it to the mark before
    the next, nccl-tests' ``-I`` iteration) less what it waited inside the call for the last rank to arrive.

    A collective ends on every rank together, so a rank that comes late to a call (its CPU core shared, its
    GPU busy with another process) lengthens every rank's iteration alike and nccl-tests' series cannot say
    which rank it was. Inside the call the ranks that came early wait for it: the rank that spent the least
    time inside call i came last, and the others' excess over that least time is their wait. Taking it out
    leaves the delay on the rank that caused it, and a steady set of ranks with equal series."""
    first = [min(in_call) for in_call in zip(*(t["in_call"] for t in timed), strict=True)]
    return [
        [call - (inside - least) for call, inside, least in zip(t["calls"], t["in_call"], first, strict=True)]
        for t in timed
    ]


def figures(op: str, nbytes: int, timed: Sequence[Timed], ranks: int, where: Sequence[tuple[str, str]] = ()) -> Figures:
    """nccl-tests' figures from each rank's timed loop (``probes.collectives.timed_calls``).

    A rank's time per call is its host-timed loop over the calls (nccl-tests' ``deltaSec``); the time is the
    mean over ranks (nccl-tests' default ``-a 1``), algbw = bytes / time (GB = 1e9 B), busbw = algbw x the
    op's factor for ``ranks``. The slowest rank's time is kept beside the mean, and which rank it was (index
    into ``timed``). The calls cut into windows (``windows.split``; each window's time the mean over ranks)
    give a busbw per window and their spread, (max - min) / median: how steady the figure was. Per rank, the
    median, p99 and CV of its own time per call (``own_times``); ``where`` gives each rank's host and GPU."""
    per_rank = [t["elapsed"] for t in timed]
    mean = statistics.fmean(per_rank)
    factor = OPS[op].busbw_factor(ranks)
    slowest = max(range(len(per_rank)), key=per_rank.__getitem__)
    busbw_windows = [nbytes / statistics.fmean(w) / 1e9 * factor for w in _windows([t["calls"] for t in timed])]
    spreads: list[RankSpread] = []
    for i, own in enumerate(own_times(timed)):
        median, p99, cv = iteration_stats(own)
        host, gpu = where[i] if i < len(where) else ("", "")
        spreads.append({"rank": i, "host": host, "gpu": gpu, "median_us": median * 1e6, "p99_us": p99 * 1e6, "cv": cv})
    return {
        "time_us": mean * 1e6,
        "time_us_max": per_rank[slowest] * 1e6,
        "algbw_gbps": nbytes / mean / 1e9,
        "busbw_gbps": nbytes / mean / 1e9 * factor,
        "slowest_rank": slowest,
        "busbw_windows_gbps": busbw_windows,
        "window_spread": spread(busbw_windows),
        "launch_us": statistics.fmean(t["launched"] for t in timed) * 1e6,
        "ranks_spread": spreads,
    }


WINDOWS = 5  # the calls' windows for the figure's steadiness (as ``probes.windows``)


def _windows(calls: Sequence[Sequence[float]]) -> list[list[float]]:
    """Per window of up to WINDOWS near-equal runs of calls, each rank's seconds per call in it."""
    n = min(len(c) for c in calls)
    count = max(1, min(WINDOWS, n))
    bounds = [0]
    for i in range(count):
        bounds.append(bounds[-1] + n // count + (1 if i < n % count else 0))
    return [[statistics.fmean(c[a:b]) for c in calls] for a, b in itertools.pairwise(bounds)]


@dataclass(frozen=True)
class Standout:
    """The rank whose calls stand out most from the other ranks', over a sweep's rows (``standout``)."""

    rank: int
    host: str
    gpu: str
    p99_ratio: float  # its p99 over the other ranks' median p99, in its typical row (the median over rows)
    cv_excess: float  # its CV less the other ranks' median CV, in its typical row
    worst: str  # the row where its p99 stood out most, in words
    rows: int  # rows judged


def standout(rows: Sequence[Figures], labels: Sequence[str] = ()) -> Standout | None:
    """The rank whose p99 own time per call or CV stands out most from the other ranks' (their median),
    taken over the sweep's rows: each rank's median over rows of its p99 ratio and of its CV excess.

    The median over rows, not the worst row: a rank slowed by its GPU, NIC or CPU core is slow at most sizes,
    while one hiccup of the host lands in one row of one rank, once (the p99 of 20 calls is their slowest).
    None with fewer than two ranks or no row. ``labels``: each row in words (``op size``)."""
    usable = [(i, r["ranks_spread"]) for i, r in enumerate(rows) if len(r.get("ranks_spread", [])) >= 2]
    if not usable:
        return None
    ranks = min(len(spreads) for _, spreads in usable)
    ratios: list[list[float]] = [[] for _ in range(ranks)]
    excess: list[list[float]] = [[] for _ in range(ranks)]
    worst: list[tuple[float, int]] = [(0.0, 0)] * ranks
    for row, spreads in usable:
        for r in range(ranks):
            others = [s for j, s in enumerate(spreads[:ranks]) if j != r]
            typical = statistics.median(s["p99_us"] for s in others)
            ratio = spreads[r]["p99_us"] / typical if typical > 0 else 1.0
            ratios[r].append(ratio)
            excess[r].append(spreads[r]["cv"] - statistics.median(s["cv"] for s in others))
            worst[r] = max(worst[r], (ratio, row))
    p99 = [statistics.median(x) for x in ratios]
    cv = [statistics.median(x) for x in excess]
    # the rank that stands out most by either figure, each taken against its own bound's default
    pick = max(range(ranks), key=lambda r: max(p99[r] / RANK_P99_RATIO_MAX, cv[r] / RANK_CV_EXCESS_MAX))
    ratio, row = worst[pick]
    spread_of = usable[[i for i, _ in usable].index(row)][1][pick]
    label = labels[row] if row < len(labels) else f"row {row}"
    return Standout(
        rank=pick,
        host=spread_of["host"],
        gpu=spread_of["gpu"],
        p99_ratio=p99[pick],
        cv_excess=cv[pick],
        worst=f"{label}: p99 {spread_of['p99_us']:.1f} us, {ratio:.2f}x the other ranks' median p99",
        rows=len(usable),
    )
