"""A training run's figures from its ranks' measurements: the median over timed windows and its spread, MFU
at the run's precision, utilisation and clock events. Free of torch: the probe computes them on its ranks,
the tests check them against the profile.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import Literal

from typing_extensions import NotRequired, TypedDict

from acceptance.families.gpu_users import ForeignSeen, PcieLow, XidSeen
from acceptance.json_types import JSONObject
from acceptance.numbers import spread


class DeepSpeedRunConfig(TypedDict):
    base: str  # the built-in stage it starts from
    config: JSONObject | str  # the user's DeepSpeed JSON, or its file


class TrainingConfig(TypedDict):
    """The training probe's section of the profile (``t`` in the probe), as plain data."""

    model: str
    seq_len: int
    micro_batch: int
    grad_accum: int
    warmup_steps: int
    steps: int
    windows: int | None
    precision: str
    compile: str  # none, blocks or model
    lr: float
    grad_clip: float
    seed: int
    strategies: list[str]
    deepspeed: dict[str, DeepSpeedRunConfig]
    peak_tflops: dict[str, float] | None
    peak_tflops_source: str | None
    scaling_baseline: str
    scaling_strategy: str
    canary_steps: int
    canary_rtol: float
    trace_steps: int
    # the decoder layers to build of the model's shape: a count, or "fit": as many as the GPUs' memory holds
    # (``probes.train_model.layers_that_fit``); left out or None: all of them (the reference workload sets it)
    layers: NotRequired[int | Literal["fit"] | None]
    # FSDP2 reduces the gradients of every micro-batch (sharded between them) rather than the last one's only
    # (the reference workload sets it; left out: the last one's)
    sync_every_micro_batch: NotRequired[bool]


class GpuUtil(TypedDict):
    """A rank's GPU utilisation and clock events over the timed steps (``probes.gpu_sampler``)."""

    samples: int
    clock_events: dict[str, float] | None  # reason -> share of samples it was set in
    clock_events_reason: str | None
    mean_pct: float | None
    reason: str | None
    foreign: NotRequired[list[ForeignSeen]]  # processes not of this run seen on the GPU meanwhile
    pcie_low: NotRequired[PcieLow]  # the GPU's PCIe link below its maximum meanwhile
    xids: NotRequired[list[XidSeen]]  # critical XID events meanwhile


class HostLoadFigures(TypedDict):
    """The host's load over the timed steps (``probes.host_load``)."""

    wall_s: float
    thread_cpu_s: float
    cpus_allowed: int | None
    thread_busy: float | None
    involuntary_switches: NotRequired[int]
    host_busy_pct: NotRequired[float]
    host_steal_pct: NotRequired[float]
    host_reason: NotRequired[str]


class Trace(TypedDict):
    steps: int
    files: list[str]
    host_blocked_s_per_step: dict[str, float]
    host_blocked_calls_per_step: dict[str, float]


class ModelShape(TypedDict):
    params: int
    matmul_params: int
    layers: int
    heads: int
    head_dim: int
    vocab_size: int
    flops_per_token: int
    flops_formula: str
    attn_implementation: str | None
    layers_of: NotRequired[int]  # the decoder layers of the whole shape, where the run built fewer


class RankRun(TypedDict):
    """One rank's measurements of one strategy."""

    rank: int
    host: str
    step_s: list[float]
    loop_s: float
    mem_gib: float
    util: GpuUtil
    host_load: HostLoadFigures
    trace: Trace | None
    held_at_start_gib: float


class RawRun(TypedDict):
    """A strategy's measurements on every rank, before the figures (``probes.training.measure``)."""

    ranks: list[RankRun]
    losses: list[float]
    shape: ModelShape
    info: JSONObject  # what the strategy set up: compile mode, precision, DeepSpeed's config
    mem_source: str


class Window(TypedDict):
    steps: list[int]  # [first, end)
    seconds: float
    tokens_per_s: float


class Throughput(TypedDict):
    tokens_per_s_per_gpu: float
    tokens_per_s_per_gpu_q1: float
    tokens_per_s_per_gpu_q3: float
    tokens_per_s_per_gpu_min: float
    tokens_per_s_per_gpu_max: float
    tokens_per_s_per_gpu_spread: float
    tokens_per_s_per_gpu_loop: float
    windows: list[Window]


class RankRecord(TypedDict):
    """What the figures keep of a rank's measurements (PER_RANK; None where a rank lacks one)."""

    rank: int | None
    host: str | None
    loop_s: float | None
    mem_gib: float | None
    util: GpuUtil | None
    host_load: HostLoadFigures | None
    trace: Trace | None


class TrainingFigures(Throughput):
    tokens_per_step_per_gpu: int
    step_time_s: float
    step_time_std_s: float
    step_times_s: list[float]
    timed_loop_s: float
    peak_mem_gib: float
    peak_mem_per_rank_gib: list[float]
    peak_mem_source: str
    held_at_start_gib: list[float | None]
    flops_per_token: int
    mfu: float | None
    mfu_reason: str | None
    peak_tflops: float | None
    peak_tflops_source: str | None
    gpu_util_pct: float | None
    gpu_util_per_rank_pct: list[float | None]
    gpu_util_reason: str | None
    clock_events: dict[str, dict[str, float]]
    clock_events_reason: str | None
    # per rank, processes not of this run seen on its GPU during the timed steps: the cause of a slow run
    foreign: NotRequired[dict[str, list[ForeignSeen]]]
    # per rank, critical XIDs seen on its GPU during the timed steps (``gpu_users.gpu_fault_text``)
    xids: NotRequired[dict[str, list[XidSeen]]]
    losses: list[float]
    loss_first: float
    loss_last: float
    loss_ratio: float
    world_size: int
    per_rank: list[RankRecord]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile), interpolated between the values (``method="inclusive"``)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


