"""The noise of a stored figure: how far its value could move from its own readings alone.

A figure is the median of readings that the evidence keeps beside it: a collective's timed windows, a
GPU's timed windows, a training run's timed windows (or, in evidence from before the windows were kept,
their quartiles). From those readings comes the figure's standard error, in log space (a relative
change), so that ``compare`` and ``--cluster-baseline`` can tell a change from the noise it sits in.

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
# ``training.windows`` when the profile leaves it out (acceptance/families/training/figures.DEFAULT_WINDOWS)
TRAINING_WINDOWS = 5


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


def _items(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _results(evidence: StoredRun, name: str, key: str | None = None) -> Iterator[Mapping[str, object]]:
    """The finished results of probe ``name`` (of key ``key``); a merged file holds one per node."""
    for probe in evidence.probes:
        result, finished = probe.result, probe.status == "ok"
        if finished and isinstance(result, Mapping) and probe.name == name and (key is None or probe.key == key):
            yield result


def _size(text: object) -> str:
    try:
        return canonical_size(str(text))
    except SizeError:
        return str(text)


def _windows(row: object, what: str) -> Noise | None:
    found = at(row, "busbw_windows_gbps")
    if not isinstance(found, list):
        return None
    return log_noise(found, f"{len(found)} timed windows ({what})")


def _collective(evidence: StoredRun, op: str, size: str) -> Noise | None:
    for result in _results(evidence, "collectives"):
        for row in _items(result.get("rows")):
            if at(row, "op") == op and _size(at(row, "size")) == size:
                return _windows(row, "busbw")  # a time per call is bytes / busbw: the same relative noise
    return None


def _internode(evidence: StoredRun, scope: str, op: str, size: str) -> Noise | None:
    for result in _results(evidence, "internode"):
        for row in _items(result.get("rows")):
            if at(row, "scope") == scope and at(row, "op") == op and _size(at(row, "size")) == size:
                return _windows(row, f"{scope} busbw")
    return None


def _ratio(low: object, middle: object) -> float | None:
    if isinstance(low, (int, float)) and isinstance(middle, (int, float)) and middle > 0 and low >= 0:
        return min(float(low) / float(middle), 1.0)
    return None


def _compute(evidence: StoredRun, figure: str, statistic: str) -> Noise | None:
    """``_min``: the slowest GPU's windows; ``_median``: every GPU's windows (the GPUs differ, and the
    median over them moves with that too); ``_below_median``: both, in points."""
    for result in _results(evidence, "compute"):
        summary = at(result, "summary", figure)
        slowest = _items(at(summary, "slowest_windows"))
        every = [w for row in _items(result.get("rows")) for w in _items(at(row, "windows", figure))]
        low = log_noise(slowest, f"the slowest GPU's {len(slowest)} timed windows") if slowest else None
        middle = log_noise(every, f"{len(every)} timed windows of every GPU") if every else None
        if statistic == "min":
            return low
        if statistic == "median":
            return middle
        both = combined(low, middle)
        ratio = _ratio(at(summary, "min"), at(summary, "median"))
        if both is None or ratio is None:
            return None
        # 1 - min/median moves by min/median x the relative change of the ratio: that many points
        return Noise(ratio * both.standard_error, both.readings, both.source)
    return None


def _runs(evidence: StoredRun, baseline: bool) -> Iterator[Mapping[str, object]]:
    """Every training run of the evidence with its strategy's name: the strategies of one training job
    (``strategies``, the scaling baseline as ``scaling-baseline``), or, in older evidence, one probe per
    strategy (``training-<strategy>``, the baseline ``training-baseline``)."""
    for probe in evidence.probes:
        result = probe.result
        if probe.name != "training" or probe.status != "ok" or not isinstance(result, Mapping):
            continue
        older = probe.key.endswith("-baseline")
        strategies = result.get("strategies") or {"": result}
        for name, run in strategies.items() if isinstance(strategies, Mapping) else ():
            if isinstance(run, Mapping) and (name == "scaling-baseline" or older) == baseline:
                yield {**run, "strategy": run.get("strategy") or name}


def _training(evidence: StoredRun, strategy: str, baseline: bool = False) -> Noise | None:
    """A strategy's tokens/s: the median over its timed windows (``training.windows``)."""
    for run in _runs(evidence, baseline):
        if run.get("strategy") != strategy:
            continue
        windows = run.get("windows")
        if isinstance(windows, list) and windows:
            rates = [at(w, "tokens_per_s") for w in windows if isinstance(w, Mapping)]
            return log_noise(rates, f"{len(rates)} timed windows")
        found = at(evidence.profile.resolved, "training", "windows")
        count = int(found) if isinstance(found, (int, float)) and found else TRAINING_WINDOWS
        q1, q3 = run.get("tokens_per_s_per_gpu_q1"), run.get("tokens_per_s_per_gpu_q3")
        return quartile_noise(q1, q3, count, f"the quartiles of {count} timed windows")
    return None


def _of_collectives(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    if size and len(parts) == 2 and parts[1] in ("busbw_gbps", "time_us", "latency_us"):  # each from the windows
        return _collective(evidence, parts[0], size)
    return None


def _of_internode(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    if size and len(parts) == 3 and parts[2] == "busbw_gbps":
        return _internode(evidence, parts[0], parts[1], size)
    return None


def _of_compute(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    figure, _, statistic = parts[0].rpartition("_") if len(parts) == 1 and not size else ("", "", "")
    if statistic == "median" and figure.endswith("_below"):
        return _compute(evidence, figure.removesuffix("_below"), "below_median")
    return _compute(evidence, figure, statistic) if statistic in ("min", "median") else None


def _of_training(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    if parts == ["scaling_efficiency"]:
        strategy = str(at(evidence.profile.resolved, "training", "scaling_strategy") or "ddp")
        return combined(_training(evidence, strategy), _training(evidence, strategy, baseline=True))
    if len(parts) == 2 and parts[1] == "tokens_per_s_per_gpu" and not size:
        return _training(evidence, parts[0])
    return None


FAMILIES = {
    "collectives": _of_collectives,
    "internode": _of_internode,
    "compute": _of_compute,
    "training": _of_training,
}


def noise_of(evidence: StoredRun, metric: str) -> Noise | None:
    """The standard error of ``metric`` (canonical) in ``evidence``, else None: its readings are not
    recorded (a barrier's one figure, a correctness count), or too few to tell a spread."""
    family, _, rest = metric.partition(".")
    head, _, size = rest.partition("@")
    found = FAMILIES.get(family)
    return found(evidence, head.split("."), size) if found else None
