"""Short real training runs per strategy: throughput, step time, memory, MFU, utilisation, loss, scaling, canary."""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import training as plan
from acceptance.plugin import Checker, probe_result, probe_wall_s
from acceptance.profile.model import Threshold
from acceptance.run.cluster_run import ClusterRun

LOSS_MUST_FALL = Threshold(max=0.99, source="built-in: the loss must fall by at least 1% over the run")


def run_of(cluster: ClusterRun, strategy: str) -> dict[str, Any]:
    """One torchrun job per strategy, run once per session whichever test asks first."""
    try:
        spec = plan.spec(
            cluster.profile, strategy, cluster.world_size, cluster.topology.nproc_per_node, cluster.placement.nodes
        )
    except plan.TrainingPlanError as exc:
        pytest.fail(str(exc), pytrace=False)
    return probe_result(cluster, plan.PROBE, spec, key=plan.key(strategy))


def _summary(run: dict[str, Any]) -> str:
    return (
        f"{run['strategy']} {run['model']} {run['precision']} on {run['world_size']} rank(s), "
        f"compile {run['compile']}: "
        f"{run['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU (per step: median {run['tokens_per_s_per_gpu_median']:,.0f}, "
        f"p10 {run['tokens_per_s_per_gpu_p10']:,.0f}, p90 {run['tokens_per_s_per_gpu_p90']:,.0f}), "
        f"step {run['step_time_s'] * 1e3:.1f} ms ± {run['step_time_std_s'] * 1e3:.1f}"
    )


def test_tokens_per_s(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    check.measurements("run", run)
    check(f"training.{train_strategy}.tokens_per_s_per_gpu", run["tokens_per_s_per_gpu"], "tokens/s", _summary(run))


def test_tokens_per_s_median(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    metric = f"training.{train_strategy}.tokens_per_s_per_gpu_median"
    check(metric, run["tokens_per_s_per_gpu_median"], "tokens/s", _summary(run))


def test_step_time(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    check(f"training.{train_strategy}.step_time_s", run["step_time_s"], "s", _summary(run))


def test_step_time_std(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    check.measurements("step_times_s", run["step_times_s"])
    check(f"training.{train_strategy}.step_time_std_s", run["step_time_std_s"], "s", _summary(run))


def test_peak_memory(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    per_rank = ", ".join(f"{m:.2f}" for m in run["peak_mem_per_rank_gib"])
    detail = f"max over ranks of {run['peak_mem_source']}; per rank GiB: {per_rank}"
    check(f"training.{train_strategy}.peak_mem_gib", run["peak_mem_gib"], "GiB", detail)


def test_mfu(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    if run["mfu"] is None:
        pytest.skip(f"MFU not measured: {run['mfu_reason']}")
    detail = (
        f"{run['tokens_per_s_per_gpu']:,.0f} tokens/s x {run['flops_per_token']:.4g} FLOP/token "
        f"({run['model_shape']['flops_formula']}) / peak {run['peak_tflops']:g} TFLOP/s ({run['peak_tflops_source']})"
    )
    check(f"training.{train_strategy}.mfu", run["mfu"], "fraction", detail)


def test_gpu_utilisation(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    if run["gpu_util_pct"] is None:
        pytest.skip(f"GPU utilisation not measured: {run['gpu_util_reason']}")
    detail = f"lowest over ranks; per rank: {run['gpu_util_per_rank_pct']}"
    check(f"training.{train_strategy}.gpu_util_pct", run["gpu_util_pct"], "%", detail)


def test_loss_values(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    check.measurements("losses", run["losses"])
    check.all(
        [
            (f"training.{train_strategy}.loss_first", run["loss_first"], "nats", "first step"),
            (f"training.{train_strategy}.loss_last", run["loss_last"], "nats", "last step"),
        ]
    )


def test_loss_falls(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run = run_of(cluster, train_strategy)
    detail = (
        f"loss {run['loss_first']:.4f} at the first step, {run['loss_last']:.4f} at step {len(run['losses'])}: "
        f"a run that does not learn is broken (data, optimizer, precision or gradient reduction)"
    )
    check(f"training.{train_strategy}.loss_ratio", run["loss_ratio"], "last/first", detail, default=LOSS_MUST_FALL)


def test_wall_time(cluster: ClusterRun, train_strategy: str, check: Checker) -> None:
    run_of(cluster, train_strategy)
    detail = "the torchrun job from start to exit: imports, rendezvous, model build, compilation and the steps"
    check(f"training.{train_strategy}.wall_s", probe_wall_s(cluster, plan.key(train_strategy)), "s", detail)


def test_scaling_efficiency(cluster: ClusterRun, check: Checker) -> None:
    training = cluster.profile.model.training
    base = plan.baseline(training, cluster.topology.nproc_per_node, cluster.placement.nodes)
    if isinstance(base, str):
        pytest.skip(f"no scaling baseline: {base}")
    strategy = training.scaling_strategy
    full = run_of(cluster, strategy)
    spec = plan.spec(cluster.profile, strategy, base.world_size, base.ranks_per_node, base.nodes)
    small = probe_result(
        cluster,
        plan.PROBE,
        spec,
        key=f"{plan.key(strategy)}-baseline",
        ranks_per_node=base.ranks_per_node,
        nodes=base.nodes,
    )
    check.measurements("baseline", small)
    detail = (
        f"{strategy}: {full['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU on {full['world_size']} ranks over "
        f"{small['tokens_per_s_per_gpu']:,.0f} on the baseline, {base.label}"
    )
    check("training.scaling_efficiency", plan.scaling_efficiency(full, small), "fraction", detail)


def test_canary(cluster: ClusterRun, canary_strategy: str, check: Checker) -> None:
    training = cluster.profile.model.training
    reference_name = training.strategies[0]
    reference, other = run_of(cluster, reference_name), run_of(cluster, canary_strategy)
    steps = training.canary_steps
    found = plan.canary(reference["losses"], other["losses"], steps, training.canary_rtol)
    check.measurements(
        "curves", {reference_name: reference["losses"][:steps], canary_strategy: other["losses"][:steps]}
    )
    detail = (
        f"same seed and data through {reference_name} and {canary_strategy}; largest difference at step "
        f"{found['worst_step']}:\n"
        + plan.curves_text(reference_name, reference["losses"], canary_strategy, other["losses"], steps)
    )
    default = Threshold(max=training.canary_rtol, source="training.canary_rtol")
    check(f"training.canary.{canary_strategy}.max_rel_diff", found["max_rel_diff"], "relative", detail, default=default)
