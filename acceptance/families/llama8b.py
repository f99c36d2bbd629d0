"""The reference workload: Llama-3.1-8B's shape trained as its public figures were, so a buyer can hold the
cluster's tokens/s and MFU against NVIDIA's.

The model is built from the published config (random weights, nothing downloaded), trained in bf16 with
AdamW at sequence 8192 under FSDP2 with each decoder layer compiled and under DeepSpeed ZeRO-3, through the
training probe's own code (``acceptance.probes.training``: same strategies, same figures). Where the whole
model does not fit the GPUs (one 80 GB H100 holds 8 of its 32 layers), the run builds as many layers as fit
and every figure says so. MFU counts 6N + 12·L·H·Q·T FLOPs per token with N the parameters of matrix
products (the input embedding excluded), against the dense peak of the run's precision; the reference rows
(``profile/references.yaml``) are the public figures it is held against.

Opt-in: ``-m llama8b``, its test module, or the burn-in tier; the standard suite's time is untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator

from acceptance.families.gpu_users import foreign_text
from acceptance.families.training import Training, workload_figures
from acceptance.families.training.initial import peak
from acceptance.families.training.rules import Run, loss_figure, optional_figure
from acceptance.json_types import JSONObject
from acceptance.numbers import fmt
from acceptance.schema.family import Behaviour, Family, Shapes
from acceptance.schema.fields import PositiveInt, Strict
from acceptance.schema.figure import Figure
from acceptance.schema.initial import Initial, InitialSetup, RowFacts
from acceptance.schema.peaks import Peaks, Precision

# the shapes in acceptance/probes/train_model.py: the 8B as published, and the same config at toy width
LLAMA8B_MODELS = ("llama-3.1-8b", "llama-3.1-8b-tiny")
LLAMA8B_STRATEGIES = ("fsdp", "zero3")  # the public stacks: FSDP2 (NeMo AutoModel, torchtitan), ZeRO-3 (DeepSpeed)
PROBE = "llama8b"


class Llama8b(Strict):
    """The Llama-3.1-8B reference workload, each strategy ``steps`` timed steps after ``warmup_steps``."""

    model: Literal[LLAMA8B_MODELS] = "llama-3.1-8b"  # type: ignore[valid-type]
    # decoder layers to build: "fit": as many of the shape's as the smallest GPU holds (all where they fit); a
    # count: that many (at most the shape's)
    layers: PositiveInt | Literal["fit"] = "fit"
    seq_len: PositiveInt = 8192  # as the public figures (DGX Cloud Benchmarking, NeMo) are measured
    micro_batch: PositiveInt = 1
    # micro-batches a GPU runs per optimizer step, as the public figures are measured: global batch 128 of
    # micro-batch 1 on 8 GPUs (Megatron-Bridge's performance summary, DGX-H100 LLAMA3_8B: GBS 128, MBS 1, GA 16);
    # fewer leave the optimizer's step a larger share of a step than the reference pays
    grad_accum: PositiveInt = 16
    warmup_steps: Annotated[int, Field(ge=1)] = 2  # the first compiles each layer, the second is warm
    steps: PositiveInt = 5
    windows: PositiveInt | None = None  # of the timed steps: tokens/s is their median; None: 5 (at most steps)
    precision: Precision = "bf16"
    compile: Literal["none", "blocks"] = "blocks"  # blocks: each decoder layer (ZeRO-3 runs eagerly)
    lr: Annotated[float, Field(gt=0)] = 3e-4  # constant, AdamW's (the training section's default)
    strategies: list[Literal[LLAMA8B_STRATEGIES]] = ["fsdp", "zero3"]  # type: ignore[valid-type]
    peak_tflops: Peaks = None  # per GPU, dense, per precision (1 TFLOP/s = 1e12); MFU takes ``precision``'s
    peak_tflops_source: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Llama8b:
        if not self.strategies or len(set(self.strategies)) != len(self.strategies):
            raise ValueError("strategies must list at least one strategy, each once")
        if (self.peak_tflops is None) != (self.peak_tflops_source is None):
            raise ValueError("peak_tflops and peak_tflops_source go together (say where the peak comes from)")
        if self.windows is not None and self.windows > self.steps:
            raise ValueError(f"windows ({self.windows}) exceeds steps ({self.steps}): every timed window needs a step")
        return self


_FIGURE = "llama8b.<strategy>.<figure>"


def _strategies(s: Llama8b) -> Sequence[str]:
    return s.strategies


def initial_section(_setup: InitialSetup, bounds: Mapping[str, RowFacts | None]) -> JSONObject:
    """Its MFU against the public figure: the compute reference's peak (opt-in: -m llama8b, burn-in)."""
    return peak(bounds)


def initial_metrics(figure: str, _holds_at: Callable[[int], bool], _setup: InitialSetup) -> list[str]:
    """The reference workload's rows hold for any world (it fits what it can)."""
    return [figure]


_STRATEGY = Shapes[Llama8b](_FIGURE, {"strategy": _strategies})
LLAMA8B = Family(
    "llama8b",
    "the reference workload: Llama-3.1-8B under FSDP2 and ZeRO-3, held against public figures",
    Llama8b,
    (
        *workload_figures(_STRATEGY),
        _STRATEGY.figure(r"(?P<strategy>\w+)\.(layers)", "none"),
    ),
    probes=(PROBE,),
    opt_in=True,
    behaviour=Behaviour(initial=Initial(initial_section, 50, initial_metrics)),
)  # fmt: skip


