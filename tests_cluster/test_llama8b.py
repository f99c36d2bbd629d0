"""The reference workload (opt-in: ``-m llama8b`` or the burn-in tier): Llama-3.1-8B's shape under FSDP2 and
ZeRO-3, its tokens/s/GPU, MFU, step-time spread and peak memory, each beside the public figure it is held
against (``acceptance/profile/references.yaml``).

Every strategy runs in one torchrun job (``acceptance.run.training_jobs.reference_runs``); each test reads its
strategy's figures, or fails with its strategy's own error.
"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families.llama8b import LLAMA8B, layers_text
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    ProfileModel,
    fmt,
    foreign_text,
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


def _workload(run: dict[str, Any]) -> str:
    setup = run["setup"]
    return (
        f"{run['strategy']} {run['model']}, {layers_text(run['model_shape'])}, {run['precision']}, seq "
        f"{setup['seq_len']}, micro-batch {setup['micro_batch']}, compile {run['compile']}, on {run['world_size']} "
        f"rank(s) ({run['device_name']})"
    )


def _against(cluster: ClusterRun, metric: str, run: dict[str, Any], value: float) -> str:
    """The figure over its public reference, in words ("0.86 of ..."), or that the table has none here."""
    row = reference_row(cluster, metric, run["device_name"])
    if row is None:
        return f"no public reference for {metric} on {run['device_name']} (acceptance/profile/references.yaml)"
    return f"{value / row.value:.2f} of the reference: {row.words()}"


def test_tokens_per_s(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    run = run_of(runs, strategy)
    check.measurements("run", run)
    detail = (
        f"{_workload(run)}: median of {len(run['windows'])} timed windows ({run['setup']['steps']} steps), "
        f"min {fmt(run['tokens_per_s_per_gpu_min'])}, max {fmt(run['tokens_per_s_per_gpu_max'])} "
        f"((max - min) / median {run['tokens_per_s_per_gpu_spread']:.1%})"
    )
    cause = foreign_text(run.get("foreign"), run.get("xids"))
    detail += f"\n{cause}" if cause else ""
    check(f"llama8b.{strategy}.tokens_per_s_per_gpu", run["tokens_per_s_per_gpu"], "tokens/s", detail)


def test_mfu(cluster: ClusterRun, runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    run = run_of(runs, strategy)
    if LLAMA8B.section_of(cluster.profile.model).peak_tflops is None:
        pytest.skip("MFU not measured: the profile sets no llama8b.peak_tflops (cluster-acceptance init writes it)")
    if run["mfu"] is None:
        pytest.skip(f"MFU not measured: {run['mfu_reason']}")
    metric = f"llama8b.{strategy}.mfu"
    shape = run["model_shape"]
    detail = (
        f"{_workload(run)}: {fmt(run['tokens_per_s_per_gpu'])} tokens/s x {run['flops_per_token']:.4g} FLOP/token "
        f"({shape['flops_formula']}, N = {shape['matmul_params']:,} parameters in matrix products: the input "
        f"embedding excluded) / dense {run['precision']} peak {run['peak_tflops']:g} TFLOP/s "
        f"({run['peak_tflops_source']})\n{_against(cluster, metric, run, run['mfu'])}"
    )
    check(metric, run["mfu"], "fraction", detail)


def test_layers(runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    run = run_of(runs, strategy)
    check(f"llama8b.{strategy}.layers", run["model_shape"]["layers"], "layers", layers_text(run["model_shape"]))


def test_step_time(runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    run = run_of(runs, strategy)
    check.measurements("step_times_s", run["step_times_s"])
    check.all(
        [
            (f"llama8b.{strategy}.step_time_s", run["step_time_s"], "s", f"median step, {_workload(run)}"),
            (f"llama8b.{strategy}.step_time_std_s", run["step_time_std_s"], "s", "standard deviation of the steps"),
        ]
    )


def test_peak_memory(runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    run = run_of(runs, strategy)
    per_rank = ", ".join(f"{m:.2f}" for m in run["peak_mem_per_rank_gib"])
    detail = f"max over ranks of {run['peak_mem_source']}; per rank GiB: {per_rank}; {_workload(run)}"
    check(f"llama8b.{strategy}.peak_mem_gib", run["peak_mem_gib"], "GiB", detail)


def test_loss_falls(runs: dict[str, dict[str, Any]], strategy: str, check: Checker) -> None:
    run = run_of(runs, strategy)
    detail = (
        f"loss {run['loss_first']:.4f} at the first step, {run['loss_last']:.4f} at step {len(run['losses'])}: "
        "a run that does not learn is broken (data, optimizer, precision or gradient reduction)"
    )
    check(f"llama8b.{strategy}.loss_ratio", run["loss_ratio"], "last/first", detail)
