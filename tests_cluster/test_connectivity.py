"""Is every rank there, on the node it should be, with its own GPU, and does every GPU pair inside a node
carry data, both ways, at speed? (The rails across nodes are the internode family's.)"""

from __future__ import annotations

import pytest

from acceptance.families import connectivity as connectivity_rules
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Figure,
    forced_transport,
    isolation_env,
    probe_result,
    transport_figure,
)


@pytest.fixture(scope="module")
def conn(cluster: ClusterRun) -> connectivity_rules.ConnectivityResult:
    # nodes named by their own rank, as the isolation rounds name them
    return probe_result(cluster, "connectivity", connectivity_rules.ConnectivityResult, env=isolation_env(cluster))


@pytest.fixture(scope="module")
def figures(conn: connectivity_rules.ConnectivityResult) -> dict[str, Figure]:
    return connectivity_rules.figures(conn)


def test_world_size(figures: dict[str, Figure], check: Checker) -> None:
    check(figures["connectivity.world_size"])


def test_every_node_has_its_ranks(
    conn: connectivity_rules.ConnectivityResult, figures: dict[str, Figure], check: Checker
) -> None:
    check.measurements("nodes", conn["nodes"])
    check(figures["connectivity.missing_ranks"])


def test_gpus_unique(conn: connectivity_rules.ConnectivityResult, figures: dict[str, Figure], check: Checker) -> None:
    check.measurements("ranks", conn["ranks"])
    check(figures["connectivity.duplicate_uuids"])


def test_allreduce_correct(figures: dict[str, Figure], check: Checker) -> None:
    check(figures["connectivity.allreduce_wrong"])


def require_node_peers(run: ClusterRun) -> None:
    if run.topology.nproc_per_node < 2:
        pytest.skip(f"links inside a node need at least 2 ranks per node; profile {run.profile.name} runs 1")


def test_p2p_correct(cluster: ClusterRun, figures: dict[str, Figure], check: Checker) -> None:
    require_node_peers(cluster)
    check(figures["connectivity.p2p_wrong"])


def test_p2p_slowest_link(
    cluster: ClusterRun, conn: connectivity_rules.ConnectivityResult, figures: dict[str, Figure], check: Checker
) -> None:
    require_node_peers(cluster)
    check.measurements("p2p", conn["p2p"])
    check.measurements("pair_matrices", connectivity_rules.matrices(conn["p2p"], "node"))
    fig = figures["connectivity.p2p_min_gbps"]
    cause = forced_transport(conn.get("transport"))
    if cause and not fig.unmeasured and cluster.judge.fails(fig.metric, fig.value):
        fig.notes.append(cause)
    check(fig)


def test_transport_matches_the_hardware(
    cluster: ClusterRun, conn: connectivity_rules.ConnectivityResult, check: Checker
) -> None:
    """Every GPU pair that NVLink joins carried its traffic over NVLink (NCCL's P2P), not SHM or the network."""
    require_node_peers(cluster)
    transport_figure(check, "connectivity.transport_mismatches", conn.get("transport"))


def test_barrier_latency(figures: dict[str, Figure], check: Checker) -> None:
    check(figures["connectivity.barrier_latency_us"])


def test_rendezvous_time(figures: dict[str, Figure], check: Checker) -> None:
    check(figures["connectivity.rendezvous_s"])
