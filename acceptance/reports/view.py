"""An evidence file as a report reads it: the verdict as the model defines it, the figures once each
(a merged file repeats every figure per node), and each probe's results as one series per distinct node.

Pure functions of the evidence document (its model, as ``read_evidence`` gives it); tolerant of older files
(no ``partial``, no ``node`` tags).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace

from pydantic import ValidationError

from acceptance.evidence.model import Case, Check, EvidenceDoc, ProbeRecord
from acceptance.evidence.verdict import verdict_of
from acceptance.json_types import JSONObject, JSONValue
from acceptance.reports import pairs
from acceptance.schema.bounds import Threshold, limits
from acceptance.schema.report import EVERY_NODE as EVERY_NODE  # a series' label, as the report reads it
from acceptance.schema.report import Matrix, Series
from acceptance.schema.report import number as number  # the JSON readers the report shares with the sections
from acceptance.schema.report import object_of as object_of
from acceptance.schema.report import objects as objects
from acceptance.verdicts import INFORMATION, FigureVerdict, figure_failed

CHECK_ORDER: dict[FigureVerdict, int] = {"fail": 0, "baseline_fail": 0, "xfail": 1, "pass": 2, "info": 3}


def verdict_note(data: EvidenceDoc) -> str:
    shown = verdict_of(data)
    if shown == "PASS":
        return "the whole suite for the profile ran; every gate held"
    if shown == "PARTIAL":
        unchecked = ", ".join(data.unchecked_thresholds) or "some"
        return f"a subset was selected: thresholds not enforced in this run: {unchecked}"
    if shown == "INCOMPLETE":
        return "the run was interrupted (or is still running): its figures are not a verdict"
    return "a gate failed, a probe failed, or a node disagreed" + ("" if data.complete else " (interrupted)")


def merged(data: EvidenceDoc) -> bool:
    return bool(data.merged_from)


def node_of(record: Case | ProbeRecord, data: EvidenceDoc) -> str:
    """The node a test or probe record came from in a merged file; "" in one node's own file."""
    if not merged(data):
        return ""
    if record.node:
        return record.node
    return record.nodeid.partition("::")[0] if isinstance(record, Case) else ""


def _test_id(test: Case, data: EvidenceDoc) -> str:
    nodeid = test.nodeid
    return nodeid.partition("::")[2] if merged(data) and "::" in nodeid else nodeid


@dataclass(frozen=True)
class ReportedFigure:
    """A figure as the evidence stored it (a check), as a report shows it: where its bound came from, the
    test that checked it, the node (or every node) that measured it. A family's rules give
    ``acceptance.schema.figure.Figure``; this is what became of one."""

    metric: str
    value: float | None
    unit: str
    bound: str
    verdict: FigureVerdict
    source: str
    test: str
    node: str  # "" in one node's file; EVERY_NODE where the nodes of a merged file agree
    detail: str = ""

    @property
    def gated(self) -> bool:
        return self.verdict != INFORMATION


def _figure(check: Check, test: str, node: str) -> ReportedFigure:
    threshold = check.threshold or {}
    return ReportedFigure(
        metric=check.metric,
        value=check.value,
        unit=check.unit,
        bound=check.bound,
        verdict=check.verdict,
        source=str(threshold.get("source") or ""),
        test=test,
        node=node,
        detail=check.detail or "",
    )


def figures(data: EvidenceDoc, failing_first: bool = True) -> list[ReportedFigure]:
    """Every checked figure once, failing first (else in the order checked); a figure the nodes of a
    merged file disagree on, once per node."""
    groups: dict[tuple[str, str], list[ReportedFigure]] = {}
    for test in data.tests:
        test_id, node = _test_id(test, data), node_of(test, data)
        for check in test.checks:
            groups.setdefault((test_id, check.metric), []).append(_figure(check, test_id, node))
    out: list[ReportedFigure] = []
    for found in groups.values():
        same = {(f.value, f.verdict, f.bound) for f in found}
        if len(same) == 1:
            first = found[0]
            out.append(first if len(found) == 1 else replace(first, node=EVERY_NODE))
        else:
            out += found
    return sorted(out, key=lambda f: CHECK_ORDER[f.verdict]) if failing_first else out


