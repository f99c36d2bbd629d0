"""The collectives' figures from measured times, the way nccl-tests computes them (one helper for the sweep
and the internode comparison)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from acceptance.numbers import spread
from acceptance.profile.collectives import OPS


def figures(op: str, nbytes: int, seconds: Sequence[Sequence[float]], ranks: int) -> dict[str, Any]:
    """nccl-tests' figures from each rank's seconds per call in each timed window (``probes.windows``).

    A rank's time is its median window's; the time is the mean over ranks (nccl-tests' default ``-a 1``),
    algbw = bytes / time (GB = 1e9 B), busbw = algbw x the op's factor for ``ranks``. The slowest rank's time
    is kept beside the mean, and which rank it was (index into ``seconds``). Each window's busbw (its time
    the mean over ranks: a collective keeps them in step) and their spread, (max - min) / median, say how
    steady the figure was."""
    per_rank = [statistics.median(windows) for windows in seconds]
    mean = statistics.fmean(per_rank)
    factor = OPS[op].busbw_factor(ranks)
    slowest = max(range(len(per_rank)), key=per_rank.__getitem__)
    busbw_windows = [nbytes / statistics.fmean(t) / 1e9 * factor for t in zip(*seconds, strict=True)]
    return {
        "time_us": mean * 1e6,
        "time_us_max": per_rank[slowest] * 1e6,
        "algbw_gbps": nbytes / mean / 1e9,
        "busbw_gbps": nbytes / mean / 1e9 * factor,
        "slowest_rank": slowest,
        "busbw_windows_gbps": busbw_windows,
        "window_spread": spread(busbw_windows),
    }
