"""The collectives' rules: the sweep's result in, its figures out (``Figure``), one per metric the profile's
cases name: per op and size busbw, nccl-tests' time, the small sizes' latency and #wrong; the cases the sweep
left out; per spread case the latest rank's lateness p99, and the ranks that arrived late. A figure the sweep
did not measure says so (``Figure.unmeasured``), which fails it whatever its bound. The causes a figure past
its bound names (the run's settings, another job's processes) are the suite's to add: they need the judge."""

from __future__ import annotations

from acceptance.families.collectives import (
    CollectiveRow,
    Collectives,
    SweepResult,
    latency_sizes,
    lateness,
    spread_cases,
)
from acceptance.families.collectives.lateness import Late, Spread
from acceptance.numbers import fmt
from acceptance.schema.figure import Figure


def row_of(sweep: SweepResult, op: str, size: str) -> CollectiveRow | None:
    """The sweep's row for ``op`` at ``size``; None where it measured none."""
    return next((row for row in sweep["rows"] if row["op"] == op and row["size"] == size), None)


def window_text(row: CollectiveRow) -> str:
    """The timed windows' busbw range, which says whether a low figure was steady or one disturbed stretch."""
    found = row.get("busbw_windows_gbps") or []
    if len(found) < 2:
        return ""
    return (
        f"; {len(found)} timed windows {fmt(min(found))}-{fmt(max(found))} GB/s "
        f"(spread {100 * row['window_spread']:.1f}%; a rank's time is its median window's)"
    )


def _unmeasured(metric: str, unit: str, why: str) -> Figure:
    return Figure(metric, unit, unmeasured=[why])


def _row_figures(sweep: SweepResult, op: str, size: str) -> list[Figure]:
    """busbw, time per call and #wrong of one case."""
    metrics = (("busbw_gbps", "GB/s"), ("time_us", "us"), ("wrong", "elements"))
    row = row_of(sweep, op, size)
    if row is None:
        why = f"the sweep has no row for {op} at {size}"
        return [_unmeasured(f"collectives.{op}.{name}@{size}", unit, why) for name, unit in metrics]
    # no "slowest rank": every rank of a collective waits for the slowest link, so the rank says nothing
    busbw = (
        f"{op} {size}: {row['time_us']:.1f} us mean over ranks (longest {row['time_us_max']:.1f} us); "
        f"algbw {row['algbw_gbps']:.2f} GB/s; timing {row['timing']}{window_text(row)}"
    )
    return [
        Figure(f"collectives.{op}.busbw_gbps@{size}", "GB/s", row["busbw_gbps"], notes=[busbw]),
        # nccl-tests' time per call: the whole timed loop's, the mean over ranks
        Figure(f"collectives.{op}.time_us@{size}", "us", row["time_us"]),
        Figure(f"collectives.{op}.wrong@{size}", "elements", row["wrong"]),
    ]


def _latency(sweep: SweepResult, op: str, size: str) -> Figure:
    """A small message's latency: the median timed window's time per call, which one stall leaves alone."""
    metric = f"collectives.{op}.latency_us@{size}"
    row = row_of(sweep, op, size)
    if row is None:
        return _unmeasured(metric, "us", f"the sweep has no row for {op} at {size}")
    if "latency_us" not in row:  # a result from before the figure
        return _unmeasured(metric, "us", "the sweep's rows have no latency_us")
    factor = row["busbw_gbps"] / row["algbw_gbps"]  # the op's busbw factor (a window's time from its busbw)
    windows = [row["bytes"] * factor / gbps / 1e3 for gbps in row.get("busbw_windows_gbps") or []]
    detail = f"{op} {size}: the whole loop's {row['time_us']:.1f} us a call (nccl-tests' time)"
    if windows:
        detail += f"; {len(windows)} timed windows {min(windows):.1f}-{max(windows):.1f} us a call"
    return Figure(metric, "us", row["latency_us"], notes=[detail])


def _missing_cases(sweep: SweepResult, cfg: Collectives) -> Figure:
    missing = [f"{op}@{size}" for op in cfg.ops for size in cfg.sizes if row_of(sweep, op, size) is None]
    detail = [f"the sweep did not measure {', '.join(missing)}"] if missing else []
    return Figure("collectives.missing_cases", "cases", len(missing), findings=detail)


