"""The reference workload (opt-in: ``-m llama8b`` or the burn-in tier): Llama-3.1-8B's shape under FSDP2 and
ZeRO-3, its tokens/s/GPU, MFU, step-time spread and peak memory, each beside the public figure it is held
against (``acceptance/profile/references.yaml``).

Every strategy runs in one torchrun job (``acceptance.run.training_jobs.reference_runs``); each test reads its
strategy's figures, or fails with its strategy's own error.
"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import llama8b as llama8b_rules
from acceptance.families.llama8b import LLAMA8B
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Figure,
    ProfileModel,
    parametrize_from_profile,
    reference_row,
    reference_runs,
)


def _strategies(profile: ProfileModel) -> list[str]:
    return list(LLAMA8B.section_of(profile).strategies)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_from_profile(metafunc, "strategy", _strategies)


@pytest.fixture(scope="module")
def runs(cluster: ClusterRun) -> dict[str, dict[str, Any]]:
    return reference_runs(cluster)


def run_of(runs: dict[str, dict[str, Any]], strategy: str) -> dict[str, Any]:
    """One strategy's figures; its own error as the test's failure."""
    found = runs.get(strategy) or {"error": f"{strategy} was not run"}
    if found.get("error"):
        pytest.fail(f"llama8b {strategy}: {found['error']}", pytrace=False)
    return found


def _figures(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str) -> dict[str, Figure]:
    run = run_of(runs, strategy)
    metric = f"llama8b.{strategy}.mfu"
    against = ""
    if run["mfu"] is not None:  # the MFU over its public reference, in words, or that the table has none here
        row = reference_row(cluster, metric, run["device_name"])
        against = (
            f"no public reference for {metric} on {run['device_name']} (acceptance/profile/references.yaml)"
            if row is None
            else f"{run['mfu'] / row.value:.2f} of the reference: {row.words()}"
        )
    return llama8b_rules.strategy_figures(strategy, run, LLAMA8B.section_of(cluster.profile.model), against)


def test_tokens_per_s(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    check.measurements("run", run_of(runs, strategy))
    check(_figures(cluster, runs, strategy)[f"llama8b.{strategy}.tokens_per_s_per_gpu"])


def test_mfu(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    check(_figures(cluster, runs, strategy)[f"llama8b.{strategy}.mfu"])


def test_layers(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    check(_figures(cluster, runs, strategy)[f"llama8b.{strategy}.layers"])


def test_step_time(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    check.measurements("step_times_s", run_of(runs, strategy)["step_times_s"])
    figures = _figures(cluster, runs, strategy)
    found = [figures[f"llama8b.{strategy}.{name}"] for name in ("step_time_s", "step_time_std_s")]
    check.all(found)


def test_peak_memory(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    check(_figures(cluster, runs, strategy)[f"llama8b.{strategy}.peak_mem_gib"])


def test_loss_falls(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    check(_figures(cluster, runs, strategy)[f"llama8b.{strategy}.loss_ratio"])
