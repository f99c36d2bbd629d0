"""Training's rules: a strategy's run in, its figures out; a figure the run could not measure skips saying why."""

from __future__ import annotations

from typing import Any

from acceptance.families.training import Baseline
from acceptance.families.training import rules as training

RUN: dict[str, Any] = {
    "strategy": "ddp", "model": "tiny", "precision": "fp32", "world_size": 2, "compile": False, "job": "training",
    "tokens_per_s_per_gpu": 1000.0, "tokens_per_s_per_gpu_q1": 990.0, "tokens_per_s_per_gpu_q3": 1010.0,
    "tokens_per_s_per_gpu_min": 980.0, "tokens_per_s_per_gpu_max": 1020.0, "tokens_per_s_per_gpu_spread": 0.04,
    "windows": [1, 2, 3], "setup": {"steps": 30}, "step_time_s": 0.5, "step_time_std_s": 0.01,
    "peak_mem_gib": 1.5, "peak_mem_per_rank_gib": [1.5, 1.25], "peak_mem_source": "torch.cuda.max_memory_allocated",
    "mfu": None, "mfu_reason": "no peak for the CPU", "gpu_util_pct": None, "gpu_util_reason": "no NVML",
    "losses": [6.0, 5.5, 5.0], "loss_first": 6.0, "loss_last": 5.0, "loss_ratio": 5.0 / 6.0, "wall_s": 4.0,
    "clock_events": {}, "clock_events_reason": None,
}  # fmt: skip


def test_every_figure_of_a_strategy_is_named_under_it() -> None:
    figures = training.strategy_figures("ddp", RUN)
    assert figures["training.ddp.peak_mem_gib"].detail == (
        "max over ranks of torch.cuda.max_memory_allocated; per rank GiB: 1.50, 1.25"
    )
    assert figures["training.ddp.loss_ratio"].value == 5.0 / 6.0
    assert figures["training.ddp.tokens_per_s_per_gpu"].detail.startswith("ddp tiny fp32 on 2 rank(s), compile False")


def test_a_figure_the_run_could_not_measure_skips_with_its_reason() -> None:
    figures = training.strategy_figures("ddp", RUN)
    assert figures["training.ddp.mfu"].skip == "MFU not measured: no peak for the CPU"
    assert figures["training.ddp.gpu_util_pct"].skip == "GPU utilisation not measured: no NVML"


def test_scaling_is_the_whole_world_over_the_baseline() -> None:
    small = {**RUN, "tokens_per_s_per_gpu": 1250.0}
    fig = training.scaling_figure("ddp", RUN, small, Baseline(1, 1, "1 node x 1 rank"))
    assert (fig.metric, fig.value) == ("training.scaling_efficiency", 0.8)
    assert "1,000 tokens/s/GPU on 2 ranks over 1,250 on the baseline, 1 node x 1 rank" in fig.detail


def test_the_canary_names_the_step_where_two_strategies_part() -> None:
    other = {**RUN, "losses": [6.0, 5.5, 5.5]}
    fig = training.canary_figure("ddp", RUN, "fsdp", other, 3, 1e-3)
    assert fig.metric == "training.canary.fsdp.max_rel_diff" and fig.value > 0.09
    assert fig.detail.startswith("same seed and data through ddp and fsdp; largest difference at step")
