"""Short real training runs per strategy: throughput, step time, memory, MFU, utilisation, loss, scaling, canary.

Every strategy the selected tests need runs in one torchrun job (``acceptance.run.training_jobs``); each
test reads its strategy's figures, or fails with its strategy's own error, out of that job's result.
"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import training as training_rules
from acceptance.families.training import TRAINING
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    ProbeError,
    ProfileModel,
    baseline_run,
    clock_events_text,
    fmt,
    foreign_text,
    parametrize_from_profile,
    probe_wall_s,
    training_runs,
)


def _strategies(profile: ProfileModel) -> list[str]:
    return list(TRAINING.section_of(profile).strategies)


def _compared(profile: ProfileModel) -> list[str]:
    """The canary compares every strategy with the first one."""
    return list(TRAINING.section_of(profile).strategies[1:])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_from_profile(metafunc, "train_strategy", _strategies)
    parametrize_from_profile(metafunc, "canary_strategy", _compared)


@pytest.fixture(scope="module")
def runs(cluster: ClusterRun, request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    return training_runs(cluster, request.session)


def run_of(runs: dict[str, dict[str, Any]], strategy: str) -> dict[str, Any]:
    """One strategy's figures; its own error as the test's failure."""
    found = runs.get(strategy) or {"error": f"{strategy} was not run (no selected test asked for it)"}
    if found.get("error"):
        pytest.fail(f"training {strategy}: {found['error']}", pytrace=False)
    return found


def _spread(run: dict[str, Any]) -> str:
    count = len(run["windows"])
    steps = run["setup"]["steps"]
    return (
        f"median of {count} timed windows ({steps} steps): IQR {run['tokens_per_s_per_gpu_q1']:,.0f}-"
        f"{run['tokens_per_s_per_gpu_q3']:,.0f}, min {run['tokens_per_s_per_gpu_min']:,.0f}, "
        f"max {run['tokens_per_s_per_gpu_max']:,.0f} ((max - min) / median {run['tokens_per_s_per_gpu_spread']:.1%})"
    )


def _clocks(run: dict[str, Any]) -> str:
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


def _summary(run: dict[str, Any]) -> str:
    return (
        f"{run['strategy']} {run['model']} {run['precision']} on {run['world_size']} rank(s), "
        f"compile {run['compile']}: {run['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {_spread(run)}; "
        f"step {run['step_time_s'] * 1e3:.1f} ms ± {run['step_time_std_s'] * 1e3:.1f}\n{_clocks(run)}"
    )


def test_tokens_per_s(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    check.measurements("run", run)
    check(f"training.{train_strategy}.tokens_per_s_per_gpu", run["tokens_per_s_per_gpu"], "tokens/s", _summary(run))


def test_step_time(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    check(f"training.{train_strategy}.step_time_s", run["step_time_s"], "s", _summary(run))


def test_step_time_std(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    check.measurements("step_times_s", run["step_times_s"])
    check(f"training.{train_strategy}.step_time_std_s", run["step_time_std_s"], "s", _summary(run))


def test_peak_memory(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    per_rank = ", ".join(f"{m:.2f}" for m in run["peak_mem_per_rank_gib"])
    detail = f"max over ranks of {run['peak_mem_source']}; per rank GiB: {per_rank}"
    check(f"training.{train_strategy}.peak_mem_gib", run["peak_mem_gib"], "GiB", detail)


def test_mfu(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    if run["mfu"] is None:
        pytest.skip(f"MFU not measured: {run['mfu_reason']}")
    detail = (
        f"{run['tokens_per_s_per_gpu']:,.0f} tokens/s x {run['flops_per_token']:.4g} FLOP/token "
        f"({run['model_shape']['flops_formula']}) / dense {run['precision']} peak {run['peak_tflops']:g} TFLOP/s "
        f"({run['peak_tflops_source']})\n{_clocks(run)}"
    )
    check(f"training.{train_strategy}.mfu", run["mfu"], "fraction", detail)


def test_gpu_utilisation(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    if run["gpu_util_pct"] is None:
        pytest.skip(f"GPU utilisation not measured: {run['gpu_util_reason']}")
    detail = f"lowest over ranks; per rank: {run['gpu_util_per_rank_pct']}\n{_clocks(run)}"
    check(f"training.{train_strategy}.gpu_util_pct", run["gpu_util_pct"], "%", detail)


def test_loss_values(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    check.measurements("losses", run["losses"])
    check.all(
        [
            (f"training.{train_strategy}.loss_first", run["loss_first"], "nats", "first step"),
            (f"training.{train_strategy}.loss_last", run["loss_last"], "nats", "last step"),
        ]
    )


def test_loss_falls(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    detail = (
        f"loss {run['loss_first']:.4f} at the first step, {run['loss_last']:.4f} at step {len(run['losses'])}: "
        f"a run that does not learn is broken (data, optimizer, precision or gradient reduction)"
    )
    check(f"training.{train_strategy}.loss_ratio", run["loss_ratio"], "last/first", detail)


def test_wall_time(cluster: ClusterRun, runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    job = run["job"]
    shared = [s for s, r in runs.items() if r.get("job") == job]
    detail = (
        f"{train_strategy}'s part of the training job {job}: model build, wrap and compilation, warm-up, timed "
        f"steps, teardown; the job ran {', '.join(shared)} in {probe_wall_s(cluster, job):.1f} s, "
        "torchrun start-up, imports and rendezvous included"
    )
    check(f"training.{train_strategy}.wall_s", run["wall_s"], "s", detail)


def test_scaling_efficiency(cluster: ClusterRun, runs: dict[str, dict[str, Any]], check: Checker) -> None:
    training = TRAINING.section_of(cluster.profile.model)
    base = training_rules.baseline(training, cluster.topology.nproc_per_node, cluster.placement.nodes)
    if isinstance(base, str):
        pytest.skip(f"no scaling baseline: {base}")
    strategy = training.scaling_strategy
    full = run_of(runs, strategy)
    try:
        small = baseline_run(cluster, base, strategy, runs)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)
    check.measurements("baseline", small)
    detail = (
        f"{strategy}: {full['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU on {full['world_size']} ranks over "
        f"{small['tokens_per_s_per_gpu']:,.0f} on the baseline, {base.label} (medians over timed windows; "
        f"spread (max - min) / median {fmt(full['tokens_per_s_per_gpu_spread'])} and "
        f"{fmt(small['tokens_per_s_per_gpu_spread'])})"
    )
    cause = foreign_text(full.get("foreign"), full.get("xids")) or foreign_text(small.get("foreign"), small.get("xids"))
    detail += f"\n{cause}" if cause else ""
    check("training.scaling_efficiency", training_rules.scaling_efficiency(full, small), "fraction", detail)


def test_canary(cluster: ClusterRun, runs: dict[str, dict[str, Any]], canary_strategy: str, check: Checker) -> None:
    training = TRAINING.section_of(cluster.profile.model)
    reference_name = training.strategies[0]
    reference, other = run_of(runs, reference_name), run_of(runs, canary_strategy)
    steps = training.canary_steps
    found = training_rules.canary(reference["losses"], other["losses"], steps, training.canary_rtol)
    check.measurements(
        "curves", {reference_name: reference["losses"][:steps], canary_strategy: other["losses"][:steps]}
    )
    detail = (
        f"same seed and data through {reference_name} and {canary_strategy}; largest difference at step "
        f"{found['worst_step']}:\n"
        + training_rules.curves_text(reference_name, reference["losses"], canary_strategy, other["losses"], steps)
    )
    check(f"training.canary.{canary_strategy}.max_rel_diff", found["max_rel_diff"], "relative", detail)
