"""An evidence file as a report reads it: the verdict as the model defines it, the figures once each
(a merged file repeats every figure per node), and each probe's results as one series per distinct node.

Pure functions of the evidence dictionary; tolerant of older files (no ``partial``, no ``node`` tags).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from acceptance.evidence.verdict import FAILED_CHECKS, verdict_of

VERDICTS = ("PASS", "FAIL", "PARTIAL", "INCOMPLETE")
CHECK_ORDER = {"fail": 0, "baseline_fail": 0, "xfail": 1, "pass": 2, "info": 3}
FAILED = FAILED_CHECKS  # baseline_fail: the bound held, the figure is worse than --cluster-baseline
EVERY_NODE = "every node"


def verdict_note(data: Mapping[str, Any]) -> str:
    shown = verdict_of(data)
    if shown == "PASS":
        return "the whole suite for the profile ran; every gate held"
    if shown == "PARTIAL":
        unchecked = ", ".join(data.get("unchecked_thresholds") or []) or "some"
        return f"a subset was selected: thresholds not enforced in this run: {unchecked}"
    if shown == "INCOMPLETE":
        return "the run was interrupted (or is still running): its figures are not a verdict"
    return "a gate failed, a probe failed, or a node disagreed" + ("" if data.get("complete") else " (interrupted)")


def merged(data: Mapping[str, Any]) -> bool:
    return bool(data.get("merged_from"))


def node_of(record: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """The node a test or probe record came from in a merged file; "" in one node's own file."""
    if not merged(data):
        return ""
    return str(record.get("node") or str(record.get("nodeid", "")).partition("::")[0])


def _test_id(test: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    nodeid = str(test.get("nodeid", ""))
    return nodeid.partition("::")[2] if merged(data) and "::" in nodeid else nodeid


@dataclass(frozen=True)
class Figure:
    metric: str
    value: float | None
    unit: str
    bound: str
    verdict: str
    source: str
    test: str
    node: str  # "" in one node's file; EVERY_NODE where the nodes of a merged file agree
    detail: str = ""

    @property
    def gated(self) -> bool:
        return self.verdict != "info"


def _figure(check: Mapping[str, Any], test: str, node: str) -> Figure:
    threshold = check.get("threshold") or {}
    return Figure(
        metric=str(check.get("metric")),
        value=check.get("value"),
        unit=str(check.get("unit") or ""),
        bound=str(check.get("bound") or ""),
        verdict=str(check.get("verdict") or "info"),
        source=str(threshold.get("source") or ""),
        test=test,
        node=node,
        detail=str(check.get("detail") or ""),
    )


def figures(data: Mapping[str, Any], failing_first: bool = True) -> list[Figure]:
    """Every checked figure once, failing first (else in the order checked); a figure the nodes of a
    merged file disagree on, once per node."""
    groups: dict[tuple[str, str], list[Figure]] = {}
    for test in data.get("tests") or []:
        test_id, node = _test_id(test, data), node_of(test, data)
        for check in test.get("checks") or []:
            groups.setdefault((test_id, str(check.get("metric"))), []).append(_figure(check, test_id, node))
    out: list[Figure] = []
    for found in groups.values():
        same = {(f.value, f.verdict, f.bound) for f in found}
        if len(same) == 1:
            first = found[0]
            out.append(first if len(found) == 1 else _renode(first, EVERY_NODE))
        else:
            out += found
    return sorted(out, key=lambda f: CHECK_ORDER.get(f.verdict, 9)) if failing_first else out


def tests(data: Mapping[str, Any], outcomes: tuple[str, ...]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(test id, nodes, test) of the tests with one of ``outcomes``, once per id and outcome: a merged
    file repeats each test per node, and a skip for the same reason on every node is one line."""
    found: dict[tuple[str, str, str], tuple[list[str], Mapping[str, Any]]] = {}
    for test in data.get("tests") or []:
        if test.get("outcome") in outcomes:
            key = (_test_id(test, data), str(test.get("outcome")), str(test.get("message") or ""))
            found.setdefault(key, ([], test))[0].append(node_of(test, data))
    every = len(data.get("merged_from") or [])
    return [
        (key[0], EVERY_NODE if every > 1 and len(nodes) == every else ", ".join(n for n in nodes if n), test)
        for key, (nodes, test) in found.items()
    ]


def _renode(figure: Figure, node: str) -> Figure:
    return Figure(**{**figure.__dict__, "node": node})


@dataclass(frozen=True)
class Series:
    """One probe run's result; ``label`` names the node(s) that measured it ("" in one node's file)."""

    key: str
    label: str
    result: dict[str, Any]
    wall_s: float | None = None  # as the launcher measured it: start-up and rendezvous included


def series(data: Mapping[str, Any], name: str) -> list[Series]:
    """The finished runs of probe ``name``, one per key and distinct result: nodes of a merged file that
    share one result (rank 0 gathers for the cluster) give one series, never a repeated one."""
    by_key: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for index, probe in enumerate(data.get("probes") or []):
        if probe.get("name") != name or probe.get("status") != "ok" or not isinstance(probe.get("result"), dict):
            continue
        node = node_of(probe, data) or (f"#{index}" if merged(data) else "")
        by_key.setdefault(str(probe.get("key") or name), []).append((node, probe))
    out: list[Series] = []
    for key, runs in by_key.items():
        distinct: dict[str, tuple[list[str], dict[str, Any]]] = {}
        for node, probe in runs:
            result = {k: v for k, v in probe["result"].items() if k != "wall_s"}
            distinct.setdefault(json.dumps(result, sort_keys=True, default=str), ([], probe))[0].append(node)
        many = len(distinct) > 1
        for nodes, probe in distinct.values():
            label = ", ".join(n for n in nodes if n) if many else (EVERY_NODE if len(nodes) > 1 else nodes[0])
            out.append(Series(key, label, probe["result"], probe.get("wall_s")))
    return out


def measurements(data: Mapping[str, Any], key: str) -> Iterator[tuple[str, Any]]:
    """(node, value) of every test measurement named ``key``."""
    for test in data.get("tests") or []:
        found = (test.get("measurements") or {}).get(key)
        if found is not None:
            yield node_of(test, data), found


def resolved(data: Mapping[str, Any]) -> dict[str, Any]:
    return (data.get("profile") or {}).get("resolved") or {}


def usd_per_gpu_hour(data: Mapping[str, Any]) -> float | None:
    cost = resolved(data).get("cost") or {}
    price = cost.get("usd_per_gpu_hour")
    return float(price) if isinstance(price, (int, float)) and price > 0 else None


def tokens_per_dollar(tokens_per_s_per_gpu: float | None, usd: float | None) -> float | None:
    """Tokens one dollar of GPU time buys: tokens/s/GPU x 3600 s / price per GPU-hour."""
    if tokens_per_s_per_gpu is None or not usd:
        return None
    return tokens_per_s_per_gpu * 3600.0 / usd


def thresholds(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return resolved(data).get("thresholds") or {}


def nodes_label(data: Mapping[str, Any]) -> str:
    topo = data.get("topology") or {}
    return (
        f"{topo.get('nodes')} node(s) x {topo.get('ranks_per_node')} rank(s), world size {topo.get('world_size')}, "
        f"head {topo.get('head')} (from {topo.get('source')})"
    )
