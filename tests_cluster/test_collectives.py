"""Collective bandwidth sweep: busbw per op and size against the profile, data checked like nccl-tests."""

from __future__ import annotations

import dataclasses

import pytest

from acceptance.families import collectives as collectives_rules
from acceptance.families.collectives import COLLECTIVES, rules
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Figure,
    ProfileModel,
    collective_causes,
    foreign_text,
    parametrize_from_profile,
    probe_result,
    require_ranks,
    transport_figure,
)


def _cases(profile: ProfileModel) -> list[tuple[str, str]]:
    section = COLLECTIVES.section_of(profile)
    return [(op, size) for op in section.ops for size in section.sizes]


def _latency_cases(profile: ProfileModel) -> list[tuple[str, str]]:
    section = COLLECTIVES.section_of(profile)
    return [(op, size) for op in section.ops for size in collectives_rules.latency_sizes(section)]


def _spread_cases(profile: ProfileModel) -> list[tuple[str, str]]:
    return collectives_rules.spread_cases(COLLECTIVES.section_of(profile))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_from_profile(metafunc, "coll_case", _cases, ids="-".join)
    no_latency = "the profile sweeps no size below 1M (collectives.sizes): small-message latency is not judged"
    parametrize_from_profile(metafunc, "latency_case", _latency_cases, ids="-".join, none=no_latency)
    parametrize_from_profile(metafunc, "spread_case", _spread_cases, ids="-".join)


@pytest.fixture(scope="module")
def sweep(cluster: ClusterRun) -> collectives_rules.SweepResult:
    require_ranks(cluster, 2, "a collective sweep")
    return probe_result(cluster, "collectives", collectives_rules.SweepResult)


@pytest.fixture(scope="module")
def figures(cluster: ClusterRun, sweep: collectives_rules.SweepResult) -> dict[str, Figure]:
    return {f.metric: f for f in rules.evaluate(sweep, COLLECTIVES.section_of(cluster.profile.model))}


def _with_causes(fig: Figure, causes: str) -> Figure:
    """``fig`` with the causes its value names past its bound, after its own lines (the module's figures are
    shared by its tests: a copy)."""
    return dataclasses.replace(fig, notes=[*fig.notes, causes.lstrip("\n")]) if causes else fig


def _causes(
    cluster: ClusterRun,
    sweep: collectives_rules.SweepResult,
    fig: Figure,
    case: tuple[str, str],
    culprit: bool = False,
) -> str:
    """The causes ``fig`` (of the case's call) names past its bound; none for a figure not measured."""
    row = rules.row_of(sweep, *case)
    if row is None or fig.unmeasured:
        return ""
    found, foreign = sweep.get("transport"), sweep.get("foreign")
    return collective_causes(cluster, fig.metric, fig.value, found, foreign, row["bytes"], culprit=culprit)


def test_sweep_complete(sweep: collectives_rules.SweepResult, figures: dict[str, Figure], check: Checker) -> None:
    check.measurements("sweep", sweep)
    check(figures["collectives.missing_cases"])


def test_busbw(
    cluster: ClusterRun,
    sweep: collectives_rules.SweepResult,
    figures: dict[str, Figure],
    coll_case: tuple[str, str],
    check: Checker,
) -> None:
    fig = figures["collectives.{}.busbw_gbps@{}".format(*coll_case)]
    row = rules.row_of(sweep, *coll_case)
    if row is not None:
        check.measurements("row", row)
    check(_with_causes(fig, _causes(cluster, sweep, fig, coll_case, culprit=True)))


def test_time_per_call(
    cluster: ClusterRun,
    sweep: collectives_rules.SweepResult,
    figures: dict[str, Figure],
    coll_case: tuple[str, str],
    check: Checker,
) -> None:
    """nccl-tests' time per call: the whole timed loop's, the mean over ranks."""
    fig = figures["collectives.{}.time_us@{}".format(*coll_case)]
    check(_with_causes(fig, _causes(cluster, sweep, fig, coll_case)))


def test_latency(
    cluster: ClusterRun,
    sweep: collectives_rules.SweepResult,
    figures: dict[str, Figure],
    latency_case: tuple[str, str],
    check: Checker,
) -> None:
    """A small message's latency: the median timed window's time per call, which one stall leaves alone."""
    fig = figures["collectives.{}.latency_us@{}".format(*latency_case)]
    check(_with_causes(fig, _causes(cluster, sweep, fig, latency_case)))


def test_data_correct(figures: dict[str, Figure], coll_case: tuple[str, str], check: Checker) -> None:
    check(figures["collectives.{}.wrong@{}".format(*coll_case)])


def test_transport_matches_the_hardware(sweep: collectives_rules.SweepResult, check: Checker) -> None:
    """The collectives' traffic between GPUs that NVLink joins went over NVLink (NCCL's P2P)."""
    transport_figure(check, "collectives.transport_mismatches", sweep.get("transport"))


def test_lateness(
    sweep: collectives_rules.SweepResult, figures: dict[str, Figure], spread_case: tuple[str, str], check: Checker
) -> None:
    """The spread pass at one op and size: how late the latest rank arrived (its lateness p99), as information."""
    found = rules.spread_of(sweep, *spread_case)
    if found is not None:
        check.measurements("spread", found)
    check(figures["collectives.{}.lateness_p99_us@{}".format(*spread_case)])


def test_late_ranks(
    cluster: ClusterRun, sweep: collectives_rules.SweepResult, figures: dict[str, Figure], check: Checker
) -> None:
    """No rank arrives late at the collectives while its peers wait (a GPU another process shares, a host core
    another task takes, a NIC that stalls): each rank's lateness p99 against the other ranks' at every op and
    size of the spread pass (``acceptance.families.collectives.rules``)."""
    fig = figures["collectives.late_ranks"]
    if fig.skip or fig.unmeasured:
        check(fig)  # skips, or fails as not measured
        return
    late = rules.late(sweep, COLLECTIVES.section_of(cluster.profile.model))
    ranks = {x.rank for x in late}
    named = {str(r): seen for r, seen in (sweep.get("foreign") or {}).items() if int(r) in ranks}
    cause = foreign_text(named)
    check.measurements("late", [{"rank": x.rank, "op": x.op, "size": x.size, "bound_us": x.bound_us} for x in late])
    check(_with_causes(fig, cause))
