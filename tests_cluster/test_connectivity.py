"""Is every rank there, on the node it should be, with its own GPU, and can every rank reach the next?"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.plugin import MUST_BE_ZERO, Checker, probe_result, require_ranks
from acceptance.profile.model import Threshold
from acceptance.run.cluster_run import ClusterRun


@pytest.fixture(scope="module")
def conn(cluster: ClusterRun) -> dict[str, Any]:
    return probe_result(cluster, "connectivity")


def test_world_size(conn: dict[str, Any], check: Checker) -> None:
    expected = conn["expected_world_size"]
    check(
        "connectivity.world_size",
        conn["world_size"],
        "ranks",
        default=Threshold(eq=expected, source="nodes x ranks per node"),
    )


def test_every_node_has_its_ranks(conn: dict[str, Any], check: Checker) -> None:
    short = conn["short_nodes"]
    detail = "; ".join(f"node {k} has {v} ranks, expected {conn['expected_ranks_per_node']}" for k, v in short.items())
    check.measurements("nodes", conn["nodes"])
    check("connectivity.missing_ranks", len(conn["missing_ranks"]) + len(short), "ranks", detail, default=MUST_BE_ZERO)


def test_gpus_unique(conn: dict[str, Any], check: Checker) -> None:
    check.measurements("ranks", conn["ranks"])
    dupes = conn["duplicate_uuids"]
    holders = "; ".join(f"{u} held by ranks {[r['rank'] for r in conn['ranks'] if r.get('uuid') == u]}" for u in dupes)
    check("connectivity.duplicate_uuids", len(dupes), "GPUs", holders, default=MUST_BE_ZERO)


def test_allreduce_correct(conn: dict[str, Any], check: Checker) -> None:
    check("connectivity.allreduce_wrong", conn["allreduce_wrong"], "elements", default=MUST_BE_ZERO)


def test_p2p_ring_correct(cluster: ClusterRun, conn: dict[str, Any], check: Checker) -> None:
    require_ranks(cluster, 2, "the point-to-point ring")
    bad = [
        f"{p['src']}({p['src_host']})->{p['dst']}({p['dst_host']}): {p['wrong']} wrong"
        for p in conn["p2p"]
        if p["wrong"]
    ]
    check("connectivity.p2p_wrong", conn["p2p_wrong"], "elements", "; ".join(bad), default=MUST_BE_ZERO)


def test_p2p_slowest_link(cluster: ClusterRun, conn: dict[str, Any], check: Checker) -> None:
    require_ranks(cluster, 2, "the point-to-point ring")
    check.measurements("p2p", conn["p2p"])
    slow = conn["p2p_slowest"]
    detail = (
        f"slowest link: rank {slow['src']} ({slow['src_host']}) -> rank {slow['dst']} ({slow['dst_host']}), "
        f"{slow['gbps']:.2f} GB/s for {conn['p2p_size']}"
    )
    check("connectivity.p2p_min_gbps", slow["gbps"], "GB/s", detail)


def test_barrier_latency(conn: dict[str, Any], check: Checker) -> None:
    check("connectivity.barrier_latency_us", conn["barrier_latency_us"], "us")


def test_rendezvous_time(conn: dict[str, Any], check: Checker) -> None:
    check("connectivity.rendezvous_s", conn["rendezvous_s"], "s")
