"""The regression rule: is a figure worse than the same figure of an earlier run, beyond a tolerance?

One rule for ``cluster-acceptance compare OLD NEW`` and for ``pytest --cluster-baseline OLD``: which way
is better comes from the metric registry, the tolerance from the profile's ``baseline`` section (default
5%, per metric under ``baseline.tolerances``). Pure data in, data out, so the CLI and the plugin share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from acceptance.numbers import fmt
from acceptance.profile.metrics import Better, Scale, better, canonical_metric, scale

DEFAULT_TOLERANCE = 0.05


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
    def beyond(self) -> bool:
        return self.worse_by > self.tolerance

    @property
    def limit(self) -> str:
        """The value the new figure had to reach, in words: ``>= 1,520 (baseline 1,600 -5%)``."""
        if self.old is None or self.better == "none" or self.scale == "bound":
            return ""
        sign = -1 if self.better == "higher" else 1
        slack = self.tolerance if self.scale == "points" else self.tolerance * abs(self.old)
        side = ">=" if sign < 0 else "<="
        within = f"{'-' if sign < 0 else '+'}{self.tolerance_shown}"
        return f"{side} {fmt(self.old + sign * slack)} (baseline {fmt(self.old)} {within})"


def tolerance_for(profile: Mapping[str, Any] | None, metric: str, override: float | None = None) -> float:
    """``override``, else the profile's ``baseline.tolerances[metric]``, else its ``baseline.tolerance``, else 5%.
    ``profile`` is a resolved profile as the evidence records it (older evidence has no ``baseline``)."""
    if override is not None:
        return override
    section = (profile or {}).get("baseline") or {}
    per_metric = section.get("tolerances") or {}
    found = per_metric.get(canonical_metric(metric), per_metric.get(metric))
    if found is None:
        found = section.get("tolerance", DEFAULT_TOLERANCE)
    return float(found)


def change(metric: str, old: float | None, new: float | None, tolerance: float) -> Change:
    return Change(metric, _number(old), _number(new), better(metric), tolerance, scale(metric))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if isinstance(value, float) and not math.isfinite(value) else value


def checks(evidence: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for test in evidence.get("tests") or []:
        yield from test.get("checks") or []


def figures(evidence: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """metric -> its check (the last one where a merged file repeats it per node)."""
    return {canonical_metric(c["metric"]): c for c in checks(evidence)}


@dataclass(frozen=True)
class Judgement:
    """A figure against the baseline: ``ok`` False when it is worse beyond tolerance; ``message`` says so."""

    ok: bool
    change: Change
    message: str
    baseline_bound: str | None  # what the baseline's own run was bounded by


def judge(
    baseline: Mapping[str, Mapping[str, Any]],
    metric: str,
    value: float | None,
    gated: bool,
    tolerance: float,
) -> Judgement | None:
    """``value`` of ``metric`` in this run against ``baseline`` (:func:`figures` of the old evidence).

    None when the rule does not apply: the baseline lacks the figure, the figure has no better side, or it
    is gated neither now (``gated``: the profile bounds it) nor in the baseline, or its bound alone judges
    it (``metrics.Scale``). A figure measured as information in both runs is compared by ``compare`` but
    never fails a run."""
    old = baseline.get(canonical_metric(metric))
    if old is None or better(metric) == "none" or scale(metric) == "bound":
        return None
    bound = old.get("bound") or None
    if not gated and not bound:
        return None
    found = change(metric, old.get("value"), value, tolerance)
    if not found.beyond:
        return Judgement(True, found, "", bound)
    worse = "not a number" if found.new is None else f"{found.worse_shown} worse than the baseline"
    message = f"{metric} = {fmt(found.new)} {old.get('unit', '')}, {worse}; needed {found.limit}"
    return Judgement(False, found, message, bound)
