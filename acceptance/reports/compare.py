"""Two runs side by side: per figure which way is better, the change, whether it is beyond the tolerance
and the noise, verdict changes, and what differs in the profile and the software; worst first.

A gated figure (bounded in either run) whose verdict turned to FAIL against the same bound, or a performance
figure that got worse beyond its tolerance and beyond its noise (``judge.regressed``: the rule of
``--cluster-baseline``), gated or not, is a regression: ``cluster-acceptance compare`` exits 1 on one
(``--no-fail-on-regression``: 0). A profile that bounds nothing of a family (``init`` on a node no reference
row fits) would otherwise let a fabric that lost NVLink compare clean; ``--gated-only`` counts the figures
the profile bounds alone. A figure that fails a bound the old run did not have is shown as "bound moved":
the profile changed, not the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.verdict import verdict_of
from acceptance.json_types import JSONObject, JSONValue
from acceptance.numbers import fmt
from acceptance.profile.baseline import Change, StoredFigure, change, figures, noise_between, noise_in, tolerance_for
from acceptance.profile.judge import bound_moved, regressed
from acceptance.reports import view
from acceptance.reports.table import render
from acceptance.verdicts import turned_fail

ARROWS = {"higher": "higher", "lower": "lower", "none": "-"}


@dataclass(frozen=True)
class Row:
    change: Change
    unit: str
    old: StoredFigure | None  # the check in the old run, None where it was not measured
    new: StoredFigure | None
    gated_only: bool = False  # only a figure bounded in either run can regress (``--gated-only``)

    @property
    def gated(self) -> bool:
        return any(c and c.bound for c in (self.old, self.new))

    @property
    def verdicts(self) -> str:
        before, after = (c.verdict.upper() if c else "-" for c in (self.old, self.new))
        return f"{before} -> {after}" if before != after else after

    @property
    def turned_fail(self) -> bool:
        return self.new is not None and turned_fail(self.old.verdict if self.old else None, self.new.verdict)

    @property
    def regression(self) -> bool:
        return regressed(
            self.change.metric, self.old, self.new, self.change.tolerance, self.change.noise, self.gated_only
        )

    @property
    def bound_moved(self) -> bool:
        """The figure was judged against different bounds in the two runs: the profile changed."""
        return bound_moved(self.old, self.new)


def rows(
    old: EvidenceDoc,
    new: EvidenceDoc,
    tolerance: float | None = None,
    profile: JSONObject | None = None,
    gated_only: bool = False,
) -> list[Row]:
    """Every figure of either run, regressions first, then by how much worse, then the rest. Tolerances come
    from ``tolerance``, else ``profile`` (a resolved profile), else the profile the new run recorded.
    ``gated_only``: a figure bounded in neither run is compared, never a regression."""
    before, after = figures(old), figures(new)
    profile = view.resolved(new) if profile is None else profile
    out = []
    for metric in dict.fromkeys([*before, *after]):
        a, b = before.get(metric), after.get(metric)
        tol = tolerance_for(profile, metric, tolerance)
        noise = noise_between(noise_in(a), noise_in(b))
        ungated = not ((a is not None and a.bound) or (b is not None and b.bound))
        found = change(metric, a.value if a else None, b.value if b else None, tol, noise, ungated)
        out.append(Row(found, (b or a or StoredFigure()).unit, a, b, gated_only))
    return sorted(out, key=_order)


def _order(row: Row) -> tuple[int, float, float]:
    worse, gain = (min(x, 1e18) for x in (row.change.worse_by, row.change.better_by))
    first = 0 if row.regression else 1 if row.bound_moved and row.turned_fail else 2
    return (first, -worse, -gain)


def _flag(row: Row) -> str:
    if row.regression:
        return "REGRESSION" if row.gated else "REGRESSION (not gated)"
    if row.bound_moved:
        return "bound moved"
    if row.change.beyond:
        return "worse (not gated)"
    if row.change.past_tolerance:
        return "within noise"  # past the tolerance alone, not past it by the noise
    return "better" if row.change.better_by > row.change.tolerance else ""


def table(found: list[Row]) -> str:
    head = ["metric", "better", "old", "new", "unit", "change", "tolerance", "noise",
            "verdict", "bound (new)", ""]  # fmt: skip
    body = [
        [r.change.metric, ARROWS[r.change.better], r.change.old, r.change.new, r.unit,
         r.change.shown, r.change.tolerance_shown, r.change.noise_shown, r.verdicts,
         (r.new or r.old or StoredFigure()).bound or "-", _flag(r)]
        for r in found
    ]  # fmt: skip
    return render(head, body)


def _flatten(value: JSONValue, prefix: str = "") -> dict[str, JSONValue]:
    """A resolved profile as dotted keys; a threshold's metric name stays whole: thresholds[metric].min."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, JSONValue] = {}
    for key, inner in value.items():
        name = f"thresholds[{key}]" if prefix == "thresholds" else f"{prefix}.{key}" if prefix else str(key)
        out.update(_flatten(inner, name))
    return out


