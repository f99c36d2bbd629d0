"""Where the isolation rounds start and what a slow collective says of its culprit, from a run's probe
records (no torch, no job): the hint from the connectivity probe's slowest rails, a replay's hint from its
own round 1, and the culprit line that never names a rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from acceptance.evidence.model import ProbeRecord
from acceptance.run import isolation_rounds
from acceptance.run.cluster_run import ClusterRun


@dataclass
class _Evidence:
    probes: list[dict[str, Any]]

    @property
    def doc(self) -> _Doc:
        return _Doc([ProbeRecord.model_validate({"name": p["key"], **p}) for p in self.probes])


@dataclass
class _Doc:
    probes: list[ProbeRecord]


@dataclass
class _Placement:
    nodes: int


@dataclass
class _Run:
    """What the hint and the culprit line read of a run: its probe records and its node count."""

    probes: list[dict[str, Any]] = field(default_factory=list)
    nodes: int = 4

    def as_run(self) -> ClusterRun:
        return cast(ClusterRun, _Bound(_Evidence(self.probes), _Placement(self.nodes)))


@dataclass
class _Bound:
    evidence: _Evidence
    placement: _Placement


def rail(src: int, dst: int, gbps: float) -> dict[str, Any]:
    return {
        "src_node": src,
        "dst_node": dst,
        "src_gpu": 0,
        "dst_gpu": 0,
        "src_host": f"h{src}",
        "dst_host": f"h{dst}",
        "gbps": gbps,
        "wrong": 0,
        "round": 1,
    }


def connectivity(rails: list[dict[str, Any]], status: str = "ok") -> dict[str, Any]:
    return {"key": "connectivity", "status": status, "result": {"p2p": [], "rails": rails}}


def test_round_1_starts_from_the_three_slowest_rail_pairs_each_once() -> None:
    rails = [rail(0, 1, 9.0), rail(1, 0, 8.0), rail(2, 3, 0.2), rail(3, 2, 0.3), rail(0, 2, 5.0), rail(1, 3, 7.0)]
    run = _Run([connectivity(rails)]).as_run()
    assert isolation_rounds.hint(run) == ((2, 3), (0, 2), (1, 3))


def test_a_replay_starts_from_its_own_round_1_hint_whatever_ran_since() -> None:
    first = {"key": "isolation-1", "status": "ok", "result": {"hint": [[1, 2]], "pairs": []}}
    run = _Run([first, connectivity([rail(2, 3, 0.1)])]).as_run()
    assert isolation_rounds.hint(run) == ((1, 2),)
    unhinted = {"key": "isolation-1", "status": "ok", "result": {"pairs": []}}
    assert isolation_rounds.hint(_Run([unhinted, connectivity([rail(2, 3, 0.1)])]).as_run()) == ()


def test_no_connectivity_or_a_failed_one_gives_no_hint() -> None:
    assert isolation_rounds.hint(_Run().as_run()) == ()
    assert isolation_rounds.hint(_Run([connectivity([rail(2, 3, 0.1)], status="failed")]).as_run()) == ()


def test_a_slow_collective_names_the_slowest_links_never_a_rank() -> None:
    run = _Run([connectivity([rail(0, 1, 9.0), rail(2, 3, 0.2)])]).as_run()
    line = isolation_rounds.collective_culprit(run)
    assert line.startswith("culprit: slowest links this run measured: h2 GPU 0 -> h3 GPU 0 0.2 GB/s")
    assert "rank" not in line


def test_without_link_figures_the_line_says_which_family_finds_the_culprit() -> None:
    assert isolation_rounds.collective_culprit(_Run(nodes=1).as_run()) == (
        "culprit: the connectivity family names the slowest GPU links"
    )
    assert isolation_rounds.collective_culprit(_Run(nodes=4).as_run()).endswith(
        ", the internode family's isolation rounds the node or path"
    )
