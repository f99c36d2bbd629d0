"""The one judge: every figure's verdict, from the profile and, if given, a baseline run.

The plugin's checks, the re-measure of a low per-GPU figure, the isolation's trigger, ``sweep`` and
``bench_train`` all ask one ``Judge``; nothing else compares a figure with a bound or a baseline. The rules,
in order:

1. The bound: the profile's threshold for the metric, else the caller's (a bound from the run itself: its
   node count, a GPU's own slowdown temperature), else the one its metric declares (``Metric.builtin``: a
   correctness figure such as wrong elements is never mere information, it must be 0). No bound:
   information, recorded and never passed or failed.
2. A known issue: a threshold with ``xfail`` turns a miss into ``xfail`` (shown, not failed).
3. The baseline (``--cluster-baseline``): a performance figure that met its bound but is worse than the
   earlier run's beyond the profile's tolerance is ``baseline_fail``. Correctness figures are sanity gates,
   kept apart from performance as ReFrame keeps sanity apart from its performance references: no baseline
   moves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from acceptance.numbers import fmt
from acceptance.profile import baseline as baselines
from acceptance.profile.baseline import StoredFigure
from acceptance.profile.loader import OVERRIDE, Profile
from acceptance.profile.metrics import Kind, better, builtin_bound, canonical_metric, kind
from acceptance.schema.bounds import Threshold, evaluate
from acceptance.verdicts import FAILED_FIGURES as FAILED
from acceptance.verdicts import FigureVerdict

# the earlier run's checks by metric (``baseline.figures`` of its evidence)
BaselineFigures = Mapping[str, StoredFigure]


@dataclass(frozen=True)
class BaselineRecord:
    """What the baseline run said of the figure: its value, the bound it set now, and the tolerance."""

    value: float | None
    bound: str
    tolerance: float


@dataclass(frozen=True)
class Judgement:
    """A figure's final verdict, with the bound in words and the one line a failing test shows."""

    metric: str
    value: float
    unit: str
    verdict: FigureVerdict
    bound: str  # the profile's bound in words ("" for information); " and " the baseline's where it failed
    threshold: Threshold | None
    kind: Kind
    message: str  # "" unless the verdict is fail, xfail or baseline_fail
    detail: str = ""
    baseline: BaselineRecord | None = None

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED

    @property
    def gated(self) -> bool:
        return self.threshold is not None

    @property
    def xfail_reason(self) -> str | None:
        return self.threshold.xfail if self.threshold is not None else None


@dataclass(frozen=True)
class Judge:
    """Built once per run from the profile and the baseline run's figures (None: no baseline)."""

    profile: Profile
    baseline: BaselineFigures | None = None
    baseline_label: str = "--cluster-baseline"  # how a failure names the baseline

    def judge(
        self,
        metric: str,
        value: float,
        unit: str = "",
        detail: str = "",
        default: Threshold | None = None,
        unmeasured: str | None = None,
    ) -> Judgement:
        """``value`` of ``metric`` by the rules of the module's docstring; ``default`` bounds a figure the
        profile does not, from the run itself (its node count), before the metric's own ``builtin``.
        ``unmeasured``: the units (GPUs, nodes) that could not measure a figure taken over the others, in
        words; the figure fails with them whatever its value and bound (a known issue and information
        included): a unit that measured nothing must not leave a pass behind."""
        judged = self._judge(metric, value, unit, detail, default)
        if not unmeasured:
            return judged
        # the figure's own line where it missed its bound, else one that says it was measured on some units
        lines = judged.message.splitlines() or _with(f"{metric} = {fmt(value)} {unit}, {PART}", detail).splitlines()
        if judged.verdict == "xfail":
            lines[0] += f" [known issue: {judged.xfail_reason}]"
        return replace(judged, verdict="fail", message="\n".join([*lines, unmeasured]))

    def _judge(self, metric: str, value: float, unit: str, detail: str, default: Threshold | None) -> Judgement:
        threshold = self.bound(metric, default)
        figure_kind = kind(metric)
        if threshold is None:
            return Judgement(metric, value, unit, "info", "", None, figure_kind, "", detail)
        ok, bound = evaluate(threshold, value)
        if not ok:
            verdict: FigureVerdict = "xfail" if threshold.xfail else "fail"
            message = f"{metric} = {fmt(value)} {unit}, expected {bound} ({self._origin(threshold)})"
            return Judgement(
                metric, value, unit, verdict, bound, threshold, figure_kind, _with(message, detail), detail
            )
        judged = self._against_baseline(metric, value, figure_kind)
        if judged is None:
            return Judgement(metric, value, unit, "pass", bound, threshold, figure_kind, "", detail)
        record = BaselineRecord(judged.change.old, judged.change.limit, judged.change.tolerance)
        if judged.ok:
            return Judgement(metric, value, unit, "pass", bound, threshold, figure_kind, "", detail, record)
        message = _with(f"{judged.message} [{self.baseline_label}]", detail)
        both = f"{bound} and {judged.change.limit}"
        return Judgement(metric, value, unit, "baseline_fail", both, threshold, figure_kind, message, detail, record)

    def bound(self, metric: str, default: Threshold | None = None) -> Threshold | None:
        """The bound ``judge`` holds ``metric`` to: the profile's, else ``default``, else its metric's own."""
        return self.profile.threshold(metric) or default or builtin_bound(metric, self.profile.model)

    def _origin(self, threshold: Threshold) -> str:
        """Where the bound comes from, as a failure names it: the profile, and the option that set it."""
        source = threshold.source or ""
        return (
            f"profile {self.profile.name}, {source}" if source.startswith(OVERRIDE) else f"profile {self.profile.name}"
        )

    def fails(self, metric: str, value: float, default: Threshold | None = None) -> bool:
        """Whether ``judge`` would fail the figure (a known issue and information never fail)."""
        return self.judge(metric, value, default=default).failed

    def _against_baseline(self, metric: str, value: float, figure_kind: Kind) -> baselines.Judgement | None:
        if self.baseline is None or figure_kind == "correctness":
            return None
        tolerance = baselines.tolerance_for(self.profile.resolved, metric)
        return baselines.judge(self.baseline, metric, value, True, tolerance)


