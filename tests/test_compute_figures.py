"""Compute's rules give each per-GPU figure's min, median and shortfall as Figures: the slowest GPU named,
the earlier readings of a re-measure kept, a GPU that could not measure failing the figure."""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import compute
from acceptance.schema.family import Result

FIGURE = "h2d_gbps"


def _row(rank: int, gbps: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {"host": "node-0", "node_rank": 0, "rank": rank, "gpu": rank, "uuid": f"GPU-{rank}aaaaaaa",
                           FIGURE: gbps, "windows": {FIGURE: [gbps] * 3} if gbps else {}, "clocks": {},
                           "not_measured": {} if gbps else {FIGURE: "cudaMemcpyAsync failed"}}  # fmt: skip
    return row


def _result(*gbps: float | None) -> Result:
    rows = [_row(rank, v) for rank, v in enumerate(gbps)]
    summary = {f: compute.summary(rows, f) for f in compute.FIGURES}
    return {"rows": rows, "summary": summary, "not_measured": {FIGURE: compute.not_measured(rows, FIGURE)},
            "burnin": None}  # fmt: skip


def test_the_slowest_gpu_and_the_one_past_the_tolerance_are_named() -> None:
    low, median, below = compute.figures_of(_result(53.0, 53.0, 40.0), FIGURE, "cluster", 0.1)
    assert (low.metric, low.value, median.value) == ("compute.h2d_gbps_min", 40.0, 53.0)
    assert low.detail.startswith("slowest: node-0 GPU 2")
    assert below.value == pytest.approx(1 - 40.0 / 53.0)
    assert below.detail.startswith("node-0 GPU 2") and "under the median" in below.detail
    assert not low.unmeasured and not below.skip


def test_a_gpu_that_could_not_measure_fails_the_figure_and_none_skips_it() -> None:
    low, _, _ = compute.figures_of(_result(53.0, None), FIGURE, "cluster", 0.1)
    assert "cudaMemcpyAsync failed" in (low.unmeasured_text or "")
    none = compute.figures_of(_result(None, None), FIGURE, "cluster", 0.1)
    assert {f.skip for f in none} == {f"{FIGURE} not measured: " + "; ".join(compute.not_measured(
        [_row(0, None), _row(1, None)], FIGURE))}  # fmt: skip


def test_a_figure_measured_again_keeps_its_earlier_readings() -> None:
    again = compute.merged(_result(43.8, 53.0), _result(52.0, 53.0), [FIGURE])
    low, _, _ = compute.figures_of(again, FIGURE, "cluster", 0.1)
    assert low.value == 52.0
    assert low.detail.endswith("; measured 2 times: the slowest GPU read 43.8 before this")


def test_burn_in_off_skips_and_a_disagreeing_gpu_is_named_first() -> None:
    assert compute.burnin_figure(_result(53.0)).skip == "burn-in off: set compute.duration_s (seconds) to run it"
    found = {**_result(53.0), "burnin": {"reference": "x", "disagreeing": ["node-0 GPU 1"], "first": "node-0 GPU 1"}}
    fig = compute.burnin_figure(found)
    assert (fig.value, fig.detail) == (1, "first GPU that disagrees: node-0 GPU 1\nnode-0 GPU 1")
