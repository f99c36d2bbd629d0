"""Profile bounds from measured evidence, ReFrame-style: the measured figure as ``ref`` with a relative
``lower`` (higher is better) or ``upper`` (lower is better) bound, and the source recorded (evidence path,
date, figure), so bounds stop being hand-computed prose that drifts from the evidence they cite.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acceptance.evidence.verdict import verdict_of
from acceptance.numbers import fmt
from acceptance.profile.metrics import better, canonical_metric
from acceptance.reports import view

DEFAULT_TOLERANCE = 0.10  # the shipped profiles' convention: 90% of the measured figure


class RebaselineError(ValueError):
    """A tolerance option that cannot be read."""


@dataclass(frozen=True)
class Tolerances:
    default: float
    per_metric: list[tuple[str, float]]  # (metric name or glob, tolerance), the last match wins

    def of(self, metric: str) -> float:
        found = [tol for pattern, tol in self.per_metric if fnmatch.fnmatchcase(metric, pattern)]
        return found[-1] if found else self.default


def tolerances(options: list[str]) -> Tolerances:
    """``--tolerance 0.1`` sets the default, ``--tolerance 'training.*=0.15'`` one metric or a glob of them."""
    default, per_metric = DEFAULT_TOLERANCE, []
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


def chosen(data: Mapping[str, Any], profile: Mapping[str, Any] | None, every: bool) -> list[view.Figure]:
    """The figures to bound: those ``profile`` bounds (else those the evidence gated; ``every``: all),
    leaving out exact gates (correctness counts) and figures with no better side."""
    wanted = None if profile is None else set(profile.get("thresholds") or {})
    out = []
    for figure in view.figures(data):
        if figure.value is None or better(figure.metric) == "none" or figure.node not in ("", view.EVERY_NODE):
            continue
        if "==" in figure.bound:
            continue
        if wanted is not None and figure.metric not in wanted:
            continue
        if wanted is None and not every and not figure.gated:
            continue
        out.append(figure)
    return sorted(out, key=lambda f: f.metric)


def entry(figure: view.Figure, tolerance: float, origin: str, started: str) -> dict[str, Any]:
    side = "lower" if better(figure.metric) == "higher" else "upper"
    return {
        "ref": _round(float(figure.value or 0.0)),
        side: -tolerance if side == "lower" else tolerance,
        "source": f"rebaseline of {origin} ({started}): measured {fmt(figure.value)} {figure.unit} in {figure.test}",
    }


def document(
    data: Mapping[str, Any],
    origin: str,
    figures: list[view.Figure],
    tol: Tolerances,
    profile: Mapping[str, Any] | None = None,
) -> str:
    """YAML: a commented ``thresholds:`` block, one entry per line, to put in a profile. With ``profile``
    (the one the block goes into, or that it extends), each entry nulls the fields of that profile's entry
    it replaces: ``extends`` merges an entry field by field, and ``null`` deletes."""
    started = str(data.get("started") or "unknown date")
    measured = data.get("profile") or {}
    lines = [
        f"# bounds from {origin}: profile {measured.get('name')} (sha256 {str(measured.get('sha256'))[:12]}),",
        f"# run started {started}, verdict {verdict_of(data)}; ref = measured, lower/upper relative to ref",
        "thresholds:",
    ]
    for figure in figures:
        fields = entry(figure, tol.of(figure.metric), origin, started)
        old = ((profile or {}).get("thresholds") or {}).get(figure.metric) or {}
        fields.update({key: None for key, value in old.items() if value is not None and key not in fields})
        inner = ", ".join(f"{k}: {json.dumps(v)}" for k, v in fields.items())
        lines.append(f"  {figure.metric}: {{{inner}}}")
    return "\n".join(lines) + "\n"
