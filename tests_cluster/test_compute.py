"""Is every GPU as fast as its siblings: matmul, device memory, host links; and does each compute the same?"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import compute as compute_rules
from acceptance.families.compute import COMPUTE
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Threshold,
    compute_figures,
    earlier_readings,
    fmt,
    probe_wall_s,
    tolerance_below_median,
)

FIGURES = list(compute_rules.FIGURES)


@pytest.fixture(scope="module")
def perf(cluster: ClusterRun) -> dict[str, Any]:
    """Every GPU's figures; one out of bounds, or worse than --cluster-baseline, is measured again before it
    stands (``compute.remeasure``)."""
    return compute_figures(cluster)


def _summary(perf: dict[str, Any], figure: compute_rules.FigureName) -> dict[str, Any]:
    found = perf["summary"].get(figure)
    if found is None:
        pytest.skip(f"{figure} not measured: " + "; ".join(perf["not_measured"].get(figure, [])))
    return found  # type: ignore[no-any-return]


def _check_every_gpu(
    check: Checker,
    perf: dict[str, Any],
    figure: compute_rules.FigureName,
    figures: tuple[str, float, str, str],
    default: Threshold | None = None,
) -> None:
    """Check the figure, with its earlier readings where it was measured again; the min and median are over
    the GPUs that measured it, so the GPUs that could not fail the test as well (``unmeasured``)."""
    metric, value, unit, detail = figures
    detail = "; ".join(part for part in (detail, earlier_readings(perf, figure)) if part)
    unmeasured = compute_rules.partly_measured(perf["rows"], figure)
    check(metric, value, unit, detail, default=default, unmeasured=unmeasured)


def test_every_rank_measured(cluster: ClusterRun, perf: dict[str, Any], check: Checker) -> None:
    check.measurements("per_gpu", perf["rows"])
    check.measurements("summary", perf["summary"])
    if perf.get("remeasured"):
        check.measurements("remeasured", perf["remeasured"])
    missing = cluster.world_size - len(perf["rows"])
    detail = f"{len(perf['rows'])} ranks reported, {cluster.world_size} ran" if missing else ""
    check("compute.missing_ranks", missing, "ranks", detail)


@pytest.mark.parametrize("figure", FIGURES)
def test_slowest(perf: dict[str, Any], figure: compute_rules.FigureName, check: Checker) -> None:
    found = _summary(perf, figure)
    unit = compute_rules.FIGURES[figure][1]
    detail = f"slowest: {found['slowest']}" + (f" ({found['slowest_clocks']})" if found["slowest_clocks"] else "")
    if found["slowest_windows"]:
        detail += f"; its timed windows {fmt(min(found['slowest_windows']))}-{fmt(max(found['slowest_windows']))}"
    _check_every_gpu(check, perf, figure, (f"compute.{figure}_min", found["min"], unit, detail))


@pytest.mark.parametrize("figure", FIGURES)
def test_median(perf: dict[str, Any], figure: compute_rules.FigureName, check: Checker) -> None:
    found = _summary(perf, figure)
    unit = compute_rules.FIGURES[figure][1]
    spread = f"min {fmt(found['min'])}, max {fmt(found['max'])} over {found['count']} GPUs"
    spread += f"; slowest GPU's {found['slowest_clocks']}" if found["slowest_clocks"] else ""
    if found["window_spread_max"]:
        widest, where = found["window_spread_max"], found["window_spread_gpu"]
        spread += f"; widest spread of one GPU's timed windows {widest:.1%} ({where})"
    _check_every_gpu(check, perf, figure, (f"compute.{figure}_median", found["median"], unit, spread))


@pytest.mark.parametrize("figure", FIGURES)
def test_within_tolerance(
    cluster: ClusterRun, perf: dict[str, Any], figure: compute_rules.FigureName, check: Checker
) -> None:
    """Each GPU within the profile's tolerance of the median; the message names every GPU that is not."""
    _summary(perf, figure)
    cfg = COMPUTE.section_of(cluster.profile.model)
    shorts = compute_rules.shortfalls(perf["rows"], figure, cfg.median_of)
    bound = tolerance_below_median(cluster, figure)
    limit = bound.max if bound is not None and bound.max is not None else cfg.tolerance
    off = [compute_rules.describe(s, figure) for s in shorts if s.fraction > limit] or [
        compute_rules.describe(shorts[0], figure)
    ]
    figures = (f"compute.{figure}_below_median", shorts[0].fraction, "fraction", "\n".join(off))
    _check_every_gpu(check, perf, figure, figures)


def test_burnin_same_result(perf: dict[str, Any], check: Checker) -> None:
    verdict = perf["burnin"]
    if verdict is None:
        pytest.skip("burn-in off: set compute.duration_s (seconds) to run it")
    check.measurements("burnin", verdict)
    detail = "\n".join(verdict["disagreeing"])
    if verdict["first"]:
        detail = f"first GPU that disagrees: {verdict['first']}\n{detail}"
    check("compute.burnin_disagreeing_gpus", len(verdict["disagreeing"]), "GPUs", detail)


def test_probe_time(cluster: ClusterRun, perf: dict[str, Any], check: Checker) -> None:
    wall_s = probe_wall_s(cluster, "compute")
    check("compute.wall_s", wall_s, "s", "start to result, imports included where it started its job or the worker")
