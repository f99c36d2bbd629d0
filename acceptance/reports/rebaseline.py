"""Profile bounds from measured evidence, ReFrame-style: the measured figure as ``ref`` with a relative
``lower`` (higher is better) or ``upper`` (lower is better) bound, and the source recorded (evidence path,
date, figure), so bounds stop being hand-computed prose that drifts from the evidence they cite.

A bound from one run must hold on the next run of the same cluster, so its margin is the larger of the
tolerance and the figure's own noise (``SIGNIFICANCE`` standard errors of a rerun's difference, from the
readings the evidence kept). A fraction of the median (registry scale ``points``) is bounded in points
(``max``: measured + margin), never relative to a figure near 0, and never looser than the bound it ran
with, whatever its verdict. Only a run whose verdict is PASS is read (``refuse_unless_passed``): a failed
run's figures are those its gates refused. Correctness gates (registry kind ``correctness``: wrong
elements, missing ranks, the loss that must fall, the canary, health counts) and figures that their bound
alone judges are left as they are: no measurement moves a sanity gate.
"""

from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import dataclass

from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.verdict import verdict_of
from acceptance.json_types import JSONObject, JSONValue
from acceptance.numbers import fmt
from acceptance.profile.baseline import SIGNIFICANCE, noise_between, tolerance_for
from acceptance.profile.metrics import better, canonical_metric, kind, scale
from acceptance.profile.readings import noise_of
from acceptance.reports import view

DEFAULT_TOLERANCE = 0.10  # the shipped profiles' convention: 90% of the measured figure


class RebaselineError(ValueError):
    """A tolerance option that cannot be read."""


@dataclass(frozen=True)
class Tolerances:
    default: float | None  # None: the run's own profile says (``of``)
    per_metric: list[tuple[str, float]]  # (metric name or glob, tolerance), the last match wins

    def of(self, metric: str, profile: JSONObject | None = None) -> float:
        """The option's tolerance for ``metric``; without one, the larger of 10% and the profile's baseline
        tolerance (``profile``: the run's resolved profile): how much two healthy runs of the cluster differ."""
        found = [tol for pattern, tol in self.per_metric if fnmatch.fnmatchcase(metric, pattern)]
        if found:
            return found[-1]
        if self.default is not None:
            return self.default
        return max(DEFAULT_TOLERANCE, tolerance_for(profile, metric))


def tolerances(options: list[str]) -> Tolerances:
    """``--tolerance 0.1`` sets the default, ``--tolerance 'training.*=0.15'`` one metric or a glob of them."""
    default: float | None = None
    per_metric = []
    for option in options:
        pattern, sep, text = option.rpartition("=")
        try:
            value = float(text)
        except ValueError:
            raise RebaselineError(f"--tolerance {option!r}: expected FRACTION or METRIC=FRACTION, e.g. 0.1") from None
        if not 0 <= value < 1:
            raise RebaselineError(f"--tolerance {option!r}: expected a fraction from 0 to 1 (0.1 = 10%)")
        if sep:
            per_metric.append((canonical_metric(pattern), value))
        else:
            default = value
    return Tolerances(default, per_metric)


def _round(value: float) -> float | int:
    """Four significant digits, as people quote a measurement; whole numbers from 1,000 up."""
    return round(value) if abs(value) >= 1000 else float(f"{value:.4g}")


def chosen(data: EvidenceDoc, profile: JSONObject | None, every: bool) -> list[view.ReportedFigure]:
    """The figures to bound: those ``profile`` bounds (else those the evidence gated; ``every``: all),
    leaving out correctness gates (their bound stays the profile's or the built-in one), figures that their
    bound alone judges (wall times, temperature) and figures with no better side."""
    wanted = None if profile is None else set(view.object_of(profile.get("thresholds")))
    out = []
    for figure in view.figures(data):
        if figure.value is None or better(figure.metric) == "none" or figure.node not in ("", view.EVERY_NODE):
            continue
        if kind(figure.metric) == "correctness" or scale(figure.metric) == "bound" or "==" in figure.bound:
            continue
        if wanted is not None and figure.metric not in wanted:
            continue
        if wanted is None and not every and not figure.gated:
            continue
        out.append(figure)
    return sorted(out, key=lambda f: f.metric)


# a figure outside this range is no measurement of this suite (a busbw of 1e-320, a time of 1e308): a bound
# relative to it holds for any figure (>= 0, <= 1.1e308), or has no float to be written in
SMALLEST, LARGEST = 1e-9, 1e15


def always_holds(figure: view.ReportedFigure) -> str | None:
    """Why a bound from ``figure`` would hold whatever the cluster measures next, or None: a relative bound
    needs a positive figure of a measurement's magnitude; a fraction of the median (points) one from -1 to 1."""
    value = figure.value
    if value is None or not math.isfinite(value):
        return "not a number"
    if scale(figure.metric) == "points":
        return None if -1 <= value <= 1 else "a fraction of the median outside -1 .. 1"
    if value <= 0:
        return "a bound relative to a figure of 0 or less"
    if not SMALLEST <= value <= LARGEST:
        return f"a bound relative to a figure outside {SMALLEST:g} .. {LARGEST:g}"
    return None


