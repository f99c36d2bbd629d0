"""The regression rule: is a figure worse than the same figure of an earlier run, beyond a tolerance and
beyond its noise?

One rule for ``cluster-acceptance compare OLD NEW`` and for ``pytest --cluster-baseline OLD``: which way
is better and how a change is measured (relative, points, or by the bound alone) come from the family
registry, the tolerance from the profile's ``baseline`` section (default 5%, per metric under
``baseline.tolerances``), the noise from each figure's own readings (``readings``). A gated figure's change
counts when it is both larger than the tolerance and larger than ``SIGNIFICANCE`` standard errors of the
difference: asv's rule (``asv compare``: a ratio beyond ``--factor`` that ``asv.statistics.is_different``
also finds significant), with the profile's tolerance as the factor. A figure no bound gates counts when,
less those standard errors, its change is still larger than the tolerance: a change inside the two runs'
own spread is none (a shared machine's figure moves between healthy runs by its tolerance and by what its
own windows spread, together). The tolerance says how large a change matters on the cluster (how much two
healthy runs of it differ), as a fall of the better side's figure, on both sides alike
(``Change.allowed``); the noise, how far a figure measured this way moves on its own. Pure data in, data
out, so the CLI and the plugin share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from acceptance.numbers import fmt
from acceptance.profile.metrics import Better, Scale, better, canonical_metric, scale
from acceptance.profile.readings import noise_of
from acceptance.schema.noise import Noise, at
from acceptance.schema.stored import StoredCheck, StoredRun

DEFAULT_TOLERANCE = 0.05
# A change counts when it exceeds this many standard errors of the difference: one-sided, 3 sigma is a
# false alarm in 740 figures under normal noise (asv compares at p < 0.002, or by disjoint 99% intervals)
SIGNIFICANCE = 3.0


@dataclass(frozen=True)
class Change:
    """One figure in two runs; ``worse_by`` is the change in the bad direction on the metric's scale: relative
    (0.12 = 12% worse), or in points for a figure that is a fraction already (0.12 = 12 points worse)."""

    metric: str
    old: float | None
    new: float | None
    better: Better
    tolerance: float
    scale: Scale = "relative"
    # the standard error of the difference on the metric's scale (log for a relative figure, points for a
    # fraction); None where neither run recorded the figure's readings: the tolerance alone judges it
    noise: float | None = None
    # a figure no bound gates: the noise adds to the tolerance (its change must pass the tolerance by the noise),
    # where a gated figure's change must pass each of them
    ungated: bool = False

    @property
    def relative(self) -> float | None:
        """(new - old) / |old|; None where it cannot be formed (a missing figure, an old 0)."""
        if self.old is None or self.new is None or self.old == 0:
            return None
        return (self.new - self.old) / abs(self.old)

    @property
    def worse_by(self) -> float:
        """How much worse on the metric's scale; 0 when better, equal, without a better side or judged by its
        bound alone; inf from 0 (relative) or to nothing."""
        if self.better != "none" and self.scale != "bound" and self.old is not None and self.new is None:
            return math.inf  # the figure was measured before and is not a number now
        return self._step(1.0)

    @property
    def better_by(self) -> float:
        """How much better on the metric's scale; 0 when worse, equal, or not compared."""
        return self._step(-1.0)

    def _step(self, towards: float) -> float:
        if self.better == "none" or self.scale == "bound" or self.old is None or self.new is None:
            return 0.0
        sign = towards if self.better == "lower" else -towards
        step = sign * (self.new - self.old)
        if step <= 0:
            return 0.0
        if self.scale == "points":
            return step
        return step / abs(self.old) if self.old != 0 else math.inf

    @property
    def shown(self) -> str:
        """The change in words on the metric's scale: ``+12.0%``, ``+1.2 pts``, ``from 0`` or ``-``."""
        if self.old is None or self.new is None:
            return "-"
        if self.scale == "points":
            return f"{(self.new - self.old) * 100:+.1f} pts"
        if self.relative is None:
            return "-" if self.old == self.new else "from 0"
        return f"{self.relative:+.1%}"

    @property
    def tolerance_shown(self) -> str:
        if self.scale == "bound":
            return "bound only"
        return f"{self.tolerance * 100:g} pts" if self.scale == "points" else f"{self.tolerance * 100:g}%"

    @property
    def worse_shown(self) -> str:
        """How much worse in words: ``12.0%``, ``1.2 pts`` or ``infinitely``."""
        if math.isinf(self.worse_by):
            return "infinitely"
        return f"{self.worse_by * 100:.1f} pts" if self.scale == "points" else f"{self.worse_by:.1%}"

    @property
    def noisy(self) -> float:
        """How far the figure may move on its noise alone: ``SIGNIFICANCE`` standard errors of the difference
        (log for a relative figure, points for a fraction); 0 where the noise is not known."""
        return SIGNIFICANCE * self.noise if self.noise is not None else 0.0

    @property
    def allowed(self) -> float:
        """The tolerance on the scale a change is judged on: points for a fraction; for a relative figure the
        log of the factor it may move by in its bad direction, a fall to 1 - tolerance of the better side's
        figure, so that a time and the bandwidth it gives (one reading, stated two ways) are judged alike: 90%
        lets a bandwidth fall to a tenth and a time grow tenfold, 5% a time grow by 5.3%. A tolerance of 1 or
        more (a lower-is-better figure's only: nothing falls by 100%) lets it grow by 1 + tolerance."""
        if self.scale == "points":
            return self.tolerance
        if self.tolerance < 1:
            return -math.log1p(-self.tolerance)
        return math.log1p(self.tolerance) if self.better == "lower" else math.inf

    @property
    def past_tolerance(self) -> bool:
        """Worse by more than the tolerance alone (the noise aside)."""
        if self.worse_by == 0 or math.isinf(self.worse_by):
            return self.worse_by != 0
        if self.scale == "points":
            return self.worse_by > self.allowed
        if self.old is None or self.new is None or self.old <= 0 or self.new <= 0:
            return True
        return abs(math.log(self.new / self.old)) > self.allowed

    @property
    def beyond(self) -> bool:
        """Worse than the old figure beyond the tolerance and beyond the noise: for a gated figure, a change
        larger than each (asv's rule: a ratio beyond ``--factor`` that ``asv.statistics.is_different`` also
        finds significant); for a figure no bound gates, a change that, less ``SIGNIFICANCE`` standard errors,
        is still past the tolerance (a one-sided test that the change exceeds the tolerance): inside the two
        runs' own spread it is no regression. Where the noise is not known the tolerance alone judges; a
        figure that fell to 0 or to nothing is beyond any noise."""
        if self.worse_by == 0:
            return False
        if math.isinf(self.worse_by):
            return True
        if self.scale == "points":
            step = self.worse_by
        elif self.old is None or self.new is None or self.old <= 0 or self.new <= 0:
            return True  # no ratio to take the log of: a figure that fell to 0 is no noise
        else:
            step = abs(math.log(self.new / self.old))
        if self.ungated:
            return step > self.allowed + self.noisy
        return step > self.allowed and step > self.noisy

    @property
    def noise_shown(self) -> str:
        """How far the noise lets the figure move in its bad direction, in words: ``±12.0%``
        (``SIGNIFICANCE`` standard errors), ``±1.2 pts``, or ``-`` where it is not known."""
        if self.noise is None:
            return "-"
        if self.scale == "points":
            return f"±{self.noisy * 100:.1f} pts"
        step = -math.expm1(-self.noisy) if self.better == "higher" else math.expm1(self.noisy)
        return f"±{step:.1%}"

    @property
    def slack(self) -> float:
        """How far the figure may move in its bad direction on the metric's scale: the tolerance and the noise
        together for a figure no bound gates, else the looser of the two."""
        return self.allowed + self.noisy if self.ungated else max(self.allowed, self.noisy)

    @property
    def limit(self) -> str:
        """The value the new figure had to reach, in words: ``>= 1,520 (baseline 1,600 -5%)``; where the noise
        moves it further, the noise named."""
        if self.old is None or self.better == "none" or self.scale == "bound":
            return ""
        sign = -1 if self.better == "higher" else 1
        if self.scale == "points":
            within = f"{'-' if sign < 0 else '+'}{self.tolerance_shown}"
            edge = self.old + sign * self.slack
        else:
            step = -math.expm1(-self.allowed) if sign < 0 else math.expm1(self.allowed)
            within = f"{'-' if sign < 0 else '+'}{step * 100:.3g}%"
            edge = self.old * math.exp(sign * self.slack) if self.old > 0 else self.old
        if self.noise is not None and self.noisy > (0 if self.ungated else self.allowed):
            within += f", noise {self.noise_shown}"
        side = ">=" if sign < 0 else "<="
        return f"{side} {fmt(edge)} (baseline {fmt(self.old)} {within})"


