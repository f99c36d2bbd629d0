"""``check`` takes a family's ``Figure``: its detail, its bound from the run, what was not measured, its skip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from acceptance.plugin.checker import Checker
from acceptance.profile.loader import load
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.placement import Placement
from acceptance.schema.bounds import Threshold
from acceptance.schema.figure import Figure

NODEID = "tests_cluster/test_connectivity.py::test_world_size"


@pytest.fixture
def run(tmp_path: Path) -> Iterator[ClusterRun]:
    found = ClusterRun(load("local-cpu"), Placement(1, 0, "127.0.0.1", 29400, "default"), tmp_path / "ev", worker=False)
    yield found
    found.close()


def _check(run: ClusterRun) -> Checker:
    return Checker(run, cast(Any, SimpleNamespace(nodeid=NODEID, user_properties=[])))


def _recorded(run: ClusterRun) -> dict[str, Any]:
    return run.evidence.test(NODEID).checks[-1].model_dump()


def test_a_figure_is_checked_against_its_own_bound_with_its_detail(run: ClusterRun) -> None:
    fig = Figure("connectivity.world_size", "ranks", 3, bound=Threshold(eq=2, source="nodes x ranks per node"))
    fig.findings.append("node 0 has 3 ranks")
    with pytest.raises(pytest.fail.Exception, match=r"connectivity\.world_size"):
        _check(run)(fig)
    recorded = _recorded(run)
    assert (recorded["metric"], recorded["value"], recorded["verdict"]) == ("connectivity.world_size", 3, "fail")
    assert recorded["detail"] == "node 0 has 3 ranks"


def test_a_figure_within_its_bound_passes(run: ClusterRun) -> None:
    _check(run)(Figure("connectivity.world_size", "ranks", 2, bound=Threshold(eq=2, source="nodes x ranks per node")))
    assert _recorded(run)["verdict"] == "pass"


def test_a_figure_some_units_did_not_measure_fails_whatever_its_value(run: ClusterRun) -> None:
    fig = Figure("connectivity.allreduce_wrong", "elements", 0, unmeasured=["rank 1 sent nothing"])
    with pytest.raises(pytest.fail.Exception, match="rank 1 sent nothing"):
        _check(run)(fig)
    assert _recorded(run)["verdict"] == "fail"


def test_a_figure_that_does_not_apply_skips_saying_why(run: ClusterRun) -> None:
    with pytest.raises(pytest.skip.Exception, match="no NVLink"):
        _check(run)(Figure("connectivity.p2p_min_gbps", "GB/s", skip="no NVLink"))
    assert not any(case.checks for case in run.evidence.doc.tests)


def test_several_figures_are_checked_each_against_its_own_bound(run: ClusterRun) -> None:
    held = Figure("connectivity.world_size", "ranks", 2, bound=Threshold(eq=2, source="nodes x ranks per node"))
    missed = Figure("connectivity.missing_ranks", "ranks", 1, findings=["node 1 has 1 ranks, expected 2"])
    with pytest.raises(pytest.fail.Exception, match=r"connectivity\.missing_ranks") as failed:
        _check(run).all([held, missed])
    assert "world_size" not in str(failed.value)
    checks = run.evidence.test(NODEID).checks
    assert [(c.metric, c.verdict) for c in checks] == [
        ("connectivity.world_size", "pass"),
        ("connectivity.missing_ranks", "fail"),
    ]