DEFAULT_WINDOWS = 5  # the median and both quartiles fall on a window of their own


def window_count(t: TrainingConfig) -> int:
    """``training.windows``, or by default five (one per step when there are fewer)."""
    return int(t.get("windows") or min(DEFAULT_WINDOWS, int(t["steps"])))


def windows(ranks: Sequence[RankRun], count: int, tokens_per_step: int) -> list[Window]:
    """The timed steps cut into ``count`` consecutive windows (sizes differ by one step at most); a window
    lasts as long as on its slowest rank, and its figure is the tokens per GPU over that time."""
    steps = len(ranks[0]["step_s"])
    count = max(1, min(count, steps))
    edges = [round(i * steps / count) for i in range(count + 1)]
    out: list[Window] = []
    for first, end in itertools.pairwise(edges):
        seconds = max(sum(r["step_s"][first:end]) for r in ranks)
        rate = tokens_per_step * (end - first) / seconds
        out.append({"steps": [first, end], "seconds": seconds, "tokens_per_s": rate})
    return out


def throughput(ranks: Sequence[RankRun], count: int, tokens_per_step: int) -> Throughput:
    """The median over the timed windows, and its spread: the figure a bound applies to."""
    found = windows(ranks, count, tokens_per_step)
    rates = sorted(w["tokens_per_s"] for w in found)
    q1, median, q3 = quartiles(rates)
    loop_s = max(r["loop_s"] for r in ranks)
    return {
        "tokens_per_s_per_gpu": median,
        "tokens_per_s_per_gpu_q1": q1,
        "tokens_per_s_per_gpu_q3": q3,
        "tokens_per_s_per_gpu_min": rates[0],
        "tokens_per_s_per_gpu_max": rates[-1],
        "tokens_per_s_per_gpu_spread": spread(rates),
        # the whole timed loop between two host synchronisations, as earlier versions reported it
        "tokens_per_s_per_gpu_loop": tokens_per_step * len(ranks[0]["step_s"]) / loop_s,
        "windows": found,
    }


def peak_for(t: TrainingConfig) -> tuple[float | None, str | None]:
    """The dense peak for the run's precision (bf16/fp16: tensor cores; fp32: TF32), or why there is none."""
    peaks = t.get("peak_tflops") or {}
    peak = peaks.get(t["precision"])
    if peak is not None:
        return float(peak), None
    if not peaks:
        return None, "the profile sets no training.peak_tflops"
    return None, f"training.peak_tflops gives no peak for precision {t['precision']} (it has {', '.join(peaks)})"


def clock_events(ranks: Sequence[RankRun]) -> dict[str, dict[str, float]]:
    """Per rank, the clock-event reasons seen during the timed steps and their share of samples."""
    return {str(r["rank"]): r["util"].get("clock_events") or {} for r in ranks if r["util"].get("clock_events")}


# what each rank's record keeps of its measurements (its step times are in the windows already)
PER_RANK = ("rank", "host", "loop_s", "mem_gib", "util", "host_load", "trace")


def figures(raw: RawRun, t: TrainingConfig, world_size: int) -> TrainingFigures:
    """The cluster's figures from every rank's measurements (the slowest rank's pace, the largest memory)."""
    ranks, shape, losses = raw["ranks"], raw["shape"], raw["losses"]
    tokens_per_step = t["micro_batch"] * t["grad_accum"] * t["seq_len"]
    step_s = [max(r["step_s"][i] for r in ranks) for i in range(len(ranks[0]["step_s"]))]
    rate = throughput(ranks, window_count(t), tokens_per_step)
    utils = [r["util"]["mean_pct"] for r in ranks]
    peak, no_peak = peak_for(t)
    return {
        "tokens_per_step_per_gpu": tokens_per_step,
        **rate,
        "step_time_s": statistics.median(step_s),
        "step_time_std_s": statistics.pstdev(step_s),
        "step_times_s": step_s,
        "timed_loop_s": max(r["loop_s"] for r in ranks),
        "peak_mem_gib": max(r["mem_gib"] for r in ranks),
        "peak_mem_per_rank_gib": [r["mem_gib"] for r in ranks],
        "peak_mem_source": raw["mem_source"],
        # the memory held when the strategy started, which the peak includes (older evidence: none)
        "held_at_start_gib": [r.get("held_at_start_gib") for r in ranks],
        "flops_per_token": shape["flops_per_token"],
        "mfu": rate["tokens_per_s_per_gpu"] * shape["flops_per_token"] / (peak * 1e12) if peak else None,
        "mfu_reason": no_peak,
        "peak_tflops": peak,
        "peak_tflops_source": t.get("peak_tflops_source"),
        "gpu_util_pct": min(u for u in utils if u is not None) if None not in utils else None,
        "gpu_util_per_rank_pct": utils,
        "gpu_util_reason": next((r["util"]["reason"] for r in ranks if r["util"]["reason"]), None),
        "clock_events": clock_events(ranks),
        "foreign": {str(r["rank"]): r["util"]["foreign"] for r in ranks if r["util"].get("foreign")},
        "xids": {str(r["rank"]): r["util"]["xids"] for r in ranks if r["util"].get("xids")},
        "clock_events_reason": next((r["util"].get("clock_events_reason") for r in ranks), None),
        "losses": losses,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "loss_ratio": losses[-1] / losses[0] if losses[0] else float("nan"),
        "world_size": world_size,
        "per_rank": [
            {
                "rank": r.get("rank"),
                "host": r.get("host"),
                "loop_s": r.get("loop_s"),
                "mem_gib": r.get("mem_gib"),
                "util": r.get("util"),
                "host_load": r.get("host_load"),
                "trace": r.get("trace"),
            }
            for r in ranks
        ],
    }
