"""The profile section of each family (``connectivity:``, ``collectives:``, ...): one strict model each.

The registry (``registry.py``) names each family's section model; the profile model is built from it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from acceptance.profile.collectives import COLLECTIVE_OPS
from acceptance.profile.dtypes import DTYPE_NAMES
from acceptance.profile.fields import PositiveInt, RunName, Size, Strict
from acceptance.profile.peaks import Peaks, Precision
from acceptance.profile.rounding import U_FP8_ACCUMULATE, accumulation_gamma, largest_k


class Connectivity(Strict):
    p2p_size: Size = "16M"
    p2p_iters: PositiveInt = 5
    barrier_iters: PositiveInt = 20


class Internode(Strict):
    """Collectives across nodes next to the same inside each node; measured when there are 2+ nodes."""

    ops: list[Literal[COLLECTIVE_OPS]] = ["all_reduce"]  # type: ignore[valid-type]
    sizes: list[Size] = ["256M", "1G"]
    ring: bool = False  # also across nodes with NCCL_ALGO=Ring
    one_gpu_per_node: bool = False  # also with local rank 0 of each node only: the network alone
    # when a figure across nodes fails: name the node and the rail in rounds of node pairs (none when healthy)
    isolation: bool = True
    # the effect size worth naming in those rounds: a node or path at this fraction of the healthy (median)
    # pair is named, on two cleared witnesses within a false-blame budget (acceptance.families.isolation)
    slow_pair_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.5  # 1 would be no slowdown at all


class Collectives(Strict):
    ops: list[Literal[COLLECTIVE_OPS]] = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]  # type: ignore[valid-type]
    sizes: list[Size] = ["1M", "16M", "256M", "1G"]
    dtype: Literal[DTYPE_NAMES] = "bfloat16"  # type: ignore[valid-type]
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


# The fields the drift family compares. Node fields: one value per node (local rank 0 reads them); GPU
# fields: one value per GPU (each rank reads its own). The probe (acceptance/probes/drift.py) reads them and
# its docstring says from where; every value is text, compared exactly.
DRIFT_NODE_FIELDS = ("kernel", "os", "python", "torch", "cuda", "nccl", "driver", "nic_firmware", "nic_rate")
DRIFT_GPU_FIELDS = (
    "gpu_name",
    "vbios",
    "ecc_mode",
    "persistence_mode",
    "mig_mode",
    "power_limit_w",
    "app_clock_sm_mhz",
    "app_clock_mem_mhz",
    "pcie_max_gen",
    "pcie_max_width",
)
DRIFT_FIELDS = DRIFT_NODE_FIELDS + DRIFT_GPU_FIELDS


def _drift_field(name: str) -> str:
    if name not in DRIFT_FIELDS:
        raise ValueError(f"unknown drift field {name!r} (expected one of: {', '.join(DRIFT_FIELDS)})")
    return name


DriftField = Annotated[str, AfterValidator(_drift_field)]


class Drift(Strict):
    """Every node and GPU agrees on its software and settings; ``golden`` pins fields to a value."""

    # field -> the value every node (GPU) must have, as text: quote it (YAML reads 2.10 as the number 2.1)
    golden: dict[DriftField, str] = {}
    ignore: list[DriftField] = []  # recorded, not compared (``kernel`` on a fleet that mixes kernels)

    @model_validator(mode="after")
    def _consistent(self) -> Drift:
        both = sorted(set(self.golden) & set(self.ignore))
        if both:
            raise ValueError(f"{', '.join(both)}: pinned in golden and ignored at once (pin it, or ignore it)")
        return self


class Compute(Strict):
    """Per-GPU speed, every GPU at once; the slow one named against the median."""

    matmul_size: PositiveInt = 8192  # m = n = k
    matmul_dtype: Literal[DTYPE_NAMES] = "bfloat16"  # type: ignore[valid-type]
    matmul_iters: PositiveInt = 100
    # and at least this long: under the power cap the clocks swing with a period of about 1 s (an H100 at
    # 700 W: 1,125-1,425 MHz, 607-713 TFLOP/s; docs/measurements.md, findings), so a 0.15 s loop reads its phase
    matmul_min_s: Annotated[float, Field(ge=0, le=60)] = 2.0
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
    # a figure under its bound (or a GPU past the tolerance) is measured again this many times before it
    # stands: a shared host's neighbours can hold the host links down for seconds (plugin/remeasure.py)
    remeasure: Annotated[int, Field(ge=0, le=3)] = 1


TRAIN_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3", "zero3_offload")
DEEPSPEED_STRATEGIES = ("zero1", "zero2", "zero3", "zero3_offload")
TRAIN_MODELS = ("tiny", "gpt2-124m", "gpt2-355m", "llama-1b")  # shapes in acceptance/probes/train_model.py


class DeepSpeedRun(Strict):
    """A DeepSpeed run under its own name: a built-in stage with a user's DeepSpeed JSON merged on top."""

    base: Literal[DEEPSPEED_STRATEGIES]  # type: ignore[valid-type]
    config: dict[str, Any] | str  # the JSON itself, or a file (relative to the profile's folder)