def tests(data: EvidenceDoc, outcomes: tuple[str, ...]) -> list[tuple[str, str, Case]]:
    """(test id, nodes, test) of the tests with one of ``outcomes``, once per id and outcome: a merged
    file repeats each test per node, and a skip for the same reason on every node is one line."""
    found: dict[tuple[str, str, str], tuple[list[str], Case]] = {}
    for test in data.tests:
        if test.outcome in outcomes:
            key = (_test_id(test, data), test.outcome, test.message or "")
            found.setdefault(key, ([], test))[0].append(node_of(test, data))
    every = len(data.merged_from or [])
    return [
        (key[0], EVERY_NODE if every > 1 and len(nodes) == every else ", ".join(n for n in nodes if n), test)
        for key, (nodes, test) in found.items()
    ]


def series(data: EvidenceDoc, name: str) -> list[Series]:
    """The finished runs of probe ``name``, one per key and distinct result: nodes of a merged file that
    share one result (rank 0 gathers for the cluster) give one series, never a repeated one."""
    by_key: dict[str, list[tuple[str, ProbeRecord]]] = {}
    for index, probe in enumerate(data.probes):
        if probe.name != name or probe.status != "ok" or probe.result is None:
            continue
        node = node_of(probe, data) or (f"#{index}" if merged(data) else "")
        by_key.setdefault(probe.key or name, []).append((node, probe))
    out: list[Series] = []
    for key, runs in by_key.items():
        distinct: dict[str, tuple[list[str], ProbeRecord]] = {}
        for node, probe in runs:
            result = {k: v for k, v in (probe.result or {}).items() if k != "wall_s"}
            distinct.setdefault(json.dumps(result, sort_keys=True, default=str), ([], probe))[0].append(node)
        many = len(distinct) > 1
        for nodes, probe in distinct.values():
            label = ", ".join(n for n in nodes if n) if many else (EVERY_NODE if len(nodes) > 1 else nodes[0])
            out.append(Series(key, label, probe.result or {}, probe.wall_s))
    return out


def measurements(data: EvidenceDoc, key: str) -> Iterator[tuple[str, JSONValue]]:
    """(node, value) of every test measurement named ``key``."""
    for test in data.tests:
        found = test.measurements.get(key)
        if found is not None:
            yield node_of(test, data), found


def resolved(data: EvidenceDoc) -> JSONObject:
    return data.profile.resolved


def section(data: EvidenceDoc, name: str) -> JSONObject:
    """A section of the run's resolved profile (``training``, ``cost``); empty where it has none."""
    return object_of(resolved(data).get(name))


def usd_per_gpu_hour(data: EvidenceDoc) -> float | None:
    price = section(data, "cost").get("usd_per_gpu_hour")
    return float(price) if isinstance(price, (int, float)) and price > 0 else None


def thresholds(data: EvidenceDoc) -> JSONObject:
    """The run's thresholds: metric -> its bound's fields, as the profile gave them."""
    return section(data, "thresholds")


def nodes_label(data: EvidenceDoc) -> str:
    topo = data.topology
    return (
        f"{topo.nodes} node(s) x {topo.ranks_per_node} rank(s), world size {topo.world_size}, "
        f"head {topo.head} (from {topo.source})"
    )


def lower_bound(data: EvidenceDoc, metric: str) -> float | None:
    """The lower bound the run's profile set on ``metric``; None where it set none, or none a reader takes."""
    raw = thresholds(data).get(metric)
    try:
        return limits(Threshold.model_validate(raw))[0] if raw else None
    except ValidationError:
        return None


@dataclass(frozen=True)
class Reported:
    """The run as a family's section reads it (``acceptance.schema.report.ReportedRun``)."""

    data: EvidenceDoc

    def series(self, name: str) -> list[Series]:
        return series(self.data, name)

    def failed(self, name: str) -> list[Series]:
        found = [p for p in self.data.probes if p.name == name and p.status == "failed"]
        return [Series(p.key, "", p.result) for p in found if p.result is not None]

    def measurements(self, key: str) -> Iterator[tuple[str, JSONValue]]:
        return measurements(self.data, key)

    def section(self, name: str) -> JSONObject:
        return section(self.data, name)

    def value_of(self, metric: str) -> float | None:
        found = next((f for f in figures(self.data) if f.metric == metric), None)
        return found.value if found else None

    def failing(self) -> set[str]:
        return {f.metric for f in figures(self.data) if figure_failed(f.verdict)}

    def lower_bound(self, metric: str) -> float | None:
        return lower_bound(self.data, metric)

    def usd_per_gpu_hour(self) -> float | None:
        return usd_per_gpu_hour(self.data)

    def pair_matrices(self) -> list[Matrix]:
        return pairs.matrices(self.data)
