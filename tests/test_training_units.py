"""The training probe's arithmetic and configuration: FLOPs, DeepSpeed configs, "auto", windows, jobs, canary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from acceptance.families import training as plan
from acceptance.families.training import Training
from acceptance.families.training import figures as figs
from acceptance.families.training.figures import RankRun, RawRun, TrainingConfig
from acceptance.json_types import JSONObject
from acceptance.probes import train_ds, train_model, train_strategies
from acceptance.probes.host_load import HostLoad
from acceptance.profile import loader as profiles

LAYER = "transformers.models.llama.modeling_llama.LlamaDecoderLayer"
# what train_ds.build returns, its DeepSpeed config read as open JSON: the tests index into it
Built = tuple[dict[str, Any], JSONObject]
# the profile's training section as plain data, as the probe's spec carries it
TRAINING = cast(
    TrainingConfig, Training(micro_batch=8, grad_accum=4, precision="bf16", grad_clip=1.0).model_dump(mode="json")
)


def meta_model(name: str) -> Any:
    return train_model.build_model(name, 1024, torch.device("meta"), seed=0)


def test_flops_formula() -> None:
    # 6N + 12·L·H·Q·T, worked by hand
    assert train_model.flops_per_token(1000, 2, 4, 8, 16) == 6 * 1000 + 12 * 2 * 4 * 8 * 16


def test_gpt2_124m_counts_like_nanogpt() -> None:
    model = meta_model("gpt2-124m")
    # nanoGPT prints "number of parameters: 123.69M" for GPT-2 124M with the padded 50,304 vocabulary:
    # every parameter once (lm_head tied to wte), less the position embeddings
    assert train_model.matmul_params(model) == 123_689_472
    info = train_model.describe(model, 1024)
    assert (info["layers"], info["heads"], info["head_dim"]) == (12, 12, 64)
    assert info["flops_per_token"] == 6 * 123_689_472 + 12 * 12 * 12 * 64 * 1024


def test_llama_untied_embedding_is_not_a_matmul() -> None:
    model = meta_model("llama-1b")
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    assert embed == 32000 * 2048
    assert train_model.matmul_params(model) == total - embed  # the output layer stays: it is a matmul
    assert train_model.attention_shape(model.config) == (16, 16, 128)


def test_decoder_layers_found() -> None:
    assert len(train_model.decoder_layers(meta_model("gpt2-355m"))) == 24


@pytest.mark.parametrize(("strategy", "stage"), [("zero1", 1), ("zero2", 2), ("zero3", 3), ("zero3_offload", 3)])
def test_builtin_config(strategy: str, stage: int) -> None:
    config, resolved = cast(
        Built, train_ds.build(strategy, TRAINING, None, world_size=2, shape=(768, LAYER), on_gpu=True)
    )
    assert resolved == {}
    assert config["zero_optimization"]["stage"] == stage
    assert (config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]) == (8, 4)
    assert config["train_batch_size"] == 8 * 4 * 2
    assert config["bf16"]["enabled"] is True and config["fp16"]["enabled"] is False
    assert "optimizer" not in config  # the client torch optimizer: no JIT-built op
    assert ("offload_optimizer" in config["zero_optimization"]) == (strategy == "zero3_offload")
    leaf = config["zero_optimization"].get("leaf_module")
    assert leaf == ({"classes": [LAYER]} if stage == 3 else None)


def test_zero3_leaf_layers_on_the_gpu_only() -> None:
    """DeepSpeed's CPU accelerator cannot zero a leaf layer's gradient: the CPU run keeps a hook per submodule."""
    config, _ = cast(Built, train_ds.build("zero3", TRAINING, None, world_size=2, shape=(768, LAYER), on_gpu=False))
    assert "leaf_module" not in config["zero_optimization"]
    assert config["zero_optimization"]["overlap_comm"] is False


@pytest.mark.parametrize("name", ["llama-1b", "gpt2-124m"])
def test_zero3_leaf_layers_found_by_deepspeed(name: str) -> None:
    """DeepSpeed skips a leaf class it cannot find without a word: its own parsing and matching of the
    built-in config must flag every decoder layer of the model, and nothing else."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.utils.z3_leaf_module import apply_zero_leaf_module_config

    model = meta_model(name)
    config, _ = cast(
        Built, train_ds.build("zero3", TRAINING, None, 2, train_strategies.model_shape(model), on_gpu=True)
    )
    flagged = apply_zero_leaf_module_config(model, DeepSpeedZeroConfig(**config["zero_optimization"]).leaf_module)
    assert [id(m) for m in flagged] == [id(m) for m in train_model.decoder_layers(model)]