class Training(Strict):
    """Short real training runs, all strategies in one torchrun job; ``steps`` timed after ``warmup_steps``."""

    model: Literal[TRAIN_MODELS] = "gpt2-124m"  # type: ignore[valid-type]
    seq_len: PositiveInt = 1024
    micro_batch: PositiveInt = 16
    grad_accum: PositiveInt = 1
    warmup_steps: Annotated[int, Field(ge=0)] = 5
    steps: PositiveInt = 20
    windows: PositiveInt | None = None  # of the timed steps: tokens/s is their median; None: 5 (at most steps)
    precision: Precision = "bf16"
    compile: Literal["none", "blocks", "model"] = "none"  # blocks: each decoder layer, a short cold start
    lr: Annotated[float, Field(ge=0)] = 3e-4  # constant: the same for every strategy, so curves compare
    grad_clip: Annotated[float, Field(ge=0)] = 1.0  # 0: off
    seed: int = 1234
    strategies: list[RunName] = ["ddp", "fsdp", "zero2", "zero3"]
    deepspeed: dict[RunName, DeepSpeedRun] = {}
    peak_tflops: Peaks = None  # per GPU, dense, per precision (1 TFLOP/s = 1e12); MFU takes ``precision``'s
    peak_tflops_source: str | None = None
    scaling_baseline: Literal["one_gpu", "one_node", "none"] = "one_gpu"
    scaling_strategy: RunName = "ddp"
    canary_steps: PositiveInt = 5
    canary_rtol: Annotated[float, Field(ge=0)] = 0.02
    # after the timed steps, this many more under torch.profiler: a trace per rank, none of the figures
    trace_steps: Annotated[int, Field(ge=0)] = 0

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
        if self.windows is not None and self.windows > self.steps:
            raise ValueError(f"windows ({self.windows}) exceeds steps ({self.steps}): every timed window needs a step")
        if self.canary_steps > self.warmup_steps + self.steps:
            raise ValueError("canary_steps exceeds warmup_steps + steps: the runs would not have that many losses")
        return self


