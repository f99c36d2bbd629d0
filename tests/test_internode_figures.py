"""Internode's rules: the probe's rows in, figures out; a row the probe did not measure is unmeasured."""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import internode
from acceptance.families.internode import InternodeResult

CASE = ("all_reduce", "1M")


def _row(scope: str, busbw: float, wrong: int = 0) -> dict[str, Any]:
    groups = [{"ranks_of_group": [0, 2], "busbw_gbps": busbw}]
    return {"scope": scope, "op": "all_reduce", "size": "1M", "ranks": 4, "timing": "eager", "busbw_gbps": busbw,
            "busbw_gbps_mean": busbw, "groups": groups, "wrong": wrong}  # fmt: skip


def _result(*rows: dict[str, Any]) -> InternodeResult:
    return {"rows": list(rows), "nccl_algo": "auto"}  # type: ignore[typeddict-item]


def test_the_efficiency_is_across_over_inside_one_node() -> None:
    fig = internode.efficiency_figure(_result(_row("all", 2.0), _row("intranode", 8.0)), CASE)
    assert (fig.metric, fig.value) == ("internode.all_reduce.efficiency@1M", 0.25)
    assert fig.detail == "busbw 2.00 GB/s over 4 ranks / 8.00 GB/s inside one node (mean of 1 nodes)"


def test_a_row_the_probe_did_not_measure_fails_as_unmeasured() -> None:
    fig = internode.efficiency_figure(_result(_row("all", 2.0)), CASE)
    assert fig.unmeasured_text == "the internode probe has no intranode row for all_reduce at 1M"
    busbw = internode.busbw_figure(_result(), "all", CASE, "internode.all.all_reduce.busbw_gbps@1M")
    assert busbw.unmeasured and busbw.unit == "GB/s"


def test_busbw_names_each_group_and_wrong_counts_each_scope() -> None:
    result = _result(_row("all", 2.0, wrong=3), _row("intranode", 8.0))
    busbw = internode.busbw_figure(result, "all", CASE, "internode.all.all_reduce.busbw_gbps@1M")
    assert busbw.detail == "all_reduce 1M over 4 ranks, timing eager; ranks [0, 2]: 2.00 GB/s"
    wrong = {f.metric: f.value for f in internode.wrong_figures(result, CASE)}
    assert wrong == {"internode.all.all_reduce.wrong@1M": 3, "internode.intranode.all_reduce.wrong@1M": 0}


@pytest.mark.parametrize(("slowest", "unmeasured"), [(None, True), ({"gbps": 1.5}, False)])
def test_the_slowest_rail_or_none_measured(slowest: dict[str, float] | None, unmeasured: bool) -> None:
    rails = {"rails": [], "rails_wrong": 0, "rails_slowest": slowest, "rails_rounds": 1, "p2p_size": "1M"}
    wrong, fig = internode.rail_figures(rails)  # type: ignore[arg-type]
    assert (wrong.value, bool(fig.unmeasured)) == (0, unmeasured)
    assert fig.value == (0.0 if slowest is None else 1.5)
