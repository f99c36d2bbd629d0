"""Across nodes: busbw over every node next to busbw inside one node (their ratio is the internode
efficiency), optionally with NCCL_ALGO=Ring and with one GPU per node (the network alone), and every rail
(GPU i of one node to GPU i of another). When the all-nodes figure or the rails miss their bound, the
isolation rounds name the node and the rail to blame in the failure.

On one node these tests skip and say so; they need one pytest per node or the srun controller.
"""

from __future__ import annotations

import pytest

from acceptance.families import internode as internode_rules
from acceptance.families.internode import INTERNODE
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Figure,
    Isolation,
    ProfileModel,
    earlier_isolation,
    internode_spec,
    isolate_if_failing,
    isolation_env,
    parametrize_from_profile,
    probe_result,
)


def _cases(profile: ProfileModel) -> list[tuple[str, str]]:
    section = INTERNODE.section_of(profile)
    return [(op, size) for op in section.ops for size in section.sizes]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_from_profile(metafunc, "inter_case", _cases, ids="-".join)


def require_nodes(run: ClusterRun, what: str) -> None:
    if run.placement.nodes < 2:
        pytest.skip(
            f"{what} needs at least 2 nodes; this run has {run.placement.nodes} (placement from {run.placement.source})"
        )


def require_node_peers(run: ClusterRun, what: str) -> None:
    if run.topology.nproc_per_node < 2:
        pytest.skip(f"{what} needs at least 2 ranks per node; profile {run.profile.name} runs 1")


@pytest.fixture(scope="module")
def internode(cluster: ClusterRun) -> internode_rules.InternodeResult:
    require_nodes(cluster, "the across-nodes comparison")
    cfg = INTERNODE.section_of(cluster.profile.model)
    scopes = ["all"] + (["intranode"] if cluster.topology.nproc_per_node > 1 else [])
    scopes += ["one_gpu_per_node"] if cfg.one_gpu_per_node else []
    return probe_result(cluster, "internode", internode_rules.InternodeResult, internode_spec(cluster, scopes))


@pytest.fixture(scope="module")
def ring(cluster: ClusterRun) -> internode_rules.InternodeResult:
    require_nodes(cluster, "the NCCL_ALGO=Ring variant")
    if not INTERNODE.section_of(cluster.profile.model).ring:
        pytest.skip(f"internode.ring is off in profile {cluster.profile.name}")
    if cluster.topology.backend != "nccl":
        pytest.skip(f"NCCL_ALGO applies to NCCL; profile {cluster.profile.name} uses {cluster.topology.backend}")
    spec = internode_spec(cluster, ["all"])
    return probe_result(
        cluster, "internode", internode_rules.InternodeResult, spec, key="internode-ring", env={"NCCL_ALGO": "Ring"}
    )


def _measured(check: Checker, result: internode_rules.InternodeResult, scope: str, case: tuple[str, str]) -> None:
    row = internode_rules.row_of(result, scope, case)
    if row is not None:
        check.measurements("row", row)


def _isolating(run: ClusterRun, check: Checker, fig: Figure) -> Isolation | None:
    """When the figure misses its bound across nodes, the isolation rounds; their verdict (one line) is added
    to the figure's detail."""
    found = None if fig.unmeasured else isolate_if_failing(run, fig.metric, fig.value)
    if found is not None:
        check.measurements("isolation", found.evidence())
        fig.notes.append(found.message())
    return found


def test_internode_busbw(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    fig = internode_rules.busbw_figure(
        internode, "all", inter_case, "internode.all.{}.busbw_gbps@{}".format(*inter_case)
    )
    _measured(check, internode, "all", inter_case)
    _isolating(cluster, check, fig)
    check(fig)


def test_intranode_busbw(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    require_node_peers(cluster, "an intra-node figure")
    metric = "internode.intranode.{}.busbw_gbps@{}".format(*inter_case)
    _measured(check, internode, "intranode", inter_case)
    # the slowest node's figure: a gate on it names a node that is slow inside itself
    check(internode_rules.busbw_figure(internode, "intranode", inter_case, metric))


def test_internode_efficiency(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    require_node_peers(cluster, "the internode efficiency")
    check(internode_rules.efficiency_figure(internode, inter_case))


def test_internode_data_correct(
    internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    check.all(internode_rules.wrong_figures(internode, inter_case))


def test_one_gpu_per_node_busbw(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    if not INTERNODE.section_of(cluster.profile.model).one_gpu_per_node:
        pytest.skip(f"internode.one_gpu_per_node is off in profile {cluster.profile.name}")
    metric = "internode.one_gpu_per_node.{}.busbw_gbps@{}".format(*inter_case)
    _measured(check, internode, "one_gpu_per_node", inter_case)
    check(internode_rules.busbw_figure(internode, "one_gpu_per_node", inter_case, metric))


def test_ring_busbw(ring: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker) -> None:
    row = internode_rules.row_of(ring, "all", inter_case)
    if row is not None:
        check.measurements("row", {**row, "nccl_algo": ring["nccl_algo"]})
    check(internode_rules.busbw_figure(ring, "all", inter_case, "internode.ring.{}.busbw_gbps@{}".format(*inter_case)))


def test_ring_data_correct(ring: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker) -> None:
    check(internode_rules.wrong_figure(ring, "all", inter_case, "internode.ring.{}.wrong@{}".format(*inter_case)))


@pytest.fixture(scope="module")
def rails(cluster: ClusterRun) -> internode_rules.ConnectivityResult:
    require_nodes(cluster, "the rails across nodes")
    # the connectivity probe measures every link in one job: inside nodes first, then the rails
    return probe_result(cluster, "connectivity", internode_rules.ConnectivityResult, env=isolation_env(cluster))


def test_rail_data_correct(rails: internode_rules.ConnectivityResult, check: Checker) -> None:
    check(internode_rules.rail_figures(rails)[0])


def test_rail_slowest(cluster: ClusterRun, rails: internode_rules.ConnectivityResult, check: Checker) -> None:
    """Last in this module: an isolation that an earlier figure started is replayed here, so its count of
    culprits is recorded once per run, and 0 when no figure across nodes missed its bound."""
    check.measurements("rails", rails["rails"])
    check.measurements("rail_matrices", internode_rules.matrices(rails["rails"], "gpu"))
    fig = internode_rules.rail_figures(rails)[1]
    if fig.unmeasured:  # nodes that measured no rail between them: never a pass
        check(fig)
    found = _isolating(cluster, check, fig) or earlier_isolation(cluster)
    if found is not None:
        check.measurements("isolation", found.evidence())
    culprits = len(found.culprits) if found else 0
    verdict = found.message() if found else "no figure across nodes missed its bound: no isolation ran"
    check.all([fig, ("internode.isolation_culprits", culprits, "nodes", verdict)])
