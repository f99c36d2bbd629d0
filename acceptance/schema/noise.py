"""The noise of a stored figure: how far its value could move from its own readings alone.

A figure is the median of readings that the evidence keeps beside it: a collective's timed windows, a
GPU's timed windows, a training run's timed windows (or, in evidence from before the windows were kept,
their quartiles). From those readings comes the figure's standard error, in log space (a relative
change), so that ``compare`` and ``--cluster-baseline`` can tell a change from the noise it sits in. Each
family says where its figures' readings are (``Behaviour.noise``); these are the measures they share.

The spread of the readings is their median absolute deviation around the median (x 1.4826, the factor
that makes it estimate the standard deviation of normal readings; Rousseeuw & Croux, JASA 88 (1993)):
robust, like the median it describes, to the one or two windows a neighbour's burst slows down. The
standard error of a median of ``n`` readings is sqrt(pi / 2) x spread / sqrt(n) (its asymptotic variance
is pi / 2 times the mean's under normal noise; Kendall & Stuart, The Advanced Theory of Statistics, vol. 1).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from acceptance.schema.sizes import SizeError, canonical_size
from acceptance.schema.stored import StoredRun

MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): the MAD of normal readings times this is their standard deviation
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # the standard error of a median over that of a mean
IQR_TO_SIGMA = 1.349  # Phi^-1(3/4) - Phi^-1(1/4): the interquartile range of normal readings in sigmas
MIN_READINGS = 3  # fewer readings give no spread worth the name: the tolerance alone judges the figure


@dataclass(frozen=True)
class Noise:
    """A figure's standard error on the scale its change is measured on: log (relative) for most figures,
    points for a fraction of the median; and what it was estimated from, in words."""

    standard_error: float
    readings: int
    source: str

    @property
    def shown(self) -> str:
        return f"±{self.standard_error:.1%} from {self.source}"


def log_noise(values: Sequence[object], source: str) -> Noise | None:
    """The standard error of the median of ``values`` in log space, or None where it cannot be told: fewer
    than ``MIN_READINGS`` readings, or one that is not a positive number."""
    logs = [math.log(v) for v in values if isinstance(v, (int, float)) and v > 0 and math.isfinite(v)]
    if len(logs) < MIN_READINGS or len(logs) != len(values):
        return None
    middle = statistics.median(logs)
    spread = MAD_TO_SIGMA * statistics.median(abs(x - middle) for x in logs)
    return Noise(MEDIAN_EFFICIENCY * spread / math.sqrt(len(logs)), len(logs), source)


def quartile_noise(q1: object, q3: object, count: int, source: str) -> Noise | None:
    """The same from a median's quartiles alone (evidence that kept no readings): spread = IQR / 1.349."""
    if not (isinstance(q1, (int, float)) and isinstance(q3, (int, float))) or min(q1, q3) <= 0 or count < MIN_READINGS:
        return None
    spread = math.log(float(q3) / float(q1)) / IQR_TO_SIGMA
    return Noise(MEDIAN_EFFICIENCY * spread / math.sqrt(count), count, source)


def combined(*parts: Noise | None) -> Noise | None:
    """The noise of a figure formed from independent ones (a ratio, a difference): in quadrature."""
    found = [p for p in parts if p is not None]
    if not found or len(found) != len(parts):
        return None
    error = math.sqrt(sum(p.standard_error**2 for p in found))
    return Noise(error, min(p.readings for p in found), " and ".join(p.source for p in found))


def at(value: object, *keys: str) -> object:
    """``value[k1][k2]...`` through JSON objects; None where a key is missing or a value is not an object."""
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def items(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def results(evidence: StoredRun, name: str, key: str | None = None) -> Iterator[Mapping[str, object]]:
    """The finished results of probe ``name`` (of key ``key``); a merged file holds one per node."""
    for probe in evidence.probes:
        result, finished = probe.result, probe.status == "ok"
        if finished and isinstance(result, Mapping) and probe.name == name and (key is None or probe.key == key):
            yield result


def size_of(text: object) -> str:
    """A size as the figures' names spell it (``1G``), else the text as it is."""
    try:
        return canonical_size(str(text))
    except SizeError:
        return str(text)


def windows_noise(row: object, what: str) -> Noise | None:
    """A collective row's busbw over its timed windows (``busbw_windows_gbps``); a time per call is bytes /
    busbw, so it has the same relative noise."""
    found = at(row, "busbw_windows_gbps")
    if not isinstance(found, list):
        return None
    return log_noise(found, f"{len(found)} timed windows ({what})")
