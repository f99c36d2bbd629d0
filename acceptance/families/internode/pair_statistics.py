"""The statistics of the isolation rounds, torch-free and free of any round: a pair's reading robust to
outliers, the noise of one reading (the cluster's and a node's own), Wald's log-likelihood ratio, and the
chi-square quantiles the noise bounds use. Every function takes plain numbers in log units (a slowdown is
a ratio, and noise on a bandwidth is multiplicative) and never raises on empty or degenerate input: the
verdict built on them must always be written."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

# a reading further than this many standard deviations of the noise from its pair's median is an outlier
# (a retransmit, a burst of congestion): normal noise puts a reading of five that far out about once in
# 5,000 readings (the residual from a median of 5 has a standard deviation of about 1.1 readings')
OUTLIER_Z = 4.0
# a pair with this many outliers or more flaps: one excursion is chance, two in one pair's five repeats
# is the pair (at 5% outliers a reading, 2% of healthy pairs; a node slow in half its readings, 80%)
FLAP_OUTLIERS = 2
# a node is noisy when its pairs' own spread is this many times the cluster's typical one, with two
# partners or more: the spread of five readings' middle three varies by about half its value from pair to
# pair, so a healthy pair passes 2.5x about once in 100 and a healthy node's two pairs together about
# once in 10,000
NOISY_RATIO = 2.5
# a noisy node's readings above the healthy level spread this many times the typical pair's noise (root mean
# square): a flapping or healthy node's readings above the level are the typical noise's upper half, whose root
# mean square is the noise itself, and five of them pass twice that about once in 1,000 (chi-square, 5 degrees
# of freedom, above 20)
NOISY_ABOVE = 2.0
# E[x(4) - x(2)] of five standard normal readings: the middle three's span in units of the noise (the
# expected order statistics of 5 normals, +-0.4950; Harter, 1961)
MIDDLE_SPAN_5 = 0.990


@dataclass(frozen=True)
class Trimmed:
    """A pair's repeats (logs) with those far from their median set aside."""

    kept: tuple[float, ...]
    outliers: int
    high: bool = False  # an outlier above the rest: a fault only slows a pair, so the pair is not steady

    @property
    def mean(self) -> float:
        return statistics.fmean(self.kept) if self.kept else math.nan

    @property
    def flaps(self) -> bool:
        """Two excursions or more in one pair (the pair, not chance), or one above the rest (a pair slow in
        most readings and at full pace in one: slow some of the time, not a steady slow path)."""
        return self.outliers >= FLAP_OUTLIERS or self.high


@lru_cache(maxsize=1 << 16)
def trimmed(logs: tuple[float, ...], cut: float) -> Trimmed:
    """The readings but those further than ``cut`` below their median, and how many lie further than
    ``cut`` either side: one reading far below (a retransmit) then moves a pair's figure by nothing, where
    it would move its mean by a fifth of its distance. One far above is counted (the pair is not steady)
    but kept: a fault only slows a pair, so a reading far above the rest is the pair's pace or its noise,
    and setting it aside would leave a noisy pair's lower readings to read as slow. The median is of the
    readings themselves, so at most the smaller side is set aside."""
    if not logs:
        return Trimmed((), 0)
    middle = statistics.median(logs)
    kept = tuple(x for x in logs if x - middle >= -cut)
    high = sum(x - middle > cut for x in logs)
    return Trimmed(kept, len(logs) - len(kept) + high, high > 0)


def middle_span_sigma(logs: Sequence[float]) -> float:
    """The noise of one reading from the span of the middle three of five repeats (x(4) - x(2)), which
    one or two outliers on one side barely move; the sample standard deviation of any other count."""
    if len(logs) < 2:
        return math.nan
    if len(logs) != 5:
        return statistics.stdev(logs)
    ordered = sorted(logs)
    return (ordered[3] - ordered[1]) / MIDDLE_SPAN_5


def llr(log_ratio: float, variance: float, effect: float) -> float:
    """Wald's log-likelihood ratio of a normal estimate ``log_ratio`` of that ``variance``: mean ``effect``
    against mean 0. 0 (no evidence) where the estimate or its variance is not a number."""
    if not (math.isfinite(log_ratio) and variance > 0 and math.isfinite(variance)):
        return 0.0 if not math.isinf(log_ratio) else (math.inf if log_ratio < 0 else -math.inf)
    return effect / variance * (log_ratio - effect / 2)


def chi2_quantile(dof: int, z: float) -> float:
    """The chi-square quantile of ``dof`` degrees of freedom at the normal quantile ``z`` (Wilson and
    Hilferty, 1931: accurate to a few percent from 2 degrees of freedom)."""
    k = 2 / (9 * max(dof, 1))
    return max(dof, 1) * max(1 - k + z * math.sqrt(k), 0.05) ** 3


def binomial_tail(trials: int, at_least: int, rate: float) -> float:
    """The chance of ``at_least`` successes or more in ``trials`` draws at ``rate`` each."""
    if at_least <= 0:
        return 1.0
    below = sum(math.comb(trials, k) * rate**k * (1 - rate) ** (trials - k) for k in range(min(at_least, trials + 1)))
    return max(0.0, 1.0 - below) if at_least <= trials else 0.0


def median_chi2(dof: int) -> float:
    return chi2_quantile(dof, 0.0)


# the variance of the median of k normal readings over that of their mean, k = 1..12 (the mean of the middle two
# for even k): D. Teichroew, "Tables of expected values of order statistics and products of order statistics for
# samples of size twenty and less from the normal distribution", Ann. Math. Statist. 27 (1956) 410-426;
# pi / 2 as k grows (tests/test_isolation_units.py draws them again)
MEDIAN_VARIANCE = (1.0, 1.0, 1.346, 1.193, 1.434, 1.289, 1.475, 1.343, 1.496, 1.384, 1.509, 1.411)


def median_variance(k: int) -> float:
    """The variance of the median of ``k`` normal estimates over that of their mean (``MEDIAN_VARIANCE``)."""
    return MEDIAN_VARIANCE[k - 1] if 1 <= k <= len(MEDIAN_VARIANCE) else math.pi / 2


def median(values: Iterable[float], default: float = math.nan) -> float:
    """The median of the numbers among ``values``, or ``default`` where there is none."""
    usable = [v for v in values if not math.isnan(v)]
    return statistics.median(usable) if usable else default


def fmean(values: Iterable[float], default: float = math.nan) -> float:
    """The mean of the numbers among ``values``, or ``default`` where there is none."""
    usable = [v for v in values if not math.isnan(v)]
    return statistics.fmean(usable) if usable else default