def test_auto_resolved_to_the_run() -> None:
    user: JSONObject = {
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"},
    }
    training: TrainingConfig = {**TRAINING, "deepspeed": {"tuned": {"base": "zero3", "config": user}}}
    config, resolved = cast(
        Built, train_ds.build("tuned", training, user, world_size=4, shape=(1024, LAYER), on_gpu=True)
    )
    assert resolved == {
        "train_micro_batch_size_per_gpu": 8,
        "train_batch_size": 8 * 4 * 4,
        "gradient_clipping": 1.0,
        "bf16.enabled": True,
        "zero_optimization.reduce_bucket_size": 1024 * 1024,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * 1024 * 1024),
    }
    assert "auto" not in json.dumps(config)
    assert config["zero_optimization"]["stage3_param_persistence_threshold"] == 10 * 1024  # built-in kept


def test_user_values_override_builtin() -> None:
    user: JSONObject = {"zero_optimization": {"overlap_comm": False, "reduce_bucket_size": 123}}
    training: TrainingConfig = {**TRAINING, "deepspeed": {"z2": {"base": "zero2", "config": user}}}
    config, _ = cast(Built, train_ds.build("z2", training, user, world_size=2, shape=(64, LAYER), on_gpu=True))
    assert config["zero_optimization"]["overlap_comm"] is False
    assert config["zero_optimization"]["reduce_bucket_size"] == 123
    assert config["zero_optimization"]["stage"] == 2


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"scheduler": {"params": {"warmup_max_lr": "auto"}}}, 'scheduler.params.warmup_max_lr = "auto", but'),
        ({"train_micro_batch_size_per_gpu": 4}, "train_micro_batch_size_per_gpu = 4, but this run uses 8"),
        ({"zero_optimization": {"stage": 3}}, "zero_optimization.stage = 3, but this run uses 2"),
        ({"fp16": {"enabled": True}}, "fp16.enabled = True, but this run uses False"),
        ({"optimizer": {"type": "AdamW"}}, "Remove the optimizer section"),
    ],
)
def test_user_config_errors(user: dict[str, Any], message: str) -> None:
    training: TrainingConfig = {**TRAINING, "deepspeed": {"z2": {"base": "zero2", "config": user}}}
    with pytest.raises(train_ds.DeepSpeedConfigError, match=r"training\.deepspeed\.z2\.config: ") as info:
        train_ds.build("z2", training, user, world_size=2, shape=(64, LAYER), on_gpu=True)
    assert message in str(info.value)


def test_canary_within_and_beyond() -> None:
    ref = [10.0, 9.0, 8.0, 7.0]
    assert plan.canary(ref, [10.0, 9.0, 8.0, 7.0], 4, 0.01)["max_rel_diff"] == 0
    close = plan.canary(ref, [10.05, 9.0, 8.0, 7.0], 4, 0.01)
    assert close["within"] and close["worst_step"] == 0
    drift = plan.canary(ref, [10.0, 9.0, 8.4, 9.0], 3, 0.01)  # step 3 lies beyond the compared steps
    assert not drift["within"] and drift["worst_step"] == 2
    assert drift["max_rel_diff"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="compares 5 steps"):
        plan.canary(ref, ref, 5, 0.01)


def test_canary_text_shows_both_curves() -> None:
    text = plan.curves_text("ddp", [10.0, 9.5], "zero3", [10.0, 9.9], 2)
    assert text.splitlines()[1] == "step 1: ddp 9.500000  zero3 9.900000"


@pytest.mark.parametrize(
    ("kind", "ranks", "nodes", "expected"),
    [("one_gpu", 8, 2, (1, 1)), ("one_node", 8, 2, (8, 1)), ("one_gpu", 2, 1, (1, 1))],
)
def test_baseline_world(kind: str, ranks: int, nodes: int, expected: tuple[int, int]) -> None:
    base = plan.baseline(Training(scaling_baseline=kind), ranks, nodes)  # type: ignore[arg-type]
    assert not isinstance(base, str)
    assert (base.ranks_per_node, base.nodes) == expected


def test_no_baseline_when_world_is_the_baseline() -> None:
    assert "no larger than the baseline" in str(plan.baseline(Training(scaling_baseline="one_node"), 8, 1))
    assert "none" in str(plan.baseline(Training(scaling_baseline="none"), 8, 2))


def test_scaling_efficiency() -> None:
    assert plan.scaling_efficiency({"tokens_per_s_per_gpu": 90.0}, {"tokens_per_s_per_gpu": 100.0}) == 0.9