def differences(old: EvidenceDoc, new: EvidenceDoc) -> list[str]:
    """What differs between the runs' profiles (key by key), software versions and recorded environment."""
    pairs: list[tuple[str, Mapping[str, object], Mapping[str, object]]] = [
        ("profile", _flatten(view.resolved(old)), _flatten(view.resolved(new))),
        ("software", old.cluster.software, new.cluster.software),
        ("env", old.cluster.env, new.cluster.env),
    ]
    out = []
    for kind, a, b in pairs:
        for key in dict.fromkeys([*a, *b]):
            if a.get(key) != b.get(key):
                out.append(f"{kind} {key}: {_show(a.get(key))} -> {_show(b.get(key))}")
    return out


def _num(value: float | None) -> str:
    return "(not measured)" if value is None else fmt(value)


def _show(value: object) -> str:
    return "(absent)" if value is None else str(value)


def summary(old: EvidenceDoc, new: EvidenceDoc, found: list[Row], names: tuple[str, str]) -> list[str]:
    """The heading lines: both runs' verdicts and profiles, then the regressions, each with its bound."""
    lines = []
    for label, data, name in (("old", old, names[0]), ("new", new, names[1])):
        lines.append(
            f"{label}: {name}: {verdict_of(data)}, profile {data.profile.name} "
            f"sha256 {data.profile.sha256[:12]}, started {data.started}"
        )
    bad = [r for r in found if r.regression]
    counted = "gated figures" if any(r.gated_only for r in found) else "figures, gated or not,"
    lines.append(
        f"regressions ({counted} worse beyond tolerance and noise, or turned FAIL by the same bound): {len(bad)}"
    )
    for r in bad:
        worse = "" if r.change.worse_by == 0 else f", {r.change.worse_shown} worse"
        bound = (r.new or StoredFigure()).bound or "-"
        why = f"verdict {r.verdicts} against {bound}" if r.turned_fail else "beyond tolerance"
        why += f" and noise ({r.change.noise_shown})" if not r.turned_fail and r.change.noise is not None else ""
        why += "" if r.gated else " (not gated: no bound in either run)"
        lines.append(
            f"  {r.change.metric}: {_num(r.change.old)} -> {_num(r.change.new)} {r.unit} "
            f"({r.change.shown}{worse}, {ARROWS[r.change.better]} is better): {why}"
        )
    moved = [r for r in found if r.bound_moved and not r.regression and r.turned_fail]
    if moved:
        lines.append(f"bound moved (the profile changed, not the figure): {len(moved)}")
    for r in moved:
        bound, earlier = (r.new or StoredFigure()).bound or "-", (r.old or StoredFigure()).bound or "none"
        lines.append(
            f"  {r.change.metric}: {_num(r.change.old)} -> {_num(r.change.new)} {r.unit} ({r.change.shown}, "
            f"{ARROWS[r.change.better]} is better): verdict {r.verdicts} against {bound} "
            f"(the old run's bound: {earlier})"
        )
    return lines
