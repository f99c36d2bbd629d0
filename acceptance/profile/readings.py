"""A stored figure's noise (``acceptance.schema.noise``), found through its family's descriptor
(``Family.noise``); the collectives' is kept here until their family carries its own.
"""

from __future__ import annotations

from acceptance.profile.registry import family_of_metric
from acceptance.schema.noise import Noise, at, items, results, size_of, windows_noise
from acceptance.schema.stored import StoredRun


def _collectives(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    """A collective's busbw, time per call or latency: each from its row's timed windows."""
    if not (size and len(parts) == 2 and parts[1] in ("busbw_gbps", "time_us", "latency_us")):
        return None
    for result in results(evidence, "collectives"):
        for row in items(result.get("rows")):
            if at(row, "op") == parts[0] and size_of(at(row, "size")) == size:
                return windows_noise(row, "busbw")
    return None


def noise_of(evidence: StoredRun, metric: str) -> Noise | None:
    """The standard error of ``metric`` (canonical) in ``evidence``, else None: its readings are not
    recorded (a barrier's one figure, a correctness count), or too few to tell a spread."""
    family = family_of_metric(metric)
    _, _, rest = metric.partition(".")
    head, _, size = rest.partition("@")
    if family is None:
        return None
    found = family.noise or (_collectives if family.name == "collectives" else None)
    return found(evidence, head.split("."), size) if found else None
