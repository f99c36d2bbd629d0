"""Timed windows: a timed loop cut into up to WINDOWS windows of near-equal calls, one mark between two.

A figure is then its median window's, so one window disturbed by something else on the host (another
tenant's burst, a page-cache flush) cannot move it and three must; the windows' figures go into the
evidence beside it, and their spread into the checks' messages. The loop itself is unchanged: no
synchronisation inside it, only a mark (a CUDA event on a GPU, the host clock on the CPU) between two
windows. ``blocking_calls`` marks each call of a blocking loop the same way (the collectives' spread pass).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from acceptance.probes.rank import Ctx

WINDOWS = 5


def split(iters: int) -> list[int]:
    """``iters`` calls as up to WINDOWS windows whose sizes differ by one at most (10 -> 2 x 5, 7 -> 2, 2, 1, 1, 1)."""
    count = max(1, min(WINDOWS, iters))
    return [iters // count + (1 if i < iters % count else 0) for i in range(count)]


Burst = Callable[[int], int | None]


def repeat(fn: Callable[[], object]) -> Burst:
    """A burst of ``fn``: called ``n`` times back to back from Python; the last int result other than 0, if any.
    A call that returns an int is a C library's result code, checked by the loop rather than by a wrapper
    around each call (kept as lean as nccl-tests' loop); anything else (a tensor) is no result code."""

    def burst(n: int) -> int | None:
        failed = None
        for _ in range(n):
            if type(code := fn()) is int and code:
                failed = code
        return failed

    return burst


def timed_windows(ctx: Ctx, fn: Callable[[], object], calls: list[int]) -> list[float]:
    """Seconds per call in each window of back-to-back calls, one loop: CUDA events between windows on a GPU,
    the host clock on the CPU."""
    return timed_loop(ctx, repeat(fn), calls)[0]


def timed_loop(ctx: Ctx, burst: Burst, calls: list[int]) -> tuple[list[float], float]:
    """``timed_windows`` of a burst (``repeat``, or a C loop's: ``probes.nccl_loop``), and the whole loop's
    seconds per call on the host's clock from before the first call to the end of the last (the device
    synchronised): nccl-tests' time (``BenchTime`` in src/common.cu: a timer started before the loop, read
    after ``cudaStreamSynchronize``, divided by the calls). A burst's result code other than 0 fails the
    loop."""
    if ctx.is_cuda:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(len(calls) + 1)]
        start = time.perf_counter()
        failed = _marked_loop(burst, calls, marks)
        torch.cuda.current_stream(ctx.device).synchronize()
        whole = time.perf_counter() - start
        _raise_on(failed)
        return _per_call(marks, calls), whole / sum(calls)
    stamps, failed = [time.perf_counter()], None
    for n in calls:
        failed = burst(n) or failed
        stamps.append(time.perf_counter())
    _raise_on(failed)
    per_window = [(b - a) / n for (a, b), n in zip(itertools.pairwise(stamps), calls, strict=True)]
    return per_window, (stamps[-1] - stamps[0]) / sum(calls)


@dataclass(frozen=True)
class Blocking:
    """A blocking loop on one rank's own timeline: its seconds in each call, and from the end of each call to
    the start of the next (``calls - 1`` of them)."""

    seconds: list[float]
    gaps: list[float]


def blocking_calls(ctx: Ctx, fn: Callable[[], object], calls: int) -> Blocking:
    """``calls`` calls of ``fn``, each waited for before the next is issued (nccl-tests' ``-z 1``: the stream is
    never fed ahead, so each call starts when this rank gets to it), a mark right before and after each: CUDA
    events on the stream on a GPU, the host clock on the CPU (where a call returns when it is done). The time
    from one call's end mark to the next call's start mark is this rank's own way back into the next call: on
    a GPU the start mark runs when this rank's GPU reaches it, late where its host issued late (a core taken
    by another task) or another process held the GPU. ``fn`` raises on an error."""
    marks: _Marks = _EventMarks(ctx, calls) if ctx.is_cuda else _ClockMarks()
    for _ in range(calls):
        ctx.progress()  # before each call: a rank that stops short of one shows less progress than its peers
        marks.mark()
        fn()
        marks.mark()
        marks.wait()
    between = marks.intervals()
    return Blocking(seconds=between[0::2], gaps=between[1::2])


class _Marks(Protocol):
    def mark(self) -> None: ...

    def wait(self) -> None: ...

    def intervals(self) -> list[float]:
        """Seconds between each mark and the next, in turn."""
        ...


class _ClockMarks:
    def __init__(self) -> None:
        self.stamps: list[float] = []

    def mark(self) -> None:
        self.stamps.append(time.perf_counter())

    def wait(self) -> None:
        """Nothing to wait for: a call on the CPU has returned when it is done."""

    def intervals(self) -> list[float]:
        return [after - before for before, after in itertools.pairwise(self.stamps)]


class _EventMarks:
    """Every event made before the calls (making one costs host time between them), recorded in turn."""

    def __init__(self, ctx: Ctx, calls: int) -> None:
        self.stream = torch.cuda.current_stream(ctx.device)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(2 * calls)]
        self.recorded = 0

    def mark(self) -> None:
        self.events[self.recorded].record(self.stream)
        self.recorded += 1

    def wait(self) -> None:
        self.stream.synchronize()

    def intervals(self) -> list[float]:
        done = self.events[: self.recorded]
        return [before.elapsed_time(after) / 1e3 for before, after in itertools.pairwise(done)]


def _raise_on(failed: int | None) -> None:
    if failed:
        raise RuntimeError(f"a timed call returned {failed}")


class GraphWindows:
    """Every call of the timed loop captured in one CUDA graph, with a timing event between two windows.

    The events are captured as nodes of the graph (``external=True``: cudaEventRecordExternal, CUDA C
    Programming Guide, "Cross-stream dependencies and events"), so each window is timed on the GPU's own
    timeline inside one replay, without the replay's launch; events recorded around the replay would add
    the launch to the first window and leave the others unmarked."""

    def __init__(self, fn: Callable[[], object], calls: list[int], stream: torch.cuda.Stream) -> None:
        self.calls = calls
        self.marks = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(len(calls) + 1)]
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=stream):
            _raise_on(_marked_loop(repeat(fn), calls, self.marks))

    def replay(self) -> list[float]:
        """One replay; the seconds per call in each window."""
        self.graph.replay()
        return _per_call(self.marks, self.calls)


def _marked_loop(burst: Burst, calls: list[int], marks: list[torch.cuda.Event]) -> int | None:
    """The loop, a mark before it and after each window (recorded now, or captured into a graph), on the
    stream taken once (looking it up at each mark would cost more than a small call); the last result code
    other than 0 (``timed_loop``), if any."""
    stream = torch.cuda.current_stream()
    failed: int | None = None
    marks[0].record(stream)
    for n, mark in zip(calls, marks[1:], strict=True):
        failed = burst(n) or failed
        mark.record(stream)
    return failed


def _per_call(marks: list[torch.cuda.Event], calls: list[int]) -> list[float]:
    marks[-1].synchronize()
    return [a.elapsed_time(b) / 1e3 / n for (a, b), n in zip(itertools.pairwise(marks), calls, strict=True)]
