"""The profile schema: one strict pydantic model per YAML section.

Strict on purpose: an unknown key or a wrong type is an error, because a typo in a profile must never
turn a gate off. Sizes are validated here and stored in their canonical spelling (see ``units``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

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
    health: Seconds | None = None
    compute: Seconds | None = None

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


def _dotted_version(text: str) -> str:
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise ValueError(f"expected a dotted driver version like 550.54.15, got {text!r}")
    return text


ThrottleReason = Literal["hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal", "sw_power_cap"]


class Health(Strict):
    """NVML gates per GPU. GPU count and model come from ``topology`` (gpus_per_node, gpu_model)."""

    min_driver: Annotated[str, AfterValidator(_dotted_version)] | None = None
    require_ecc: bool = True
    nvlink_links: Annotated[int, Field(ge=0)] | None = None  # active links per GPU; None: recorded, not gated
    pcie_gen: PositiveInt | None = None  # None: the generation the GPU and its slot can reach (NVML's max)
    pcie_width: PositiveInt | None = None  # None: the width the GPU and its slot can reach (NVML's max)
    # idle GPUs drop their PCIe link to Gen1 to save power: hold a copy running while the link is read
    pcie_under_load: bool = True
    throttle_reasons: list[ThrottleReason] = ["hw_slowdown", "hw_thermal", "hw_power_brake"]
    temperature_max_c: Annotated[float, Field(gt=0)] | None = None  # None: each GPU's own slowdown temperature


class Compute(Strict):
    """Per-GPU speed, every GPU at once; the slow one named against the median."""

    matmul_size: PositiveInt = 8192  # m = n = k
    matmul_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    matmul_iters: PositiveInt = 100
    fp8: bool = True  # also an fp8 matmul (torch._scaled_mm) where the GPU has it (compute capability >= 8.9)
    copy_size: Size = "2G"  # bytes read per device copy; bytes read + written count toward GB/s
    copy_iters: PositiveInt = 50
    host_copy_size: Size = "1G"  # pinned host buffer per direction
    host_copy_iters: PositiveInt = 10
    # together: every GPU of a node at once (shares the host's root complex); one_at_a_time: each link alone
    host_links: Literal["together", "one_at_a_time"] = "together"
    warmup_iters: Annotated[int, Field(ge=0)] = 10
    tolerance: Annotated[float, Field(ge=0, le=1)] = 0.10  # largest shortfall of one GPU under the median
    median_of: Literal["cluster", "node"] = "cluster"
    duration_s: Annotated[float, Field(ge=0)] = 0  # burn-in with a result check across GPUs; 0: off
    seed: int = 1234


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
    health: Health = Health()
    compute: Compute = Compute()
    thresholds: dict[str, Threshold] = {}
