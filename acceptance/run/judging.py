"""A measured figure against the profile: its bound, its verdict, and the one line a failing test shows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acceptance.evidence.model import Check, CheckVerdict
from acceptance.numbers import fmt
from acceptance.profile import baseline
from acceptance.profile.loader import Profile, evaluate
from acceptance.profile.model import Threshold

MUST_BE_ZERO = Threshold(eq=0, source="built-in: correctness is never mere information")


@dataclass(frozen=True)
class Judged:
    """A checked figure as the test sees it: the evidence's record and the one line to fail with."""

    check: Check
    message: str
    xfail_reason: str | None = None

    @property
    def verdict(self) -> str:
        return self.check.verdict


def judge(
    profile: Profile, metric: str, value: float, unit: str, detail: str = "", default: Threshold | None = None
) -> Judged:
    """Bound ``value`` by the profile's threshold, else by ``default`` (for correctness figures, which are
    never mere information), else record it as information."""
    threshold = profile.threshold(metric) or default
    ok, bound = evaluate(threshold, value) if threshold is not None else (True, "")
    verdict: CheckVerdict = "info" if threshold is None else "pass" if ok else "xfail" if threshold.xfail else "fail"
    check = Check(
        metric=metric,
        value=value,
        unit=unit,
        bound=bound,
        verdict=verdict,
        threshold=threshold.model_dump(exclude_none=True) if threshold else None,
        detail=detail or None,
    )
    message = "" if ok else f"{metric} = {fmt(value)} {unit}, expected {bound} (profile {profile.name})"
    return Judged(
        check, message + (f"\n{detail}" if detail and message else ""), threshold.xfail if threshold else None
    )


def would_fail(profile: Profile, metric: str, value: float) -> bool:
    """Whether ``value`` misses the profile's bound for ``metric``; a known issue, xfail, does not count."""
    threshold = profile.threshold(metric)
    return threshold is not None and not threshold.xfail and not evaluate(threshold, value)[0]


def against_baseline(
    profile: Profile, old: Mapping[str, dict[str, Any]] | None, metric: str, value: float | None, gated: bool
) -> baseline.Judgement | None:
    """--cluster-baseline's rule for a figure that met its profile bound: ``value`` against ``old`` (the earlier
    run's figures by metric) with the profile's tolerance, as ``compare`` judges; None where it does not apply."""
    if old is None or value is None:
        return None
    return baseline.judge(old, metric, value, gated, baseline.tolerance_for(profile.resolved, metric))
