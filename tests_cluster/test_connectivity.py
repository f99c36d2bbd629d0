"""Is every rank there, on the node it should be, with its own GPU, and does every GPU pair inside a node
carry data, both ways, at speed? (The rails across nodes are the internode family's.)"""

from __future__ import annotations

import pytest

from acceptance.families import connectivity as connectivity_rules
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Threshold,
    forced_transport,
    isolation_env,
    probe_result,
    transport_figure,
)


@pytest.fixture(scope="module")
def conn(cluster: ClusterRun) -> connectivity_rules.ConnectivityResult:
    # nodes named by their own rank, as the isolation rounds name them
    return probe_result(cluster, "connectivity", connectivity_rules.ConnectivityResult, env=isolation_env(cluster))


def test_world_size(conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    expected = conn["expected_world_size"]
    check(
        "connectivity.world_size",
        conn["world_size"],
        "ranks",
        default=Threshold(eq=expected, source="nodes x ranks per node"),
    )


def test_every_node_has_its_ranks(conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    short = conn["short_nodes"]
    detail = "; ".join(f"node {k} has {v} ranks, expected {conn['expected_ranks_per_node']}" for k, v in short.items())
    check.measurements("nodes", conn["nodes"])
    check("connectivity.missing_ranks", len(conn["missing_ranks"]) + len(short), "ranks", detail)


def test_gpus_unique(conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    check.measurements("ranks", conn["ranks"])
    dupes = conn["duplicate_uuids"]
    holders = "; ".join(f"{u} held by ranks {[r['rank'] for r in conn['ranks'] if r.get('uuid') == u]}" for u in dupes)
    check("connectivity.duplicate_uuids", len(dupes), "GPUs", holders)


def test_allreduce_correct(conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    check("connectivity.allreduce_wrong", conn["allreduce_wrong"], "elements")


def require_node_peers(run: ClusterRun) -> None:
    if run.topology.nproc_per_node < 2:
        pytest.skip(f"links inside a node need at least 2 ranks per node; profile {run.profile.name} runs 1")


def test_p2p_correct(cluster: ClusterRun, conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    require_node_peers(cluster)
    check(
        "connectivity.p2p_wrong",
        conn["p2p_wrong"],
        "elements",
        connectivity_rules.wrong(conn["p2p"]),
    )


def test_p2p_slowest_link(cluster: ClusterRun, conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    require_node_peers(cluster)
    measured = conn["p2p"]
    check.measurements("p2p", measured)
    check.measurements("pair_matrices", connectivity_rules.matrices(measured, "node"))
    detail = (
        f"{len(measured)} links inside nodes, {conn['p2p_size']} each way in {conn['p2p_rounds']} round(s); "
        f"slowest: {connectivity_rules.slowest(measured)}"
    )
    slowest = conn["p2p_slowest"]
    if slowest is None:  # ranks that share a node and measured no link between them: never a pass
        why = f"no link inside a node was measured ({len(measured)} links)"
        check.missing("connectivity.p2p_min_gbps", "GB/s", why)
    cause = forced_transport(conn.get("transport"))
    if cause and cluster.judge.fails("connectivity.p2p_min_gbps", slowest["gbps"]):
        detail += f"\n{cause}"
    check("connectivity.p2p_min_gbps", slowest["gbps"], "GB/s", detail)


def test_transport_matches_the_hardware(
    cluster: ClusterRun, conn: connectivity_rules.ConnectivityResult, check: Checker
) -> None:
    """Every GPU pair that NVLink joins carried its traffic over NVLink (NCCL's P2P), not SHM or the network."""
    require_node_peers(cluster)
    transport_figure(check, "connectivity.transport_mismatches", conn.get("transport"))


def test_barrier_latency(conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    check("connectivity.barrier_latency_us", conn["barrier_latency_us"], "us")


def test_rendezvous_time(conn: connectivity_rules.ConnectivityResult, check: Checker) -> None:
    check("connectivity.rendezvous_s", conn["rendezvous_s"], "s")
