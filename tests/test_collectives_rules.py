"""The collectives' rules (``families.collectives.rules``): the sweep's result in, one ``Figure`` per metric of
the profile's cases out; a case the sweep did not measure is said as not measured, never a pass."""

from __future__ import annotations

from acceptance.families.collectives import CollectiveRow, Collectives, SweepResult, figures, rules
from acceptance.families.collectives.lateness import RankSpread, Spread
from acceptance.profile.metrics import shape_of
from acceptance.schema.figure import Figure

SECTION = Collectives(ops=["all_reduce", "all_gather"], sizes=["64K", "1M"], spread_sizes=["1M"])


def _row(op: str, size: str, nbytes: int, wrong: int = 0) -> CollectiveRow:
    seconds = [[1e-4] * 5, [1e-4, 1e-4, 2e-4, 1e-4, 1e-4]]
    return {
        "op": op,
        "size": size,
        "size_bytes": nbytes,
        "bytes": nbytes,
        "count": nbytes // 4,
        "wrong": wrong,
        "timing": "eager",
        **figures(op, nbytes, seconds, 2, [1.2e-4, 1e-4]),
    }


def _rank(p99_us: float) -> RankSpread:
    return {"median_us": 50.0, "p99_us": 60.0, "cv": 0.1, "lateness_p99_us": p99_us, "lateness_mean_us": 1.0}


def _spread(op: str, *p99s: float) -> Spread:
    return {"op": op, "size": "1M", "calls": 100, "ranks": [_rank(p) for p in p99s]}


def _sweep(rows: list[CollectiveRow], spread: list[Spread] | None) -> SweepResult:
    sweep: SweepResult = {
        "world_size": 2,
        "dtype": "float32",
        "backend": "gloo",
        "rows": rows,
        "nccl_version": None,
        "nccl_algo": "auto",
        "nccl_env": {},
    }
    if spread is not None:
        sweep["spread"] = spread
    return sweep


ROWS = [_row(op, size, n) for op in SECTION.ops for size, n in (("64K", 65536), ("1M", 1 << 20))]
HEALTHY = [_spread("all_reduce", 20.0, 30.0), _spread("all_gather", 25.0, 20.0)]


def by_metric(sweep: SweepResult, section: Collectives = SECTION) -> dict[str, Figure]:
    return {f.metric: f for f in rules.evaluate(sweep, section)}


def test_every_case_s_figures_are_the_family_s_metrics_with_the_row_s_values() -> None:
    found = by_metric(_sweep(ROWS, HEALTHY))
    assert all(shape_of(metric) is not None for metric in found), sorted(found)
    cases = [(op, size) for op in SECTION.ops for size in SECTION.sizes]
    for (op, size), row in zip(cases, ROWS, strict=True):
        assert found[f"collectives.{op}.busbw_gbps@{size}"].value == row["busbw_gbps"]
        assert found[f"collectives.{op}.time_us@{size}"].value == row["time_us"]
        assert found[f"collectives.{op}.wrong@{size}"].value == 0
    # latency below 1 MiB only; lateness at the spread pass's sizes
    assert {m for m in found if ".latency_us@" in m} == {f"collectives.{op}.latency_us@64K" for op in SECTION.ops}
    assert found["collectives.all_reduce.latency_us@64K"].value == ROWS[0]["latency_us"]
    assert found["collectives.all_gather.lateness_p99_us@1M"].value == 25.0
    assert (found["collectives.missing_cases"].value, found["collectives.late_ranks"].value) == (0, 0)
    assert "timing eager; 5 timed windows" in found["collectives.all_reduce.busbw_gbps@64K"].detail


def test_a_case_the_sweep_left_out_is_counted_and_its_figures_are_not_measured() -> None:
    found = by_metric(_sweep(ROWS[1:], HEALTHY))
    assert found["collectives.missing_cases"].value == 1
    assert found["collectives.missing_cases"].detail == "the sweep did not measure all_reduce@64K"
    for metric in ("busbw_gbps", "time_us", "wrong", "latency_us"):
        fig = found[f"collectives.all_reduce.{metric}@64K"]
        assert fig.unmeasured_text == "the sweep has no row for all_reduce at 64K", metric
    old = [{k: v for k, v in row.items() if k != "latency_us"} for row in ROWS]  # a result from before the figure
    fig = by_metric(_sweep(old, HEALTHY))["collectives.all_gather.latency_us@64K"]  # type: ignore[arg-type]
    assert fig.unmeasured_text == "the sweep's rows have no latency_us"


def test_wrong_elements_are_the_figure() -> None:
    rows = [*ROWS[:-1], _row("all_gather", "1M", 1 << 20, wrong=7)]
    assert by_metric(_sweep(rows, HEALTHY))["collectives.all_gather.wrong@1M"].value == 7


def test_a_late_rank_is_counted_and_named_and_a_missing_pass_is_not_measured() -> None:
    late = [_spread("all_reduce", 20.0, 90_000.0), _spread("all_gather", 25.0, 80_000.0)]
    fig = by_metric(_sweep(ROWS, late))["collectives.late_ranks"]
    assert fig.value == 1 and fig.findings[0].startswith("rank 1 arrived late at 2 op/size case(s):")
    for metric in ("collectives.late_ranks", "collectives.all_reduce.lateness_p99_us@1M"):
        assert by_metric(_sweep(ROWS, None))[metric].unmeasured_text == "the sweep recorded no spread pass"
    fig = by_metric(_sweep(ROWS, HEALTHY[:1]))["collectives.late_ranks"]
    assert fig.unmeasured_text == "the spread pass has no figures for all_gather@1M"


def test_no_spread_pass_asked_for_skips_late_ranks_and_says_why() -> None:
    section = SECTION.model_copy(update={"spread_iters": 0})
    found = by_metric(_sweep(ROWS, []), section)
    assert found["collectives.late_ranks"].skip is not None
    assert not [m for m in found if "lateness" in m]
