"""Collective bandwidth sweep: busbw per op and size against the profile, data checked like nccl-tests."""

from __future__ import annotations

import pytest

from acceptance.families import collectives as collectives_rules
from acceptance.families.collectives import COLLECTIVES, lateness
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    ProfileModel,
    collective_causes,
    fmt,
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


def _row(
    check: Checker, sweep: collectives_rules.SweepResult, case: tuple[str, str], metric: str, unit: str
) -> collectives_rules.CollectiveRow:
    """The sweep's row for the case; a case it did not measure fails ``metric`` as unmeasured."""
    op, size = case
    for row in sweep["rows"]:
        if row["op"] == op and row["size"] == size:
            return row
    check.missing(metric, unit, f"the sweep has no row for {op} at {size}")


def test_sweep_complete(cluster: ClusterRun, sweep: collectives_rules.SweepResult, check: Checker) -> None:
    check.measurements("sweep", sweep)
    cfg = COLLECTIVES.section_of(cluster.profile.model)
    missing = [
        f"{op}@{size}"
        for op in cfg.ops
        for size in cfg.sizes
        if not any(r["op"] == op and r["size"] == size for r in sweep["rows"])
    ]
    detail = f"the sweep did not measure {', '.join(missing)}" if missing else ""
    check("collectives.missing_cases", len(missing), "cases", detail)


def test_busbw(
    cluster: ClusterRun, sweep: collectives_rules.SweepResult, coll_case: tuple[str, str], check: Checker
) -> None:
    op, size = coll_case
    metric = f"collectives.{op}.busbw_gbps@{size}"
    row = _row(check, sweep, coll_case, metric, "GB/s")
    # no "slowest rank": every rank of a collective waits for the slowest link, so the rank says nothing
    detail = (
        f"{op} {size}: {row['time_us']:.1f} us mean over ranks (longest {row['time_us_max']:.1f} us); "
        f"algbw {row['algbw_gbps']:.2f} GB/s; timing {row['timing']}{window_text(row)}"
    )
    detail += _causes(cluster, sweep, metric, row, row["busbw_gbps"], culprit=True)
    check.measurements("row", row)
    check(metric, row["busbw_gbps"], "GB/s", detail)


def _causes(
    cluster: ClusterRun,
    sweep: collectives_rules.SweepResult,
    metric: str,
    row: collectives_rules.CollectiveRow,
    value: float,
    culprit: bool = False,
) -> str:
    """The causes ``metric`` (of ``row``'s call) names past its bound."""
    found, foreign = sweep.get("transport"), sweep.get("foreign")
    return collective_causes(cluster, metric, value, found, foreign, row["bytes"], culprit=culprit)


def window_text(row: collectives_rules.CollectiveRow) -> str:
    """The timed windows' busbw range, which says whether a low figure was steady or one disturbed stretch."""
    found = row.get("busbw_windows_gbps") or []
    if len(found) < 2:
        return ""
    return (
        f"; {len(found)} timed windows {fmt(min(found))}-{fmt(max(found))} GB/s "
        f"(spread {100 * row['window_spread']:.1f}%; a rank's time is its median window's)"
    )


def test_time_per_call(
    cluster: ClusterRun, sweep: collectives_rules.SweepResult, coll_case: tuple[str, str], check: Checker
) -> None:
    """nccl-tests' time per call: the whole timed loop's, the mean over ranks."""
    metric = "collectives.{}.time_us@{}".format(*coll_case)
    row = _row(check, sweep, coll_case, metric, "us")
    check(metric, row["time_us"], "us", _causes(cluster, sweep, metric, row, row["time_us"]).lstrip("\n"))


def test_latency(
    cluster: ClusterRun, sweep: collectives_rules.SweepResult, latency_case: tuple[str, str], check: Checker
) -> None:
    """A small message's latency: the median timed window's time per call, which one stall leaves alone."""
    metric = "collectives.{}.latency_us@{}".format(*latency_case)
    row = _row(check, sweep, latency_case, metric, "us")
    if "latency_us" not in row:  # a result from before the figure
        check.missing(metric, "us", "the sweep's rows have no latency_us")
    factor = row["busbw_gbps"] / row["algbw_gbps"]  # the op's busbw factor (a window's time from its busbw)
    windows = [row["bytes"] * factor / gbps / 1e3 for gbps in row.get("busbw_windows_gbps") or []]
    detail = f"{latency_case[0]} {latency_case[1]}: the whole loop's {row['time_us']:.1f} us a call (nccl-tests' time)"
    if windows:
        detail += f"; {len(windows)} timed windows {min(windows):.1f}-{max(windows):.1f} us a call"
    check(metric, row["latency_us"], "us", detail + _causes(cluster, sweep, metric, row, row["latency_us"]))


