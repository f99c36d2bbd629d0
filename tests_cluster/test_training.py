"""Short real training runs per strategy: throughput, step time, memory, MFU, utilisation, loss, scaling, canary.

Every strategy the selected tests need runs in one torchrun job (``acceptance.run.training_jobs``); each
test reads its strategy's figures, or fails with its strategy's own error, out of that job's result.
"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import training as training_rules
from acceptance.families.training import TRAINING
from acceptance.families.training import rules as training_figures
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Figure,
    ProbeError,
    ProfileModel,
    baseline_run,
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


def _figures(runs: dict[str, dict[str, Any]], strategy: str) -> dict[str, Figure]:
    return training_figures.strategy_figures(strategy, run_of(runs, strategy))


def test_tokens_per_s(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check.measurements("run", run_of(runs, train_strategy))
    check(_figures(runs, train_strategy)[f"training.{train_strategy}.tokens_per_s_per_gpu"])


def test_step_time(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check(_figures(runs, train_strategy)[f"training.{train_strategy}.step_time_s"])


def test_step_time_std(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check.measurements("step_times_s", run_of(runs, train_strategy)["step_times_s"])
    check(_figures(runs, train_strategy)[f"training.{train_strategy}.step_time_std_s"])


def test_peak_memory(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check(_figures(runs, train_strategy)[f"training.{train_strategy}.peak_mem_gib"])


def test_mfu(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check(_figures(runs, train_strategy)[f"training.{train_strategy}.mfu"])


def test_gpu_utilisation(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check(_figures(runs, train_strategy)[f"training.{train_strategy}.gpu_util_pct"])


def test_loss_values(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check.measurements("losses", run_of(runs, train_strategy)["losses"])
    figures = _figures(runs, train_strategy)
    found = [figures[f"training.{train_strategy}.{name}"] for name in ("loss_first", "loss_last")]
    check.all(found)


def test_loss_falls(runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    check(_figures(runs, train_strategy)[f"training.{train_strategy}.loss_ratio"])


def test_wall_time(cluster: ClusterRun, runs: dict[str, dict[str, Any]], train_strategy: str, check: Checker) -> None:
    run = run_of(runs, train_strategy)
    shared = [s for s, r in runs.items() if r.get("job") == run["job"]]
    check(training_figures.wall_figure(train_strategy, run, shared, probe_wall_s(cluster, run["job"])))


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
    check(training_figures.scaling_figure(strategy, full, small, base))


def test_canary(cluster: ClusterRun, runs: dict[str, dict[str, Any]], canary_strategy: str, check: Checker) -> None:
    training = TRAINING.section_of(cluster.profile.model)
    reference_name = training.strategies[0]
    reference, other = run_of(runs, reference_name), run_of(runs, canary_strategy)
    steps = training.canary_steps
    check.measurements(
        "curves", {reference_name: reference["losses"][:steps], canary_strategy: other["losses"][:steps]}
    )
    check(
        training_figures.canary_figure(reference_name, reference, canary_strategy, other, steps, training.canary_rtol)
    )
