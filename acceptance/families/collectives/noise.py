"""The noise of a stored collective figure: a row's busbw, time per call or latency, each from the row's
timed windows (``acceptance.schema.noise``)."""

from __future__ import annotations

from acceptance.schema.noise import Noise, at, items, results, size_of, windows_noise
from acceptance.schema.stored import StoredRun


def noise(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    """The noise of ``collectives.<op>.{busbw_gbps,time_us,latency_us}@<size>``: its row's timed windows."""
    if not (size and len(parts) == 2 and parts[1] in ("busbw_gbps", "time_us", "latency_us")):
        return None
    for result in results(evidence, "collectives"):
        for row in items(result.get("rows")):
            if at(row, "op") == parts[0] and size_of(at(row, "size")) == size:
                return windows_noise(row, "busbw")
    return None