def _absolute(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError(f"expected an absolute path (each node resolves it on its own), got {text!r}")
    return text


class StoragePath(Strict):
    """A folder checked on every node; ``path: null`` is each node's temporary folder ($TMPDIR, else /tmp)."""

    path: Annotated[str, AfterValidator(_absolute)] | None = None
    shared: bool = False  # true: one filesystem every node sees (node 0 writes a file, every node reads it back)


class Storage(Strict):
    """Paths every node must see, and a checkpoint written to each and read back; ``checkpoint_size`` per rank."""

    paths: dict[RunName, StoragePath] = {"tmp": StoragePath()}  # the name goes into metric names and test ids
    checkpoint_size: Size = "256M"


SOAK_SLOWDOWNS: list[ThrottleReason] = ["hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal"]


class Soak(Strict):
    """Burn-in: every GPU at once for ``duration_s``: checked GEMMs, memory patterns, a checked all_reduce,
    NVML sampled all along (``acceptance/probes/soak.py``). Opt-in: ``-m soak`` or the burn-in tier."""

    duration_s: Annotated[float, Field(gt=0, le=7 * 86400)] = 60.0
    matmul_size: PositiveInt = 8192  # m = n = k, in bfloat16 (and fp8 where the GPU has it)
    fp8: bool = True  # also an fp8 GEMM (torch._scaled_mm) where the GPU has it (compute capability >= 8.9)
    # one round: a timed batch of GEMMs of about this long, an all_reduce beside it, one memory pattern pass;
    # the ranks agree after each round whether the soak is over
    round_s: Annotated[float, Field(gt=0, le=60)] = 0.5
    # every this many seconds of soak, every rank's record so far is gathered into partial.json: a soak
    # stopped part-way (its timeout, a killed rank) is judged on what it measured until then
    checkpoint_s: Annotated[float, Field(gt=0, le=86400)] = 300.0
    window_s: Annotated[float, Field(gt=0)] = 5.0  # sustained TFLOP/s: the median of windows this long
    memory_fraction: Annotated[float, Field(gt=0, le=0.95)] = 0.8  # of the GPU's free memory, for the patterns
    # the least share of that (or of host_memory_size) the patterns must cover (soak.memory_coverage): an
    # allocation halved after an out-of-memory error, or left short by the GEMMs' memory, checks less
    memory_coverage_min: Annotated[float, Field(gt=0, le=1)] = 0.5
    host_memory_size: Size = "64M"  # on the CPU (topology.device: cpu): the patterns' buffer
    allreduce_size: Size = "64M"  # bytes of float32 all_reduced each round, every element checked
    spot_rows: PositiveInt = 2  # rows of the first result checked against an fp64 reference on the host
    sample_s: Annotated[float, Field(gt=0, le=60)] = 1.0  # NVML's sampling period
    tolerance: Annotated[float, Field(ge=0, le=1)] = 0.10  # largest shortfall of one GPU under the median
    median_of: Literal["cluster", "node"] = "cluster"
    # clock-event reasons that fail a GPU when set during the soak; sw_power_cap is a GEMM at the power
    # limit, as designed, and is recorded only
    slowdown_reasons: list[ThrottleReason] = SOAK_SLOWDOWNS
    seed: int = 1234

    @model_validator(mode="after")
    def _fp8_bound(self) -> Soak:
        """The fp8 GEMM's fp64 reference check needs an error bound that means something at k = matmul_size:
        Higham's gamma_k = k u / (1 - k u) ("Accuracy and Stability of Numerical Algorithms", §3.1) is 1 at
        k = 8192 for fp8's 14-bit accumulator (u = 2**-14: a 0 passes), infinite at 16384 and negative past
        it; the probabilistic bound (Higham & Mary 2019) carries it to about 24,000 (``rounding``)."""
        if self.fp8 and accumulation_gamma(self.matmul_size, U_FP8_ACCUMULATE) is None:
            raise ValueError(
                f"matmul_size: {self.matmul_size} is too large for the fp8 GEMM's reference check (no meaningful "
                f"error bound for k = {self.matmul_size} with fp8's 14-bit accumulator): at most "
                f"{largest_k(U_FP8_ACCUMULATE)} with fp8 on, or set soak.fp8: false"
            )
        return self


# The error counters of an InfiniBand/RoCE port, as the kernel names them under
# /sys/class/infiniband/<hca>/ports/<port>/counters/ (Documentation/ABI/stable/sysfs-class-infiniband, "port
# counters"): any of them rising while the network probes ran is a link that lost or corrupted data.
FABRIC_ERROR_COUNTERS = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
]


class Fabric(Strict):
    """Every InfiniBand/RoCE port of the node read before and after the network probes (sysfs)."""

    # where the kernel lists the HCAs; a recorded tree in the tests (each node reads its own)
    sysfs_root: Annotated[str, AfterValidator(_absolute)] = "/sys/class/infiniband"
    counters: list[str] = FABRIC_ERROR_COUNTERS  # the counters whose rise fails the node
