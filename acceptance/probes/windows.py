"""Timed windows: a timed loop cut into up to WINDOWS windows of near-equal calls, one mark between two.

A figure is then its median window's, so one window disturbed by something else on the host (another
tenant's burst, a page-cache flush) cannot move it and three must; the windows' figures go into the
evidence beside it, and their spread into the checks' messages. The loop itself is unchanged: no
synchronisation inside it, only a mark (a CUDA event on a GPU, the host clock on the CPU) between two
windows.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import torch

from acceptance.probes.rank import Ctx

WINDOWS = 5


def split(iters: int) -> list[int]:
    """``iters`` calls as up to WINDOWS windows whose sizes differ by one at most (10 -> 2 x 5, 7 -> 2, 2, 1, 1, 1)."""
    count = max(1, min(WINDOWS, iters))
    return [iters // count + (1 if i < iters % count else 0) for i in range(count)]


def timed_windows(ctx: Ctx, fn: Callable[[], object], calls: list[int]) -> list[float]:
    """Seconds per call in each window of back-to-back calls, one loop: CUDA events between windows on a GPU,
    the host clock on the CPU."""
    if ctx.is_cuda:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(len(calls) + 1)]
        _marked_loop(fn, calls, marks)
        return _per_call(marks, calls)
    stamps = [time.perf_counter()]
    for n in calls:
        for _ in range(n):
            fn()
        stamps.append(time.perf_counter())
    return [(b - a) / n for (a, b), n in zip(itertools.pairwise(stamps), calls, strict=True)]


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
            _marked_loop(fn, calls, self.marks)

    def replay(self) -> list[float]:
        """One replay; the seconds per call in each window."""
        self.graph.replay()
        return _per_call(self.marks, self.calls)


def _marked_loop(fn: Callable[[], object], calls: list[int], marks: list[torch.cuda.Event]) -> None:
    """The loop, a mark before it and after each window (recorded now, or captured into a graph)."""
    marks[0].record()
    for n, mark in zip(calls, marks[1:], strict=True):
        for _ in range(n):
            fn()
        mark.record()


def _per_call(marks: list[torch.cuda.Event], calls: list[int]) -> list[float]:
    marks[-1].synchronize()
    return [a.elapsed_time(b) / 1e3 / n for (a, b), n in zip(itertools.pairwise(marks), calls, strict=True)]