def margin(data: EvidenceDoc, figure: view.ReportedFigure, tolerance: float) -> tuple[float, str]:
    """How far from the measured figure its bound goes, on its scale (relative, or points), and why: the
    tolerance, or, where the figure's readings say a rerun moves further, its noise."""
    noise = noise_between(noise_of(data, canonical_metric(figure.metric)), None)
    if noise is None:
        return tolerance, ""
    if scale(figure.metric) == "points":
        noisy = SIGNIFICANCE * noise
    else:  # log space back to a relative step: down for higher-is-better, up for lower-is-better
        noisy = (
            -math.expm1(-SIGNIFICANCE * noise)
            if better(figure.metric) == "higher"
            else math.expm1(SIGNIFICANCE * noise)
        )
    if noisy <= tolerance:
        return tolerance, ""
    return noisy, f"; its noise ({SIGNIFICANCE:g} standard errors of a rerun) beyond the tolerance {tolerance:g}"


def refuse_unless_passed(data: EvidenceDoc, origin: str) -> None:
    """Bounds only from a run that passed: a failed (or partial, incomplete) run's figures are the ones its
    gates refused, and a bound drawn from them would let the same fault pass next time."""
    verdict = verdict_of(data)
    if verdict != "PASS":
        raise RebaselineError(
            f"{origin}: verdict {verdict}, not PASS: bounds come only from a run that passed (a failed figure "
            "would become the bound it failed)"
        )


def _current_max(figure: view.ReportedFigure, data: EvidenceDoc) -> float | None:
    """The ``max`` the run judged a lower-is-better fraction by, whatever its verdict: the new bound is never
    looser than it (a figure that failed it must not become a bound that passes it)."""
    for test in data.tests:
        for check in test.checks:
            found = check.threshold.get("max") if check.metric == figure.metric and check.threshold else None
            if isinstance(found, (int, float)):
                return float(found)
    return None


def entry(
    figure: view.ReportedFigure, tolerance: float, origin: str, started: str, data: EvidenceDoc
) -> dict[str, JSONValue]:
    """The threshold's fields for ``figure``, its source last."""
    value = float(figure.value or 0.0)
    step, why = margin(data, figure, tolerance)
    source = f"rebaseline of {origin} ({started}): measured {fmt(figure.value)} {figure.unit} in {figure.test}{why}"
    if scale(figure.metric) == "points":  # a shortfall under the median (lower is better): in points, not ~0 x k
        bound = _round(value + step)
        limit = _current_max(figure, data)
        if limit is not None and bound > limit:
            bound, source = limit, f"{source}; kept at the bound it ran with"
        return {"max": bound, "source": source}
    side = "lower" if better(figure.metric) == "higher" else "upper"
    # four digits, and a lower step short of 100%: a bound of >= 0 could never fail
    step = min(float(f"{step:.4g}"), 0.999) if side == "lower" else float(f"{step:.4g}")
    return {"ref": _round(value), side: -step if side == "lower" else step, "source": source}


def left_out(figures: list[view.ReportedFigure]) -> list[str]:
    """One line per figure a bound from which would always hold (``always_holds``): not bounded anew."""
    out = []
    for figure in figures:
        why = always_holds(figure)
        if why is not None:
            out.append(f"{figure.metric} = {fmt(figure.value)} {figure.unit}: {why} would always hold")
    return out


def document(
    data: EvidenceDoc,
    origin: str,
    figures: list[view.ReportedFigure],
    tol: Tolerances,
    profile: JSONObject | None = None,
    extends: str | None = None,
) -> str:
    """YAML: a profile ``<name>-rebaselined`` extending ``extends`` (the profile given, else the run's), its
    ``thresholds:`` one entry per line. Each entry nulls the fields of the extended profile's entry it
    replaces (``profile``, else the run's resolved profile): ``extends`` merges an entry field by field, and
    ``null`` deletes. A figure whose bound would always hold is left out, in a comment."""
    started = data.started or "unknown date"
    measured = data.profile
    resolved = view.resolved(data)
    base = extends or measured.name
    name = f"{base.rsplit('/', 1)[-1].removesuffix('.yaml')}-rebaselined"
    lines = [
        f"# bounds from {origin}: profile {measured.name} (sha256 {measured.sha256[:12]}),",
        f"# run started {started}, verdict {verdict_of(data)}; ref = measured, lower/upper relative to ref",
        f"# a profile: save it as thresholds/{name}.yaml (or anywhere) and run --cluster-profile {name}",
        "# (or the file's path); it extends the profile it bounds, replacing the entries below whole",
        *(f"# left out: {line}" for line in left_out(figures)),
        f"name: {name}",
        f"extends: {base}",
        "thresholds:",
    ]
    profile = profile if profile is not None else resolved
    figures = [f for f in figures if always_holds(f) is None]
    for figure in figures:
        fields = entry(figure, tol.of(figure.metric, resolved), origin, started, data)
        old = view.object_of(view.object_of((profile or {}).get("thresholds")).get(figure.metric))
        fields.update({key: None for key, value in old.items() if value is not None and key not in fields})
        inner = ", ".join(f"{k}: {json.dumps(v)}" for k, v in fields.items())
        lines.append(f"  {figure.metric}: {{{inner}}}")
    return "\n".join(lines) + "\n"