def _rank(rank: int, step_s: list[float], util: float | None, events: dict[str, float] | None = None) -> RankRun:
    reason = None if util is not None else "no GPU"
    # deliberately incomplete: no host_load, trace or util samples, which the figures do not need
    return cast(
        RankRun,
        {
            "rank": rank,
            "host": "h",
            "step_s": step_s,
            "loop_s": sum(step_s),
            "mem_gib": 1.0 + rank,
            "held_at_start_gib": 0.25 * rank,
            "util": {"mean_pct": util, "reason": reason, "clock_events": events, "clock_events_reason": reason},
        },
    )


PEAKS = {"bf16": 1e-6, "fp16": 1e-6, "fp32": 0.5e-6}


def test_figures_take_the_slowest_rank_per_window() -> None:
    t: TrainingConfig = {
        **TRAINING,
        "micro_batch": 2,
        "grad_accum": 1,
        "seq_len": 100,
        "windows": 2,
        "peak_tflops": PEAKS,
    }
    t["peak_tflops_source"] = "x"
    # deliberately incomplete: a shape with only flops_per_token, no info
    raw = cast(
        RawRun,
        {
            "ranks": [
                _rank(0, [0.1, 0.1, 0.1, 0.1], 90.0, {"sw_power_cap": 1.0}),
                _rank(1, [0.1, 0.2, 0.1, 0.2], 60.0),
            ],
            "losses": [8.0, 6.0],
            "shape": {"flops_per_token": 1000},
            "mem_source": "test",
        },
    )
    out = figs.figures(raw, t, world_size=2)
    # two windows of two steps, each as long as on rank 1: 0.3 s for 400 tokens
    assert [w["steps"] for w in out["windows"]] == [[0, 2], [2, 4]]
    assert out["tokens_per_s_per_gpu"] == pytest.approx(400 / 0.3)
    assert out["tokens_per_s_per_gpu_spread"] == pytest.approx(0)
    assert out["tokens_per_s_per_gpu_loop"] == pytest.approx(200 * 4 / 0.6)  # rank 1's loop
    assert out["step_times_s"] == [0.1, 0.2, 0.1, 0.2]
    assert out["step_time_s"] == pytest.approx(0.15)
    assert out["peak_mem_gib"] == 2.0 and out["gpu_util_pct"] == 60.0
    assert out["held_at_start_gib"] == [0.0, 0.25]  # what each rank's peak counts from before the strategy
    assert out["mfu"] == pytest.approx(out["tokens_per_s_per_gpu"] * 1000 / 1e6)  # the bf16 peak
    assert out["clock_events"] == {"0": {"sw_power_cap": 1.0}}
    assert out["loss_ratio"] == 0.75


def test_throughput_is_the_median_window_with_its_spread() -> None:
    # five windows of one step: 100 tokens over 1, 2, 1, 1, 4 s on the slower rank
    ranks = [_rank(0, [1.0, 2.0, 1.0, 1.0, 4.0], None), _rank(1, [0.5, 0.5, 0.5, 0.5, 0.5], None)]
    out = figs.throughput(ranks, 5, 100)
    assert out["tokens_per_s_per_gpu"] == 100.0  # rates 100, 50, 100, 100, 25: the median
    assert (out["tokens_per_s_per_gpu_min"], out["tokens_per_s_per_gpu_max"]) == (25.0, 100.0)
    assert (out["tokens_per_s_per_gpu_q1"], out["tokens_per_s_per_gpu_q3"]) == (50.0, 100.0)
    assert out["tokens_per_s_per_gpu_spread"] == pytest.approx(0.75)
    assert out["tokens_per_s_per_gpu_loop"] == pytest.approx(500 / 9)


def test_windows_cover_every_step_once() -> None:
    # deliberately incomplete: only the keys window_count reads
    assert [figs.window_count(cast(TrainingConfig, {"steps": s, "windows": None})) for s in (3, 20)] == [3, 5]
    assert figs.window_count(cast(TrainingConfig, {"steps": 20, "windows": 4})) == 4
    found = figs.windows([_rank(0, [1.0] * 7, None)], 3, 10)
    assert [w["steps"] for w in found] == [[0, 2], [2, 5], [5, 7]]
    assert [w["tokens_per_s"] for w in found] == [10.0, 10.0, 10.0]


