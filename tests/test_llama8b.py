"""The reference workload's rules: the published Llama-3.1-8B shape, the layers that fit a GPU, the FLOPs its
MFU counts, the spec its job runs, and its place in the tiers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist

from acceptance.families import llama8b as llama8b_rules
from acceptance.families.llama8b import LLAMA8B, PROBE, Llama8b, layers_text, spec
from acceptance.families.training import StrategyResult, Training, run_jobs
from acceptance.probes import train_strategies
from acceptance.probes.train_model import ZERO_STATE_BYTES, build_config, build_model, describe, layers_that_fit
from acceptance.profile.references import Setup, table
from acceptance.profile.tiers import TIERS

H100_BYTES = 85_000_000_000  # about what torch.cuda.get_device_properties(...).total_memory gives an H100 80GB
H200_BYTES = 150_000_000_000  # and an H200 (141 GB, about 140 GiB)
SEQ = 8192


def test_the_shape_is_llama_3_1_8b_as_published() -> None:
    config = build_config("llama-3.1-8b", SEQ)
    published = (4096, 32, 32, 8, 14336, 128256)
    found = (
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.intermediate_size,
        config.vocab_size,
    )
    assert found == published
    theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
    assert theta == 500000.0 and not config.tie_word_embeddings


def test_one_80_gb_h100_holds_8_of_the_32_layers_and_four_h200_the_whole_model() -> None:
    """Measured: 8 layers on one H100 peaked at 53.8 GiB, the whole model on 4x H200 at 82-86 GiB per GPU."""
    config = build_config("llama-3.1-8b", SEQ)
    assert layers_that_fit(config, 1, H100_BYTES, SEQ) == 8
    assert layers_that_fit(config, 4, H200_BYTES, SEQ) == 32
    # DeepSpeed's bf16 ZeRO keeps 20 bytes a parameter against FSDP2's 16: fewer layers on one GPU
    assert layers_that_fit(config, 1, H100_BYTES, SEQ, ZERO_STATE_BYTES) == 6
    # sharded over more GPUs, more layers fit; longer sequences, fewer
    assert layers_that_fit(config, 4, H100_BYTES, SEQ) > 8
    assert layers_that_fit(config, 1, H100_BYTES, 2 * SEQ) < 8


def test_mfu_counts_every_matrix_product_but_the_input_embedding() -> None:
    """6N + 12·L·H·Q·T, N without the embedding lookup (untied: the output layer counts), L the layers run."""
    model = build_model("llama-3.1-8b", SEQ, torch.device("meta"), 0, layers=2)
    shape = describe(model, SEQ)
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert shape["layers"] == 2
    assert shape["matmul_params"] == 2 * layer + 4096 + 128256 * 4096  # layers, final norm, output layer
    assert shape["params"] == shape["matmul_params"] + 128256 * 4096
    assert shape["flops_per_token"] == 6 * shape["matmul_params"] + 12 * 2 * 32 * 128 * SEQ


def test_the_job_runs_the_training_probe_on_the_workload_s_settings() -> None:
    section = Llama8b(layers=8, steps=6)
    found = spec(section, ["fsdp", "zero3"], 8, 8, 1)
    training = found["training"]
    assert isinstance(training, dict)
    assert (training["model"], training["layers"], training["seq_len"]) == ("llama-3.1-8b", 8, SEQ)
    assert training["steps"] == 6
    # as the public figures: 16 micro-batches of one sequence a GPU per optimizer step, reduced each
    assert (training["precision"], training["compile"], training["grad_accum"]) == ("bf16", "blocks", 16)
    assert training["sync_every_micro_batch"] is True
    # one rank shards nothing: its gradients are reduced at the last micro-batch alone, as Megatron's are
    alone = spec(section, ["fsdp"], 1, 1, 1)["training"]
    assert isinstance(alone, dict) and alone["sync_every_micro_batch"] is False
    assert training["scaling_baseline"] == "none"
    assert found["strategies"] == ["fsdp", "zero3"] and found["expected_world_size"] == 8


def test_the_workload_runs_in_the_burn_in_tier_and_by_its_marker_only() -> None:
    assert LLAMA8B.opt_in and LLAMA8B.marker == "llama8b"
    assert not TIERS["standard"].has(LLAMA8B) and not TIERS["quick"].has(LLAMA8B)
    assert TIERS["burn-in"].has(LLAMA8B)


def test_a_figure_says_how_many_of_the_layers_ran() -> None:
    assert layers_text({"layers": 8, "layers_of": 32}).startswith("8 of 32 decoder layers")
    assert layers_text({"layers": 4}) == "all 4 decoder layers"


def test_the_mfu_of_any_h100_or_h200_world_is_held_against_dgx_cloud_s_figure() -> None:
    """The row the MFU check prints its ratio to: DGX Cloud's 59.4% for one GPU as for eight, H100 and H200."""
    rows = table()
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        for gpus in (1, 4, 8):
            row = rows.for_figure("llama8b.fsdp.mfu", Setup(rows.gpu_of(name), 1, gpus, None))
            assert row is not None and row.value == 0.594 and "DGX Cloud Benchmarking" in row.source
    assert rows.for_figure("llama8b.zero3.mfu", Setup("h100-sxm", 1, 8, None)) is None
    assert rows.for_figure("llama8b.fsdp.mfu", Setup(rows.gpu_of("NVIDIA A100-SXM4-80GB"), 1, 8, None)) is None


