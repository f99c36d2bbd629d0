"""The training family's rules: a strategy's run (its part of the training job's result) in, its figures out;
the scaling efficiency and the canary from two runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from acceptance.families.answers import clock_events_text
from acceptance.families.gpu_users import foreign_text
from acceptance.families.training import Baseline, canary, curves_text, scaling_efficiency
from acceptance.numbers import fmt
from acceptance.schema.figure import Figure

# a strategy's run as the training job's result holds it, read by its fields' names
Run = dict[str, Any]


def _spread(run: Run) -> str:
    count = len(run["windows"])
    steps = run["setup"]["steps"]
    return (
        f"median of {count} timed windows ({steps} steps): IQR {run['tokens_per_s_per_gpu_q1']:,.0f}-"
        f"{run['tokens_per_s_per_gpu_q3']:,.0f}, min {run['tokens_per_s_per_gpu_min']:,.0f}, "
        f"max {run['tokens_per_s_per_gpu_max']:,.0f} ((max - min) / median {run['tokens_per_s_per_gpu_spread']:.1%})"
    )


def _clocks(run: Run) -> str:
    """The clock events of the timed steps per rank, after another job's process seen on a rank's GPU (the
    cause of a slow run, when there was one)."""
    cause = foreign_text(run.get("foreign"), run.get("xids"))
    found = run.get("clock_events") or {}
    if not found:
        events = f"clock events: {run.get('clock_events_reason') or 'none seen during the timed steps'}"
    else:
        events = "clock events during the timed steps: " + "; ".join(
            f"rank {rank} {clock_events_text(events)}" for rank, events in found.items()
        )
    return f"{cause}\n{events}" if cause else events


def _summary(run: Run) -> str:
    return (
        f"{run['strategy']} {run['model']} {run['precision']} on {run['world_size']} rank(s), "
        f"compile {run['compile']}: {run['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {_spread(run)}; "
        f"step {run['step_time_s'] * 1e3:.1f} ms ± {run['step_time_std_s'] * 1e3:.1f}\n{_clocks(run)}"
    )


def _figure(strategy: str, name: str, unit: str, value: float, detail: str) -> Figure:
    return Figure(f"training.{strategy}.{name}", unit, value, findings=[detail])


def strategy_figures(strategy: str, run: Run) -> dict[str, Figure]:
    """Every figure of one strategy's run, by metric; MFU and utilisation skip where they were not measured,
    saying why."""
    per_rank = ", ".join(f"{m:.2f}" for m in run["peak_mem_per_rank_gib"])
    found = [
        _figure(strategy, "tokens_per_s_per_gpu", "tokens/s", run["tokens_per_s_per_gpu"], _summary(run)),
        _figure(strategy, "step_time_s", "s", run["step_time_s"], _summary(run)),
        _figure(strategy, "step_time_std_s", "s", run["step_time_std_s"], _summary(run)),
        _figure(
            strategy, "peak_mem_gib", "GiB", run["peak_mem_gib"],
            f"max over ranks of {run['peak_mem_source']}; per rank GiB: {per_rank}",
        ),
        _mfu(strategy, run),
        _utilisation(strategy, run),
        _figure(strategy, "loss_first", "nats", run["loss_first"], "first step"),
        _figure(strategy, "loss_last", "nats", run["loss_last"], "last step"),
        loss_figure(f"training.{strategy}.loss_ratio", run),
    ]  # fmt: skip
    return {fig.metric: fig for fig in found}


def loss_figure(metric: str, run: Run) -> Figure:
    """The last step's loss over the first's (the training family's and the reference workload's)."""
    detail = (
        f"loss {run['loss_first']:.4f} at the first step, {run['loss_last']:.4f} at step {len(run['losses'])}: "
        "a run that does not learn is broken (data, optimizer, precision or gradient reduction)"
    )
    return Figure(metric, "last/first", run["loss_ratio"], findings=[detail])


def optional_figure(metric: str, unit: str, value: float | None, missing: str, detail: Callable[[], str]) -> Figure:
    """A figure the run may not have measured (no GPU peak, no NVML): skipped saying why (``missing``) where
    ``value`` is None, else with its ``detail``."""
    if value is None:
        return Figure(metric, unit, skip=missing)
    return Figure(metric, unit, value, findings=[detail()])


def _mfu(strategy: str, run: Run) -> Figure:
    return optional_figure(
        f"training.{strategy}.mfu", "fraction", run["mfu"], f"MFU not measured: {run['mfu_reason']}",
        lambda: f"{run['tokens_per_s_per_gpu']:,.0f} tokens/s x {run['flops_per_token']:.4g} FLOP/token "
        f"({run['model_shape']['flops_formula']}) / dense {run['precision']} peak {run['peak_tflops']:g} TFLOP/s "
        f"({run['peak_tflops_source']})\n{_clocks(run)}",
    )  # fmt: skip


def _utilisation(strategy: str, run: Run) -> Figure:
    return optional_figure(
        f"training.{strategy}.gpu_util_pct", "%", run["gpu_util_pct"],
        f"GPU utilisation not measured: {run['gpu_util_reason']}",
        lambda: f"lowest over ranks; per rank: {run['gpu_util_per_rank_pct']}\n{_clocks(run)}",
    )  # fmt: skip


def wall_figure(strategy: str, run: Run, shared: list[str], job_wall_s: float) -> Figure:
    """The strategy's part of the training job it ran in (``shared``: the strategies of that job, which took
    ``job_wall_s`` as a whole)."""
    detail = (
        f"{strategy}'s part of the training job {run['job']}: model build, wrap and compilation, warm-up, timed "
        f"steps, teardown; the job ran {', '.join(shared)} in {job_wall_s:.1f} s, "
        "torchrun start-up, imports and rendezvous included"
    )
    return _figure(strategy, "wall_s", "s", run["wall_s"], detail)


def scaling_figure(strategy: str, full: Run, small: Run, base: Baseline) -> Figure:
    """Tokens/s/GPU on the whole world over the baseline's (``base``), with the processes of other jobs seen
    on either run's GPUs as the cause of a low one."""
    detail = (
        f"{strategy}: {full['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU on {full['world_size']} ranks over "
        f"{small['tokens_per_s_per_gpu']:,.0f} on the baseline, {base.label} (medians over timed windows; "
        f"spread (max - min) / median {fmt(full['tokens_per_s_per_gpu_spread'])} and "
        f"{fmt(small['tokens_per_s_per_gpu_spread'])})"
    )
    cause = foreign_text(full.get("foreign"), full.get("xids")) or foreign_text(small.get("foreign"), small.get("xids"))
    detail += f"\n{cause}" if cause else ""
    return Figure("training.scaling_efficiency", "fraction", scaling_efficiency(full, small), findings=[detail])


def canary_figure(reference_name: str, reference: Run, strategy: str, other: Run, steps: int, rtol: float) -> Figure:
    """The largest relative difference of ``strategy``'s loss curve from the reference strategy's over the
    first ``steps`` steps, same seed and data."""
    found = canary(reference["losses"], other["losses"], steps, rtol)
    detail = (
        f"same seed and data through {reference_name} and {strategy}; largest difference at step "
        f"{found['worst_step']}:\n" + curves_text(reference_name, reference["losses"], strategy, other["losses"], steps)
    )
    return Figure(f"training.canary.{strategy}.max_rel_diff", "relative", found["max_rel_diff"], findings=[detail])