def test_mfu_divides_by_the_peak_of_the_run_precision() -> None:
    # deliberately incomplete: a shape with only flops_per_token, no info
    raw = cast(
        RawRun,
        {"ranks": [_rank(0, [0.1], None)], "losses": [1.0, 0.5], "shape": {"flops_per_token": 1}, "mem_source": "x"},
    )
    fp32 = figs.figures(raw, {**TRAINING, "windows": 1, "precision": "fp32", "peak_tflops": PEAKS}, world_size=1)
    bf16 = figs.figures(raw, {**TRAINING, "windows": 1, "precision": "bf16", "peak_tflops": PEAKS}, world_size=1)
    mfu = cast(float, bf16["mfu"])  # bf16 has a peak, so an mfu
    assert fp32["peak_tflops"] == 0.5e-6 and fp32["mfu"] == pytest.approx(2 * mfu)
    only_bf16 = figs.figures(raw, {**TRAINING, "windows": 1, "precision": "fp32", "peak_tflops": {"bf16": 1.0}}, 1)
    reason = cast(str, only_bf16["mfu_reason"])  # no mfu: the reason why
    assert only_bf16["mfu"] is None and "no peak for precision fp32" in reason


def test_figures_without_peak_or_gpu_say_why() -> None:
    # deliberately incomplete: a shape with only flops_per_token, no info
    raw = cast(
        RawRun,
        {
            "ranks": [_rank(0, [0.1], None)],
            "losses": [1.0, 1.0],
            "shape": {"flops_per_token": 1},
            "mem_source": "rss",
        },
    )
    out = figs.figures(raw, {**TRAINING, "windows": 1}, world_size=1)
    assert out["mfu"] is None and "peak_tflops" in cast(str, out["mfu_reason"])  # no mfu: why
    assert out["gpu_util_pct"] is None and out["gpu_util_reason"] == "no GPU"
    assert out["clock_events"] == {} and out["clock_events_reason"] == "no GPU"


def _jobs(script: dict[str, tuple[list[str], str | None]]) -> tuple[plan.Launch, list[tuple[list[str], str]]]:
    """A launcher that finishes the strategies ``script[key][0]`` of each job, then dies with ``script[key][1]``."""
    calls: list[tuple[list[str], str]] = []

    def launch(pending: list[str], key: str) -> tuple[dict[str, dict[str, Any]], str | None]:
        calls.append((list(pending), key))
        finished, died = script[key]
        return {s: {"strategy": s, "wall_s": 1.0} for s in finished}, died

    return launch, calls


def test_one_job_runs_every_strategy() -> None:
    launch, calls = _jobs({"training": (["ddp", "fsdp", "zero2"], None)})
    found = plan.run_jobs([["ddp", "fsdp", "zero2"]], launch)
    assert calls == [(["ddp", "fsdp", "zero2"], "training")]
    assert all("error" not in r for r in found.values())


def test_a_job_that_dies_blames_its_strategy_and_the_rest_run_on() -> None:
    script = {
        "training": (["ddp"], "probe training timed out; unfinished: rank 1 in phase 'fsdp: timed steps'"),
        "training-2": ([], "probe training failed: rank 0 raised RuntimeError: boom"),
        "training-3": (["zero3"], None),
    }
    launch, calls = _jobs(script)
    found = plan.run_jobs([["ddp", "fsdp", "zero2", "zero3"]], launch)
    assert [c[0] for c in calls] == [["ddp", "fsdp", "zero2", "zero3"], ["zero2", "zero3"], ["zero3"]]
    assert "error" not in found["ddp"] and "error" not in found["zero3"]
    assert "fsdp: timed steps" in str(found["fsdp"]["error"]) and found["fsdp"]["job"] == "training"
    assert "RuntimeError: boom" in str(found["zero2"]["error"]) and found["zero2"]["job"] == "training-2"


def test_zero3_runs_go_last_in_the_shared_job() -> None:
    training = Training.model_validate(
        {
            "strategies": ["zero3", "ddp", "zero3_tuned", "zero2", "z3off"],
            "deepspeed": {
                "zero3_tuned": {"base": "zero3", "config": {}},
                "z3off": {"base": "zero3_offload", "config": {}},
            },
        }
    )
    groups = plan.job_groups(training, list(training.strategies))
    assert groups == [["ddp", "zero2", "zero3", "zero3_tuned", "z3off"]]
    assert plan.job_groups(training, ["ddp", "fsdp"]) == [["ddp", "fsdp"]]
    assert plan.job_groups(training, []) == []