def test_a_job_that_dies_is_named_under_the_workload_s_own_job_keys() -> None:
    """The workload's jobs are keyed ``llama8b``, ``llama8b-2``, ... (the training family's keep ``training``):
    one session runs both without mixing their results."""
    calls: list[tuple[list[str], str]] = []

    def launch(pending: list[str], key: str) -> tuple[dict[str, StrategyResult], str | None]:
        calls.append((list(pending), key))
        if key == "llama8b":
            return {}, "rank 0 exited with SIGKILL"  # died in its first strategy
        return {s: {"tokens_per_s_per_gpu": 1.0} for s in pending}, None

    found = run_jobs([["fsdp", "zero3"]], launch, PROBE)
    assert calls == [(["fsdp", "zero3"], "llama8b"), (["zero3"], "llama8b-2")]
    assert found["fsdp"] == {"error": "rank 0 exited with SIGKILL", "strategy": "fsdp", "job": "llama8b"}
    assert found["zero3"] == {"tokens_per_s_per_gpu": 1.0}


def _run() -> dict[str, object]:
    shape = {"layers": 8, "of_layers": 32, "flops_formula": "6N + 12 L s d", "matmul_params": 7_000_000_000}
    return {
        "strategy": "fsdp", "model": "llama-3.1-8b", "model_shape": shape, "precision": "bf16", "compile": False,
        "world_size": 1, "device_name": "NVIDIA H100 80GB HBM3", "setup": {"seq_len": 8192, "micro_batch": 1,
        "steps": 20}, "windows": [1, 2], "tokens_per_s_per_gpu": 3000.0, "tokens_per_s_per_gpu_min": 2900.0,
        "tokens_per_s_per_gpu_max": 3100.0, "tokens_per_s_per_gpu_spread": 0.06, "mfu": 0.4, "mfu_reason": None,
        "flops_per_token": 4.5e10, "peak_tflops": 989.0, "peak_tflops_source": "profile", "step_time_s": 2.7,
        "step_time_std_s": 0.01, "peak_mem_gib": 70.0, "peak_mem_per_rank_gib": [70.0], "peak_mem_source": "torch",
        "losses": [12.0, 11.0], "loss_first": 12.0, "loss_last": 11.0, "loss_ratio": 11.0 / 12.0,
    }  # fmt: skip


def test_the_mfu_skips_where_the_profile_sets_no_peak_and_else_names_its_reference() -> None:
    section = Llama8b()
    figures = llama8b_rules.strategy_figures("fsdp", _run(), section, "0.95 of the reference: DGX Cloud")
    assert figures["llama8b.fsdp.mfu"].skip == (
        "MFU not measured: the profile sets no llama8b.peak_tflops (cluster-acceptance init writes it)"
    )
    peak = Llama8b(peak_tflops={"bf16": 989.4}, peak_tflops_source="test")
    with_peak = llama8b_rules.strategy_figures("fsdp", _run(), peak, "0.95 of the reference")
    mfu = with_peak["llama8b.fsdp.mfu"]
    assert (mfu.value, mfu.detail.splitlines()[-1]) == (0.4, "0.95 of the reference")
    assert with_peak["llama8b.fsdp.loss_ratio"].detail.startswith("loss 12.0000 at the first step, 11.0000 at step 2")


@pytest.mark.parametrize(
    ("strategy", "every", "said"),
    [
        ("fsdp", True, "x 16 accumulated, gradients reduced at each micro-batch, compile"),
        ("fsdp", False, "x 16 accumulated, gradients reduced at the last micro-batch, compile"),
        ("zero3", False, "x 16 accumulated, compile"),
    ],
)
def test_the_figures_say_the_accumulation_and_where_fsdp_reduced(strategy: str, every: bool, said: str) -> None:
    """A figure held against a public one says how its step was made: the micro-batches accumulated, and for
    FSDP2 where the gradients were reduced (the probe's setup records it; ZeRO-3 reduces as it goes)."""
    run = _run() | {"strategy": strategy}
    run["setup"] = {"seq_len": 8192, "micro_batch": 1, "grad_accum": 16, "steps": 5, "sync_every_micro_batch": every}
    tokens = llama8b_rules.strategy_figures(strategy, run, Llama8b(), "none")[
        f"llama8b.{strategy}.tokens_per_s_per_gpu"
    ]
    assert f"seq 8192, micro-batch 1 {said} False, on 1 rank(s)" in tokens.detail


@pytest.mark.parametrize(("every", "expected"), [(True, [True, True, True]), (False, [False, False, True])])
def test_fsdp_reduces_each_micro_batch_where_the_section_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: bool, expected: list[bool]
) -> None:
    """Without a reduction between micro-batches FSDP2 keeps every gradient unsharded: the reference workload
    reduces each one, the training family the last one's only."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model: Any = build_model("llama-3.1-8b-tiny", 16, torch.device("cpu"), 0)
        training = {**Training().model_dump(mode="json"), "precision": "fp32", "sync_every_micro_batch": every}
        ctx = SimpleNamespace(device=torch.device("cpu"), world_size=1)
        runner = train_strategies.fsdp(model, training, ctx)  # type: ignore[arg-type]
        seen: list[bool] = []
        original = model.set_requires_gradient_sync

        def spy(requires: bool, **kwargs: Any) -> None:
            seen.append(requires)
            original(requires, **kwargs)

        monkeypatch.setattr(model, "set_requires_gradient_sync", spy)
        runner.step([torch.randint(0, 512, (1, 16)) for _ in range(3)])
    finally:
        dist.destroy_process_group()
    assert seen == expected