def _lateness(sweep: SweepResult, op: str, size: str) -> Figure:
    """The spread pass at one op and size: how late the latest rank arrived (its lateness p99), as information."""
    metric = f"collectives.{op}.lateness_p99_us@{size}"
    if "spread" not in sweep:  # a result from before the pass, or a probe that left it out
        return _unmeasured(metric, "us", "the sweep recorded no spread pass")
    found = next((s for s in sweep["spread"] if s["op"] == op and s["size"] == size), None)
    if found is None:
        return _unmeasured(metric, "us", f"the spread pass has no figures for {op} at {size}")
    late = lateness.worst(found)
    mine = found["ranks"][late]
    detail = (
        f"{op} {size}, {found['calls']} blocking calls: latest {lateness.place_text(late, sweep.get('places', []))}: "
        f"{lateness.figures_text(mine)}"
    )
    return Figure(metric, "us", mine["lateness_p99_us"], notes=[detail])


def spread_of(sweep: SweepResult, op: str, size: str) -> Spread | None:
    """The spread pass's figures of one case; None where it made none."""
    return next((s for s in sweep.get("spread", []) if s["op"] == op and s["size"] == size), None)


def late(sweep: SweepResult, cfg: Collectives) -> list[Late]:
    """The ranks that arrived late over the spread pass's cases (``lateness.late_ranks``)."""
    found = [s for s in sweep.get("spread", []) if (s["op"], s["size"]) in spread_cases(cfg)]
    return lateness.late_ranks(found, cfg.spread_ratio, cfg.spread_floor_us, cfg.spread_min_share)


def _late_ranks(sweep: SweepResult, cfg: Collectives) -> Figure:
    """No rank arrives late at the collectives while its peers wait: each rank's lateness p99 against the other
    ranks' at every op and size of the spread pass (``lateness``). The late ranks are named with their node,
    host and GPU."""
    metric, cases = "collectives.late_ranks", spread_cases(cfg)
    if not cases:
        return Figure(
            metric,
            "ranks",
            skip="no spread pass: collectives.spread_iters is 0, or no op of collectives.ops ends on every rank "
            "together (all_reduce, all_gather, reduce_scatter, all_to_all), or collectives.spread_sizes is empty",
        )
    if "spread" not in sweep:
        return _unmeasured(metric, "ranks", "the sweep recorded no spread pass")
    found = [s for s in sweep["spread"] if (s["op"], s["size"]) in cases]
    missed = [f"{op}@{size}" for op, size in cases if not any((s["op"], s["size"]) == (op, size) for s in found)]
    if missed:
        return _unmeasured(metric, "ranks", f"the spread pass has no figures for {', '.join(missed)}")
    named, places = late(sweep, cfg), sweep.get("places", [])
    if named:
        findings = [lateness.late_text(named, places, cfg.spread_ratio, cfg.spread_floor_us)]
        return Figure(metric, "ranks", len({x.rank for x in named}), findings=findings)
    latest = max(found, key=lambda s: s["ranks"][lateness.worst(s)]["lateness_p99_us"])
    worst = lateness.worst(latest)
    summary = (
        f"{len(found)} op/size cases, {found[0]['calls']} blocking calls each; the latest arrival: "
        f"{lateness.place_text(worst, places)} at {latest['op']} {latest['size']}, "
        f"{lateness.figures_text(latest['ranks'][worst])}"
    )
    return Figure(metric, "ranks", 0, notes=[summary])


def evaluate(sweep: SweepResult, cfg: Collectives) -> list[Figure]:
    """Every figure of the profile's cases, from the sweep's result."""
    figures = [_missing_cases(sweep, cfg)]
    figures += [fig for op in cfg.ops for size in cfg.sizes for fig in _row_figures(sweep, op, size)]
    figures += [_latency(sweep, op, size) for op in cfg.ops for size in latency_sizes(cfg)]
    figures += [_lateness(sweep, op, size) for op, size in spread_cases(cfg)]
    return [*figures, _late_ranks(sweep, cfg)]