def test_a_ddp_baseline_shares_the_job_right_after_ddp_and_any_other_gets_its_own() -> None:
    training = Training.model_validate({"strategies": ["fsdp", "ddp", "zero3"], "scaling_baseline": "one_gpu"})
    base = plan.baseline(training, ranks_per_node=2, nodes=1)
    assert isinstance(base, plan.Baseline)
    parts = plan.with_baseline(training, list(training.strategies), base)
    assert parts == ["fsdp", "ddp", plan.BASELINE_PART, "zero3"]
    assert plan.job_groups(training, parts) == [["fsdp", "ddp", plan.BASELINE_PART, "zero3"]]
    assert plan.with_baseline(training, ["fsdp", "zero3"], base) == ["fsdp", "zero3"]  # ddp not selected
    assert plan.with_baseline(training, ["ddp"], "no baseline: one GPU") == ["ddp"]
    fsdp_scaled = Training.model_validate({"strategies": ["fsdp", "ddp"], "scaling_strategy": "fsdp"})
    assert plan.with_baseline(fsdp_scaled, ["fsdp", "ddp"], base) == ["fsdp", "ddp"]  # a job of its own


def test_each_node_reads_its_own_baseline_out_of_the_shared_part() -> None:
    part = {
        "tokens_per_s_per_gpu": 10.0,
        "by_node": {"0": {"tokens_per_s_per_gpu": 10.0}, "1": {"tokens_per_s_per_gpu": 9.0}},
    }
    assert plan.node_baseline(part, 1) == {"tokens_per_s_per_gpu": 9.0}
    assert "no figures for node 2" in str(plan.node_baseline(part, 2)["error"])
    failed: plan.StrategyResult = {"error": "scaling-baseline failed on rank(s) 0: rank 0 raised RuntimeError: boom"}
    assert plan.node_baseline(failed, 0) is failed


def test_a_strategy_the_job_recorded_as_failed_costs_no_new_job() -> None:
    def launch(pending: list[str], key: str) -> tuple[dict[str, dict[str, Any]], str | None]:
        return {"ddp": {"wall_s": 1.0}, "zero2": {"error": "zero2 failed on rank(s) 0, 1: ..."}}, None

    found = plan.run_jobs([["ddp", "zero2"]], launch)
    assert str(found["zero2"]["error"]).startswith("zero2 failed")


def test_user_config_file_beside_profile(tmp_path: Path) -> None:
    (tmp_path / "tuned.json").write_text(json.dumps({"zero_optimization": {"overlap_comm": False}}))
    (tmp_path / "p.yaml").write_text(
        "name: p\ntraining:\n  strategies: [ddp, tuned, broken]\n"
        "  deepspeed:\n    tuned: {base: zero2, config: tuned.json}\n    broken: {base: zero3, config: nope.json}\n"
    )
    prof = profiles.load(str(tmp_path / "p.yaml"))
    assert plan.user_config(prof, "tuned") == {"zero_optimization": {"overlap_comm": False}}
    assert plan.user_config(prof, "ddp") is None
    with pytest.raises(plan.TrainingPlanError, match=r"p\.yaml: training\.deepspeed\.broken\.config: cannot read"):
        plan.user_config(prof, "broken")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.strategies=[ddp, zero4]", "neither built in"),
        ("training.strategies=[ddp, ddp]", "each once"),
        ("training.peak_tflops={bf16: 989.4}", "peak_tflops_source go together"),
        ("training.peak_tflops=989", "give the dense peak per precision"),
        ("training.windows=7", "windows (7) exceeds steps (6)"),
        ("training.scaling_strategy=zero1", "scaling_strategy 'zero1' is not in strategies"),
        ("training.model=gpt5", "training.model"),
        ("thresholds={training.zero1.mfu: {min: 0.4}}", "strategy 'zero1' is not in this profile's list"),
    ],
)
def test_profile_errors(override: str, message: str) -> None:
    with pytest.raises(profiles.ProfileError, match="invalid profile") as info:
        profiles.load("local-cpu", [override])
    assert message in str(info.value)


def test_host_load_reports_the_thread_and_the_machine_over_the_window() -> None:
    load = HostLoad()
    load.start()
    sum(i * i for i in range(200_000))  # some work on this thread, so its CPU time is above zero
    found = load.stop()
    assert found["wall_s"] > 0 and found["thread_cpu_s"] > 0
    assert cast(float, found["thread_busy"]) > 0  # None only for a window of no time
    # cpus_allowed: None only where the OS has no sched_getaffinity (not Linux)
    assert found["involuntary_switches"] >= 0 and cast(int, found["cpus_allowed"]) >= 1
    assert 0 <= found["host_steal_pct"] <= 100 and 0 <= found["host_busy_pct"] <= 100