def tolerance_for(profile: Mapping[str, object] | None, metric: str, override: float | None = None) -> float:
    """``override``, else the profile's ``baseline.tolerances[metric]``, else its ``baseline.tolerance``, else 5%.
    ``profile`` is a resolved profile as the evidence records it (older evidence has no ``baseline``)."""
    if override is not None:
        return override
    section = at(profile, "baseline")
    found = at(section, "tolerances", canonical_metric(metric))
    if found is None:
        found = at(section, "tolerances", metric)
    if found is None:
        found = at(section, "tolerance")
    return float(found) if isinstance(found, (int, float)) else DEFAULT_TOLERANCE


def change(
    metric: str,
    old: float | None,
    new: float | None,
    tolerance: float,
    noise: float | None = None,
    ungated: bool = False,
) -> Change:
    return Change(metric, _number(old), _number(new), better(metric), tolerance, scale(metric), noise, ungated)


def noise_between(old: Noise | None, new: Noise | None) -> float | None:
    """The standard error of the difference of two figures: their own in quadrature; where one run kept
    no readings (a figure judged during the run, older evidence), the other's stands for both."""
    errors = [n.standard_error for n in (old, new) if n is not None]
    if not errors:
        return None
    return math.sqrt(sum(e**2 for e in errors) * (2 / len(errors)))


