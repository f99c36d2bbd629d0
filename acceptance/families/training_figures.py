"""A training run's figures from its ranks' measurements: the median over timed windows and its spread, MFU
at the run's precision, utilisation and clock events. Free of torch: the probe computes them on its ranks,
the tests check them against the profile.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from acceptance.numbers import spread


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile), interpolated between the values (``method="inclusive"``)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


DEFAULT_WINDOWS = 5  # the median and both quartiles fall on a window of their own


def window_count(t: dict[str, Any]) -> int:
    """``training.windows``, or by default five (one per step when there are fewer)."""
    return int(t.get("windows") or min(DEFAULT_WINDOWS, int(t["steps"])))


def windows(ranks: list[dict[str, Any]], count: int, tokens_per_step: int) -> list[dict[str, Any]]:
    """The timed steps cut into ``count`` consecutive windows (sizes differ by one step at most); a window
    lasts as long as on its slowest rank, and its figure is the tokens per GPU over that time."""
    steps = len(ranks[0]["step_s"])
    count = max(1, min(count, steps))
    edges = [round(i * steps / count) for i in range(count + 1)]
    out = []
    for first, end in itertools.pairwise(edges):
        seconds = max(sum(r["step_s"][first:end]) for r in ranks)
        rate = tokens_per_step * (end - first) / seconds
        out.append({"steps": [first, end], "seconds": seconds, "tokens_per_s": rate})
    return out


def throughput(ranks: list[dict[str, Any]], count: int, tokens_per_step: int) -> dict[str, Any]:
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


def peak_for(t: dict[str, Any]) -> tuple[float | None, str | None]:
    """The dense peak for the run's precision (bf16/fp16: tensor cores; fp32: TF32), or why there is none."""
    peaks = t.get("peak_tflops") or {}
    peak = peaks.get(t["precision"])
    if peak is not None:
        return float(peak), None
    if not peaks:
        return None, "the profile sets no training.peak_tflops"
    return None, f"training.peak_tflops gives no peak for precision {t['precision']} (it has {', '.join(peaks)})"


def clock_events(ranks: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per rank, the clock-event reasons seen during the timed steps and their share of samples."""
    return {str(r["rank"]): r["util"].get("clock_events") or {} for r in ranks if r["util"].get("clock_events")}


# what each rank's record keeps of its measurements (its step times are in the windows already)
PER_RANK = ("rank", "host", "loop_s", "mem_gib", "util", "host_load", "trace")


def figures(raw: dict[str, Any], t: dict[str, Any], world_size: int) -> dict[str, Any]:
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
        "gpu_util_pct": min(utils) if None not in utils else None,
        "gpu_util_per_rank_pct": utils,
        "gpu_util_reason": next((r["util"]["reason"] for r in ranks if r["util"]["reason"]), None),
        "clock_events": clock_events(ranks),
        "clock_events_reason": next((r["util"].get("clock_events_reason") for r in ranks), None),
        "losses": losses,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "loss_ratio": losses[-1] / losses[0] if losses[0] else float("nan"),
        "world_size": world_size,
        "per_rank": [
            {k: r.get(k) for k in ("rank", "host", "loop_s", "mem_gib", "util", "host_load", "trace")} for r in ranks
        ],
    }
