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


def _row(
    check: Checker, result: internode_rules.InternodeResult, scope: str, case: tuple[str, str], metric: str
) -> internode_rules.InternodeRow:
    """The probe's row for the case; a row it did not measure fails ``metric`` as unmeasured."""
    op, size = case
    for row in result["rows"]:
        if row["scope"] == scope and row["op"] == op and row["size"] == size:
            return row
    check.missing(metric, "GB/s", f"the internode probe has no {scope} row for {op} at {size}")


def _detail(row: internode_rules.InternodeRow) -> str:
    groups = "; ".join(f"ranks {g['ranks_of_group']}: {g['busbw_gbps']:.2f} GB/s" for g in row["groups"])
    return f"{row['op']} {row['size']} over {row['ranks']} ranks, timing {row['timing']}; {groups}"


def _isolating(run: ClusterRun, check: Checker, metric: str, value: float, detail: str) -> tuple[str, Isolation | None]:
    """The figure's detail; when the figure misses its bound, with the isolation's verdict (one line) added."""
    found = isolate_if_failing(run, metric, value)
    if found is None:
        return detail, None
    check.measurements("isolation", found.evidence())
    return f"{detail}\n{found.message()}", found


def test_internode_busbw(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    metric = "internode.all.{}.busbw_gbps@{}".format(*inter_case)
    row = _row(check, internode, "all", inter_case, metric)
    check.measurements("row", row)
    detail, _ = _isolating(cluster, check, metric, row["busbw_gbps"], _detail(row))
    check(metric, row["busbw_gbps"], "GB/s", detail)


def test_intranode_busbw(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    require_node_peers(cluster, "an intra-node figure")
    metric = "internode.intranode.{}.busbw_gbps@{}".format(*inter_case)
    row = _row(check, internode, "intranode", inter_case, metric)
    check.measurements("row", row)
    # the slowest node's figure: a gate on it names a node that is slow inside itself
    check(metric, row["busbw_gbps"], "GB/s", _detail(row))


def test_internode_efficiency(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    require_node_peers(cluster, "the internode efficiency")
    metric = "internode.{}.efficiency@{}".format(*inter_case)
    across = _row(check, internode, "all", inter_case, metric)
    inside = _row(check, internode, "intranode", inter_case, metric)
    value = across["busbw_gbps"] / inside["busbw_gbps_mean"]
    detail = (
        f"busbw {across['busbw_gbps']:.2f} GB/s over {across['ranks']} ranks / "
        f"{inside['busbw_gbps_mean']:.2f} GB/s inside one node (mean of {len(inside['groups'])} nodes)"
    )
    check(metric, value, "ratio", detail)


def test_internode_data_correct(
    internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    op, size = inter_case
    rows = [r for r in internode["rows"] if r["op"] == op and r["size"] == size]
    figures = [(f"internode.{r['scope']}.{op}.wrong@{size}", r["wrong"], "elements", "") for r in rows]
    check.all(figures)


def test_one_gpu_per_node_busbw(
    cluster: ClusterRun, internode: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker
) -> None:
    if not INTERNODE.section_of(cluster.profile.model).one_gpu_per_node:
        pytest.skip(f"internode.one_gpu_per_node is off in profile {cluster.profile.name}")
    metric = "internode.one_gpu_per_node.{}.busbw_gbps@{}".format(*inter_case)
    row = _row(check, internode, "one_gpu_per_node", inter_case, metric)
    check.measurements("row", row)
    check(metric, row["busbw_gbps"], "GB/s", _detail(row))


def test_ring_busbw(ring: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker) -> None:
    metric = "internode.ring.{}.busbw_gbps@{}".format(*inter_case)
    row = _row(check, ring, "all", inter_case, metric)
    check.measurements("row", {**row, "nccl_algo": ring["nccl_algo"]})
    check(metric, row["busbw_gbps"], "GB/s", _detail(row))


def test_ring_data_correct(ring: internode_rules.InternodeResult, inter_case: tuple[str, str], check: Checker) -> None:
    metric = "internode.ring.{}.wrong@{}".format(*inter_case)
    check(metric, _row(check, ring, "all", inter_case, metric)["wrong"], "elements")


@pytest.fixture(scope="module")
def rails(cluster: ClusterRun) -> internode_rules.ConnectivityResult:
    require_nodes(cluster, "the rails across nodes")
    # the connectivity probe measures every link in one job: inside nodes first, then the rails
    return probe_result(cluster, "connectivity", internode_rules.ConnectivityResult, env=isolation_env(cluster))


def test_rail_data_correct(rails: internode_rules.ConnectivityResult, check: Checker) -> None:
    wrong = internode_rules.wrong(rails["rails"])
    check("internode.rail_wrong", rails["rails_wrong"], "elements", wrong)


def test_rail_slowest(cluster: ClusterRun, rails: internode_rules.ConnectivityResult, check: Checker) -> None:
    """Last in this module: an isolation that an earlier figure started is replayed here, so its count of
    culprits is recorded once per run, and 0 when no figure across nodes missed its bound."""
    measured = rails["rails"]
    check.measurements("rails", measured)
    check.measurements("rail_matrices", internode_rules.matrices(measured, "gpu"))
    detail = (
        f"{len(measured)} rail links, {rails['p2p_size']} each way in {rails['rails_rounds']} round(s); "
        f"slowest: {internode_rules.slowest(measured)}"
    )
    slowest = rails["rails_slowest"]
    if slowest is None:  # nodes that measured no rail between them: never a pass
        check.missing("internode.rail_min_gbps", "GB/s", f"no rail across nodes was measured ({len(measured)} links)")
    value = slowest["gbps"]
    detail, found = _isolating(cluster, check, "internode.rail_min_gbps", value, detail)
    found = found or earlier_isolation(cluster)
    if found is not None:
        check.measurements("isolation", found.evidence())
    culprits = len(found.culprits) if found else 0
    verdict = found.message() if found else "no figure across nodes missed its bound: no isolation ran"
    check.all(
        [
            ("internode.rail_min_gbps", value, "GB/s", detail),
            ("internode.isolation_culprits", culprits, "nodes", verdict),
        ]
    )
