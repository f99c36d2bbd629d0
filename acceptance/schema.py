"""The profile schema: one strict pydantic model per YAML section.

Strict on purpose: an unknown key or a wrong type is an error, because a typo in a profile must never
turn a gate off. Sizes are validated here and stored in their canonical spelling (see ``units``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from acceptance.units import canonical_size

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "sendrecv")

Size = Annotated[str, BeforeValidator(canonical_size)]
PositiveInt = Annotated[int, Field(gt=0)]
Seconds = Annotated[float, Field(gt=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Topology(Strict):
    nodes: PositiveInt = 1
    ranks_per_node: PositiveInt | None = None  # processes per node; default: gpus_per_node on cuda, 2 on cpu
    gpus_per_node: Annotated[int, Field(ge=0)] = 0
    gpu_model: str | None = None
    device: Literal["cuda", "cpu"] = "cuda"
    backend: Literal["nccl", "gloo"] = "nccl"
    launcher: Literal["torchrun", "srun"] = "torchrun"
    rdzv_port: Annotated[int, Field(gt=0, lt=65536)] = 29400

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        if self.device == "cpu" and self.backend != "gloo":
            raise ValueError("device cpu needs backend gloo (NCCL runs on GPUs only)")
        if self.device == "cuda" and self.gpus_per_node < 1:
            raise ValueError("device cuda needs gpus_per_node >= 1")
        return self

    @property
    def nproc_per_node(self) -> int:
        if self.ranks_per_node is not None:
            return self.ranks_per_node
        return self.gpus_per_node if self.device == "cuda" else 2

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node


class Timeouts(Strict):
    """Wall-clock limit per probe run, in seconds (start-up included)."""

    default: Seconds = 300
    connectivity: Seconds | None = None
    collectives: Seconds | None = None
    training: Seconds | None = None  # each strategy's run, and the scaling baseline's

    def for_probe(self, probe: str) -> float:
        value = getattr(self, probe, None)
        return float(value if value is not None else self.default)


class Connectivity(Strict):
    p2p_size: Size = "16M"
    p2p_iters: PositiveInt = 5
    barrier_iters: PositiveInt = 20


class Collectives(Strict):
    ops: list[Literal[COLLECTIVE_OPS]] = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]  # type: ignore[valid-type]
    sizes: list[Size] = ["1M", "16M", "256M", "1G"]
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    warmup_iters: Annotated[int, Field(ge=0)] = 5
    iters: PositiveInt = 20
    # auto: a CUDA graph on GPUs (takes Python's launch cost out of the figure), a host clock on the CPU
    timing: Literal["auto", "cuda_graph", "eager"] = "auto"
    check_data: bool = True


TRAIN_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3", "zero3_offload")
DEEPSPEED_STRATEGIES = ("zero1", "zero2", "zero3", "zero3_offload")
TRAIN_MODELS = ("tiny", "gpt2-124m", "gpt2-355m", "llama-1b")  # shapes in acceptance/probes/train_model.py
RunName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]  # it goes into metric names and test ids


class DeepSpeedRun(Strict):
    """A DeepSpeed run under its own name: a built-in stage with a user's DeepSpeed JSON merged on top."""

    base: Literal[DEEPSPEED_STRATEGIES]  # type: ignore[valid-type]
    config: dict[str, Any] | str  # the JSON itself, or a file (relative to the profile's folder)


class Training(Strict):
    """Short real training runs, one torchrun job per strategy; ``steps`` are timed after ``warmup_steps``."""

    model: Literal[TRAIN_MODELS] = "gpt2-124m"  # type: ignore[valid-type]
    seq_len: PositiveInt = 1024
    micro_batch: PositiveInt = 16
    grad_accum: PositiveInt = 1
    warmup_steps: Annotated[int, Field(ge=0)] = 5
    steps: PositiveInt = 20
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    compile: Literal["none", "blocks", "model"] = "none"  # blocks: each decoder layer, a short cold start
    lr: Annotated[float, Field(ge=0)] = 3e-4  # constant: the same for every strategy, so curves compare
    grad_clip: Annotated[float, Field(ge=0)] = 1.0  # 0: off
    seed: int = 1234
    strategies: list[RunName] = ["ddp", "fsdp", "zero2", "zero3"]
    deepspeed: dict[RunName, DeepSpeedRun] = {}
    peak_tflops: Annotated[float, Field(gt=0)] | None = None  # per GPU, dense, at this precision (1 TFLOP/s = 1e12)
    peak_tflops_source: str | None = None
    scaling_baseline: Literal["one_gpu", "one_node", "none"] = "one_gpu"
    scaling_strategy: RunName = "ddp"
    canary_steps: PositiveInt = 5
    canary_rtol: Annotated[float, Field(ge=0)] = 0.02

    @model_validator(mode="after")
    def _consistent(self) -> Training:
        known = set(TRAIN_STRATEGIES) | set(self.deepspeed)
        unknown = [s for s in self.strategies if s not in known]
        if unknown:
            raise ValueError(
                f"strategies {unknown} are neither built in {list(TRAIN_STRATEGIES)} nor named under deepspeed:"
            )
        if not self.strategies or len(set(self.strategies)) != len(self.strategies):
            raise ValueError("strategies must list at least one strategy, each once")
        if (self.peak_tflops is None) != (self.peak_tflops_source is None):
            raise ValueError("peak_tflops and peak_tflops_source go together (say where the peak comes from)")
        if self.scaling_baseline != "none" and self.scaling_strategy not in self.strategies:
            raise ValueError(f"scaling_strategy {self.scaling_strategy!r} is not in strategies {self.strategies}")
        if self.canary_steps > self.warmup_steps + self.steps:
            raise ValueError("canary_steps exceeds warmup_steps + steps: the runs would not have that many losses")
        return self


class Threshold(Strict):
    min: float | None = None
    max: float | None = None
    eq: float | None = None
    ref: float | None = None
    tol: Annotated[float, Field(ge=0)] | None = None
    xfail: str | None = None
    source: str | None = None  # where the bound comes from

    @model_validator(mode="after")
    def _one_kind(self) -> Threshold:
        if self.min is None and self.max is None and self.eq is None and self.ref is None:
            raise ValueError("a threshold needs at least one of min, max, eq, ref")
        if (self.ref is None) != (self.tol is None):
            raise ValueError("ref and tol go together (tol is relative: 0.05 = 5%)")
        if self.eq is not None and (self.min is not None or self.max is not None):
            raise ValueError("eq cannot be combined with min or max")
        return self


class ProfileModel(Strict):
    name: str
    description: str = ""
    extends: str | None = None
    topology: Topology = Topology(device="cpu", backend="gloo", ranks_per_node=2)
    env: dict[str, str] = {}
    timeouts: Timeouts = Timeouts()
    connectivity: Connectivity = Connectivity()
    collectives: Collectives = Collectives()
    training: Training = Training()
    thresholds: dict[str, Threshold] = {}
