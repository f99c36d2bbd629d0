"""The collectives' figures from measured times, the way nccl-tests computes them (one helper for the sweep
and the internode comparison)."""

from __future__ import annotations

from collections.abc import Sequence

from acceptance.profile.collectives import OPS


def figures(op: str, nbytes: int, seconds: Sequence[float], ranks: int) -> dict[str, float]:
    """nccl-tests' figures from each rank's mean seconds per call: the time is the mean over ranks (its
    default ``-a 1``), algbw = bytes / time (GB = 1e9 B), busbw = algbw x the op's factor for ``ranks``.
    The slowest rank's time is kept beside the mean, and which rank it was (index into ``seconds``)."""
    mean = sum(seconds) / len(seconds)
    algbw = nbytes / mean / 1e9
    slowest = max(range(len(seconds)), key=seconds.__getitem__)
    return {
        "time_us": mean * 1e6,
        "time_us_max": seconds[slowest] * 1e6,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * OPS[op].busbw_factor(ranks),
        "slowest_rank": slowest,
    }
