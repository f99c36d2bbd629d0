"""Connectivity's rules: the probe's result in, its figures out, each naming the node, rank or GPU that is off."""

from __future__ import annotations

from acceptance.families import connectivity
from acceptance.families.connectivity import ConnectivityResult, Link


def _link(gbps: float, wrong: int = 0) -> Link:
    return {
        "src": 0, "dst": 1, "bytes": 16 << 20, "time_us": 10.0, "gbps": gbps, "wrong": wrong, "round": 0,
        "src_node": 0, "dst_node": 0, "src_host": "a", "dst_host": "a", "src_gpu": 0, "dst_gpu": 1,
    }  # fmt: skip


def _result(**changes: object) -> ConnectivityResult:
    found: ConnectivityResult = {
        "world_size": 3, "expected_world_size": 4, "expected_ranks_per_node": 2,
        "ranks": [{"rank": 0, "uuid": "GPU-x"}, {"rank": 1, "uuid": "GPU-x"}, {"rank": 2, "uuid": "GPU-y"}],  # type: ignore[typeddict-item]
        "nodes": {"0:a": [0, 1], "1:b": [2]}, "short_nodes": {"1:b": 1}, "missing_ranks": [3],
        "duplicate_uuids": ["GPU-x"], "allreduce_wrong": 0, "p2p_size": "16M", "barrier_latency_us": 12.0,
        "rendezvous_s": 0.5, "software": {},
        "p2p": [_link(2.5, wrong=3)], "p2p_rounds": 1, "p2p_slowest": _link(2.5, wrong=3), "p2p_wrong": 3,
        "rails": [], "rails_rounds": 0, "rails_slowest": None, "rails_wrong": 0,
    }  # fmt: skip
    return {**found, **changes}  # type: ignore[typeddict-item]


def test_the_figures_name_the_short_node_the_shared_gpu_and_the_wrong_link() -> None:
    figures = connectivity.figures(_result())
    world = figures["connectivity.world_size"]
    assert (world.value, world.bound and world.bound.eq) == (3, 4)
    missing = figures["connectivity.missing_ranks"]
    assert (missing.value, missing.detail) == (2, "node 1:b has 1 ranks, expected 2")
    assert figures["connectivity.duplicate_uuids"].detail == "GPU-x held by ranks [0, 1]"
    assert figures["connectivity.p2p_wrong"].detail == "a GPU 0 -> a GPU 1: 3 wrong"
    p2p = figures["connectivity.p2p_min_gbps"]
    assert (p2p.value, p2p.unmeasured) == (2.5, [])
    assert p2p.detail.startswith("1 links inside nodes, 16M each way in 1 round(s); slowest: a GPU 0 -> a GPU 1 2.5")


def test_no_link_measured_inside_a_node_is_unmeasured_never_a_pass() -> None:
    p2p = connectivity.figures(_result(p2p=[], p2p_slowest=None))["connectivity.p2p_min_gbps"]
    assert p2p.unmeasured_text == "no link inside a node was measured (0 links)"


def test_a_healthy_result_has_no_findings() -> None:
    healthy = _result(world_size=4, short_nodes={}, missing_ranks=[], duplicate_uuids=[], p2p=[_link(9.0)])
    figures = connectivity.figures(healthy)
    assert [f.metric for f in figures.values() if f.findings and f.metric != "connectivity.p2p_min_gbps"] == []
