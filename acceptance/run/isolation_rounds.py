"""Runs the isolation rounds of the family that has them (``Behaviour.isolation``: the internode family's) when
a figure across nodes has failed.

Every node's pytest runs the same rounds in the same order: each round is one probe job over every node,
and what the next round is follows only from the results, which rank 0 broadcast to every node. Each round
is cached under its own key, so a second failing figure replays the same verdict at no cost. What a round
measures, where round 1 starts and what a slow collective says of its culprit are the family's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceptance.profile.registry import FAMILIES
from acceptance.run import worker_pool
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError
from acceptance.schema.family import Family, Isolating, Records, Search


def _isolating() -> tuple[Family[Any], Isolating[Any]]:
    for family in FAMILIES:
        if family.behaviour.isolation is not None:
            return family, family.behaviour.isolation
    raise LookupError("no family of the registry isolates a failed figure across nodes")


def _first(isolating: Isolating[Any]) -> str:
    return f"{isolating.probe}-1"  # round 1's key: an isolation of this run started


def enabled(run: ClusterRun) -> bool:
    family, isolating = _isolating()
    return run.placement.nodes > 1 and isolating.enabled(family.section_of(run.profile.model))


def isolate(run: ClusterRun) -> Search:
    """Run rounds until the verdict is in; a round that fails ends the search and is named in the message."""
    family, isolating = _isolating()
    model = run.profile.model

    def run_round(sections: Mapping[str, object], key: str) -> Mapping[str, Any] | str:
        spec: dict[str, object] = {**run.spec(isolating.probe), **sections}
        try:
            return run.probe(isolating.probe, spec, key=key, env=node_env(run))
        except ProbeError as exc:
            return str(exc)

    return isolating.isolate(family.section_of(model), model, run.placement.nodes, _records(run), run_round)


def earlier(run: ClusterRun) -> Search | None:
    """The isolation an earlier figure of this session started, replayed from its cached rounds; None if none ran."""
    started = any(p.key == _first(_isolating()[1]) for p in run.evidence.doc.probes)
    return isolate(run) if started else None


def _records(run: ClusterRun) -> Records:
    def record(key: str) -> Mapping[str, Any] | None:
        """The result of this run's probe ``key``, where it ran and succeeded."""
        for p in run.evidence.doc.probes:
            if p.key == key and p.status == "ok" and p.result is not None:
                return p.result
        return None

    return record


def hint(run: ClusterRun) -> tuple[tuple[int, int], ...]:
    """Round 1's start (``Isolating.hint``) from this run's records."""
    return _isolating()[1].hint(_records(run))


def collective_culprit(run: ClusterRun) -> str:
    """Where a slow collective's culprit is to be found, in words (``Isolating.culprit``): with the isolation
    an earlier figure of this run started, replayed from its cached rounds."""
    records, isolating = _records(run), _isolating()[1]
    replayed = isolate(run) if records(_first(isolating)) is not None else None
    return isolating.culprit(records, replayed, run.placement.nodes)


def node_env(run: ClusterRun) -> dict[str, str]:
    """One pytest per node: each hands its own rank to its ranks (``acceptance.run.worker_pool.node_env``)."""
    return worker_pool.node_env(run.topology, run.placement)