def training_section(section: Llama8b, world_size: int = 1) -> JSONObject:
    """The training probe's section for the workload: the training defaults (learning rate, clipping, seed)
    with the workload's model, layers, sequence, batch, accumulation, steps, precision and compile mode; no
    scaling baseline and no canary (a reference run is measured once, on the whole world)."""
    found: JSONObject = Training().model_dump(mode="json")
    found.update(section.model_dump(mode="json"))
    # over several ranks the gradients are reduced each micro-batch and stay sharded between them (torchtitan's
    # way), as the memory estimate counts them; one rank shards nothing, and reducing at the last micro-batch
    # alone, as the public figures' Megatron does, holds the same memory: 53.2% MFU against 56.1% on one H100
    # (benchmarks/llama8b_knobs.py, docs/measurements.md)
    found.update(
        {"scaling_baseline": "none", "canary_steps": 1, "deepspeed": {}, "sync_every_micro_batch": world_size > 1}
    )
    return found


def spec(section: Llama8b, parts: list[str], world_size: int, ranks_per_node: int, nodes: int) -> JSONObject:
    """The probe's spec for one job of ``parts`` (strategies): the training probe's, under its own name."""
    return {
        "training": training_section(section, world_size),
        "strategies": list(parts),
        "deepspeed_user": dict.fromkeys(parts),
        "expected_world_size": world_size,
        "ranks_per_node": ranks_per_node,
        "nodes": nodes,
    }


def layers_text(shape: JSONObject) -> str:
    """ "8 of 32 decoder layers" where the run built fewer than the shape has, else "all 32 decoder layers"."""
    layers, of = shape.get("layers"), shape.get("layers_of")
    if of is None or of == layers:
        return f"all {layers} decoder layers"
    return f"{layers} of {of} decoder layers (as many as fit the GPUs' memory, or as the profile's layers says)"


def _workload(run: Run) -> str:
    setup = run["setup"]
    # FSDP2 reduces where the section says (ZeRO-3 each micro-batch's, as it goes): a public figure's choice
    reduced = ""
    if run["strategy"] == "fsdp":
        every = setup.get("sync_every_micro_batch")
        reduced = f", gradients reduced at {'each micro-batch' if every else 'the last micro-batch'}"
    return (
        f"{run['strategy']} {run['model']}, {layers_text(run['model_shape'])}, {run['precision']}, seq "
        f"{setup['seq_len']}, micro-batch {setup['micro_batch']} x {setup.get('grad_accum', 1)} accumulated"
        f"{reduced}, compile {run['compile']}, on {run['world_size']} rank(s) ({run['device_name']})"
    )


def strategy_figures(strategy: str, run: Run, section: Llama8b, mfu_reference: str) -> dict[str, Figure]:
    """Every figure of one strategy's run, by metric. ``mfu_reference``: the MFU over its public reference, in
    words (or that the table has none here); MFU skips where the profile sets no peak or the run measured none."""
    prefix = f"llama8b.{strategy}."
    tokens = (
        f"{_workload(run)}: median of {len(run['windows'])} timed windows ({run['setup']['steps']} steps), "
        f"min {fmt(run['tokens_per_s_per_gpu_min'])}, max {fmt(run['tokens_per_s_per_gpu_max'])} "
        f"((max - min) / median {run['tokens_per_s_per_gpu_spread']:.1%})"
    )
    cause = foreign_text(run.get("foreign"), run.get("xids"))
    tokens += f"\n{cause}" if cause else ""
    per_rank = ", ".join(f"{m:.2f}" for m in run["peak_mem_per_rank_gib"])
    found = [
        Figure(f"{prefix}tokens_per_s_per_gpu", "tokens/s", run["tokens_per_s_per_gpu"], findings=[tokens]),
        _mfu(prefix, run, section, mfu_reference),
        Figure(f"{prefix}layers", "layers", run["model_shape"]["layers"], findings=[layers_text(run["model_shape"])]),
        Figure(f"{prefix}step_time_s", "s", run["step_time_s"], findings=[f"median step, {_workload(run)}"]),
        Figure(f"{prefix}step_time_std_s", "s", run["step_time_std_s"], findings=["standard deviation of the steps"]),
        Figure(
            f"{prefix}peak_mem_gib", "GiB", run["peak_mem_gib"],
            findings=[f"max over ranks of {run['peak_mem_source']}; per rank GiB: {per_rank}; {_workload(run)}"],
        ),
        loss_figure(f"{prefix}loss_ratio", run),
    ]  # fmt: skip
    return {fig.metric: fig for fig in found}


def _mfu(prefix: str, run: Run, section: Llama8b, reference: str) -> Figure:
    if section.peak_tflops is None:
        why = "the profile sets no llama8b.peak_tflops (cluster-acceptance init writes it)"
        return Figure(f"{prefix}mfu", "fraction", skip=f"MFU not measured: {why}")
    shape = run["model_shape"]
    return optional_figure(
        f"{prefix}mfu", "fraction", run["mfu"], f"MFU not measured: {run['mfu_reason']}",
        lambda: f"{_workload(run)}: {fmt(run['tokens_per_s_per_gpu'])} tokens/s x {run['flops_per_token']:.4g} "
        f"FLOP/token ({shape['flops_formula']}, N = {shape['matmul_params']:,} parameters in matrix products: the "
        f"input embedding excluded) / dense {run['precision']} peak {run['peak_tflops']:g} TFLOP/s "
        f"({run['peak_tflops_source']})\n{reference}",
    )  # fmt: skip