def noise_in(figure: StoredFigure | None) -> Noise | None:
    """The noise :func:`figures` found for a stored figure, if any."""
    return figure.noise if figure is not None else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass(frozen=True)
class StoredFigure:
    """A figure of an earlier run as the regression rule reads it: its check's value, unit, bound in words,
    verdict and threshold, and the noise of its recorded readings (None where none were kept)."""

    value: int | float | None = None
    unit: str = ""
    bound: str = ""
    verdict: str = ""
    threshold: Mapping[str, object] | None = None
    noise: Noise | None = None

    @classmethod
    def of(cls, check: StoredCheck, noise: Noise | None = None) -> StoredFigure:
        return cls(check.value, check.unit, check.bound, check.verdict, check.threshold, noise)


def checks(evidence: StoredRun) -> Iterator[StoredCheck]:
    for test in evidence.tests:
        yield from test.checks


def figures(evidence: StoredRun) -> dict[str, StoredFigure]:
    """metric -> its check (the last one where a merged file repeats it per node), with the figure's noise
    from its recorded readings (``readings.noise_of``)."""
    found = {canonical_metric(c.metric): c for c in checks(evidence)}
    return {metric: StoredFigure.of(check, noise_of(evidence, metric)) for metric, check in found.items()}


@dataclass(frozen=True)
class Judgement:
    """A figure against the baseline: ``ok`` False when it is worse beyond tolerance; ``message`` says so."""

    ok: bool
    change: Change
    message: str
    baseline_bound: str | None  # what the baseline's own run was bounded by


def judge(
    baseline: Mapping[str, StoredFigure],
    metric: str,
    value: float | None,
    gated: bool,
    tolerance: float,
    noise: float | None = None,
    ungated: bool = False,
) -> Judgement | None:
    """``value`` of ``metric`` in this run against ``baseline`` (:func:`figures` of the old evidence).

    None when the rule does not apply: the baseline lacks the figure, the figure has no better side, or it
    is gated neither now (``gated``: the profile bounds it) nor in the baseline, or its bound alone judges
    it (``metrics.Scale``). A figure measured as information in both runs is compared by ``compare`` but
    never fails a run. ``noise``: the standard error of the difference; by default the baseline's own noise
    stands for both runs (this run's readings are not at hand when its figure is judged). ``ungated``: bounded
    in neither run (``compare`` only): the noise adds to the tolerance (``Change.beyond``)."""
    old = baseline.get(canonical_metric(metric))
    if old is None or better(metric) == "none" or scale(metric) == "bound":
        return None
    bound = old.bound or None
    if not gated and not bound:
        return None
    noise = noise_between(old.noise, None) if noise is None else noise
    found = change(metric, old.value, value, tolerance, noise, ungated)
    if not found.beyond:
        return Judgement(True, found, "", bound)
    worse = "not a number" if found.new is None else f"{found.worse_shown} worse than the baseline"
    message = f"{metric} = {fmt(found.new)} {old.unit}, {worse}; needed {found.limit}"
    return Judgement(False, found, message, bound)