def bound_moved(old: StoredFigure | None, new: StoredFigure | None) -> bool:
    """Whether two stored checks of a figure were judged against different bounds (the profile changed):
    their thresholds, where they are sourced aside; a figure gated in one run only moved its bound too."""
    if old is None or new is None:
        return False
    return _bound_of(old) != _bound_of(new)


def _bound_of(check: StoredFigure) -> dict[str, object]:
    threshold = check.threshold or {}
    return {key: value for key, value in threshold.items() if key != "source" and value is not None}


def regressed(
    metric: str,
    old: StoredFigure | None,
    new: StoredFigure | None,
    tolerance: float,
    noise: float | None = None,
    gated_only: bool = False,
) -> bool:
    """Whether a stored check ``new`` regressed from ``old`` (``compare`` of two runs), by the judge's rules:
    a figure gated in either run whose verdict turned to a failure against the same bound, or a performance
    figure worse than the old run's beyond ``tolerance`` and beyond the noise (the rule ``Judge`` applies to
    ``--cluster-baseline``), gated or not: a profile that bounds nothing of a family (``init`` on a node no
    reference row fits) must not hide that the family's figures fell. A figure bounded in neither run counts
    only where its noise is known (``noise``, or both checks' readings); ``gated_only``: only figures
    bounded in either run count. ``noise``: the standard error of the difference, by default from both checks'
    readings (``baseline.figures``). A figure that failed a bound the old run did not have (``bound_moved``)
    did not regress for that: only its value can. A correctness figure (whose bound is a sanity gate, not
    a baseline) regressed where it is out of either run's bound and got worse, or is out of the bound the
    old run met, whatever bound it has now (``_correctness_regressed``); one bounded in neither run is a
    record, not a gate, and never regressed."""
    if new is None:
        return False
    if not ((old is not None and old.bound) or new.bound):
        return not gated_only and _ungated_regressed(metric, old, new, tolerance, noise)
    turned_fail = new.verdict == "fail" and (old is None or old.verdict != "fail")
    if turned_fail and not bound_moved(old, new):  # out of the same bound now
        return True
    if old is None:
        return False
    if kind(metric) == "correctness":
        return _correctness_regressed(metric, old, new)
    return _worse(metric, old, new, tolerance, noise)


def _ungated_regressed(
    metric: str, old: StoredFigure | None, new: StoredFigure, tolerance: float, noise: float | None
) -> bool:
    """A performance figure no bound chose, worse than the tolerance lets it by more than its noise (a change
    inside the two runs' own spread is none): judged only where the runs measured its noise (its readings),
    for a single reading of a rendezvous or of a step's spread moves by more than any tolerance between two
    healthy runs."""
    if old is None or kind(metric) != "performance":
        return False
    noise = baselines.noise_between(old.noise, new.noise) if noise is None else noise
    return noise is not None and _worse(metric, old, new, tolerance, noise, ungated=True)


def _worse(
    metric: str, old: StoredFigure, new: StoredFigure, tolerance: float, noise: float | None, ungated: bool = False
) -> bool:
    """``new`` worse than ``old`` beyond ``tolerance`` and beyond the noise (``noise``, else both checks'); for a
    figure bounded in neither run (``ungated``), beyond the two together."""
    if noise is None:
        noise = baselines.noise_between(old.noise, new.noise)
    judged = baselines.judge({canonical_metric(metric): old}, metric, new.value, True, tolerance, noise, ungated)
    return judged is not None and not judged.ok


def _out_of(check: StoredFigure, value: float) -> bool:
    """Whether ``value`` fails the bound ``check`` was judged by (False where it kept none)."""
    bound = _bound_of(check)
    return bool(bound) and not evaluate(Threshold.model_validate(bound), value)[0]


def _correctness_regressed(metric: str, old: StoredFigure, new: StoredFigure) -> bool:
    """A correctness figure judged against a bound that moved: out of the bound the old run met (a loosened
    gate hides nothing), or out of either bound and worse than the old value (``soak.gemm_wrong_elements``
    0 -> 4000 against a bound gone from 5 to 0). Only a tightened bound that the same value now fails is the
    bound's change, not the figure's; a value that moved within both bounds is no regression."""
    value, was = new.value, old.value
    if not isinstance(value, (int, float)):
        return False
    if old.verdict != "fail" and _out_of(old, float(value)):
        return True
    failing = new.verdict == "fail" or _out_of(old, float(value))
    if not failing or not isinstance(was, (int, float)):
        return False
    side = better(metric)
    return (value > was) if side == "lower" else (value < was) if side == "higher" else value != was


PART = "measured over part of the units only"


def _with(message: str, detail: str) -> str:
    return f"{message}\n{detail}" if detail else message
