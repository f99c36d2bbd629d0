"""Is every GPU as fast as its siblings: matmul, device memory, host links; and does each compute the same?"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import compute as compute_rules
from acceptance.families.compute import COMPUTE
from acceptance.plugin.api import Checker, ClusterRun, Figure, compute_figures, probe_wall_s, tolerance_below_median

FIGURES = list(compute_rules.FIGURES)
STATS = {"min": 0, "median": 1, "below_median": 2}


@pytest.fixture(scope="module")
def perf(cluster: ClusterRun) -> dict[str, Any]:
    """Every GPU's figures; one out of bounds, or worse than --cluster-baseline, is measured again before it
    stands (``compute.remeasure``)."""
    return compute_figures(cluster)


def _figure(cluster: ClusterRun, perf: dict[str, Any], figure: str, stat: str) -> Figure:
    """The figure's min, median or shortfall under the median; a GPU further under the median than the
    profile's tolerance (``compute.<figure>_below_median``, else ``compute.tolerance``) is named."""
    cfg = COMPUTE.section_of(cluster.profile.model)
    bound = tolerance_below_median(cluster, figure)
    limit = bound.max if bound is not None and bound.max is not None else cfg.tolerance
    return compute_rules.figures_of(perf, figure, cfg.median_of, limit)[STATS[stat]]


def test_every_rank_measured(cluster: ClusterRun, perf: dict[str, Any], check: Checker) -> None:
    check.measurements("per_gpu", perf["rows"])
    check.measurements("summary", perf["summary"])
    if perf.get("remeasured"):
        check.measurements("remeasured", perf["remeasured"])
    check(compute_rules.missing_ranks(perf, cluster.world_size))


@pytest.mark.parametrize("figure", FIGURES)
def test_slowest(cluster: ClusterRun, perf: dict[str, Any], figure: compute_rules.FigureName, check: Checker) -> None:
    check(_figure(cluster, perf, figure, "min"))


@pytest.mark.parametrize("figure", FIGURES)
def test_median(cluster: ClusterRun, perf: dict[str, Any], figure: compute_rules.FigureName, check: Checker) -> None:
    check(_figure(cluster, perf, figure, "median"))


@pytest.mark.parametrize("figure", FIGURES)
def test_within_tolerance(
    cluster: ClusterRun, perf: dict[str, Any], figure: compute_rules.FigureName, check: Checker
) -> None:
    """Each GPU within the profile's tolerance of the median; the message names every GPU that is not."""
    check(_figure(cluster, perf, figure, "below_median"))


def test_burnin_same_result(perf: dict[str, Any], check: Checker) -> None:
    if perf["burnin"] is not None:
        check.measurements("burnin", perf["burnin"])
    check(compute_rules.burnin_figure(perf))


def test_probe_time(cluster: ClusterRun, perf: dict[str, Any], check: Checker) -> None:
    wall_s = probe_wall_s(cluster, "compute")
    check("compute.wall_s", wall_s, "s", "start to result, imports included where it started its job or the worker")