def test_data_correct(sweep: collectives_rules.SweepResult, coll_case: tuple[str, str], check: Checker) -> None:
    metric = "collectives.{}.wrong@{}".format(*coll_case)
    check(metric, _row(check, sweep, coll_case, metric, "elements")["wrong"], "elements")


def test_transport_matches_the_hardware(sweep: collectives_rules.SweepResult, check: Checker) -> None:
    """The collectives' traffic between GPUs that NVLink joins went over NVLink (NCCL's P2P)."""
    transport_figure(check, "collectives.transport_mismatches", sweep.get("transport"))


def _spreads(check: Checker, sweep: collectives_rules.SweepResult, metric: str, unit: str) -> list[lateness.Spread]:
    """The spread pass's figures; a sweep that made none where the profile asks for it fails ``metric`` as
    unmeasured (a result from before the pass, or a probe that left it out)."""
    if "spread" not in sweep:
        check.missing(metric, unit, "the sweep recorded no spread pass")
    return sweep["spread"]


def test_lateness(sweep: collectives_rules.SweepResult, spread_case: tuple[str, str], check: Checker) -> None:
    """The spread pass at one op and size: how late the latest rank arrived (its lateness p99), as information."""
    op, size = spread_case
    metric = f"collectives.{op}.lateness_p99_us@{size}"
    found = next((s for s in _spreads(check, sweep, metric, "us") if s["op"] == op and s["size"] == size), None)
    if found is None:
        check.missing(metric, "us", f"the spread pass has no figures for {op} at {size}")
    check.measurements("spread", found)
    late = lateness.worst(found)
    mine = found["ranks"][late]
    detail = (
        f"{op} {size}, {found['calls']} blocking calls: latest {lateness.place_text(late, sweep.get('places', []))}: "
        f"{lateness.figures_text(mine)}"
    )
    check(metric, mine["lateness_p99_us"], "us", detail)


def test_late_ranks(cluster: ClusterRun, sweep: collectives_rules.SweepResult, check: Checker) -> None:
    """No rank arrives late at the collectives while its peers wait (a GPU another process shares, a host core
    another task takes, a NIC that stalls): each rank's lateness p99 against the other ranks' at every op and
    size of the spread pass (``acceptance.families.collectives.lateness``)."""
    cfg = COLLECTIVES.section_of(cluster.profile.model)
    cases = collectives_rules.spread_cases(cfg)
    if not cases:
        pytest.skip(
            "no spread pass: collectives.spread_iters is 0, or no op of collectives.ops ends on every rank "
            "together (all_reduce, all_gather, reduce_scatter, all_to_all), or collectives.spread_sizes is empty"
        )
    metric = "collectives.late_ranks"
    found = [s for s in _spreads(check, sweep, metric, "ranks") if (s["op"], s["size"]) in cases]
    missed = [f"{op}@{size}" for op, size in cases if not any((s["op"], s["size"]) == (op, size) for s in found)]
    if missed:
        check.missing(metric, "ranks", f"the spread pass has no figures for {', '.join(missed)}")
    ratio, floor = cfg.spread_ratio, cfg.spread_floor_us
    late = lateness.late_ranks(found, ratio, floor, cfg.spread_min_share)
    places = sweep.get("places", [])
    latest = max(found, key=lambda s: s["ranks"][lateness.worst(s)]["lateness_p99_us"])
    worst = lateness.worst(latest)
    detail = (
        f"{len(found)} op/size cases, {found[0]['calls']} blocking calls each; the latest arrival: "
        f"{lateness.place_text(worst, places)} at {latest['op']} {latest['size']}, "
        f"{lateness.figures_text(latest['ranks'][worst])}"
    )
    if late:
        named = {str(r): seen for r, seen in (sweep.get("foreign") or {}).items() if int(r) in {x.rank for x in late}}
        cause = foreign_text(named)
        detail = lateness.late_text(late, places, ratio, floor) + (f"\n{cause}" if cause else "")
    check.measurements("late", [{"rank": x.rank, "op": x.op, "size": x.size, "bound_us": x.bound_us} for x in late])
    check(metric, len({x.rank for x in late}), "ranks", detail)
