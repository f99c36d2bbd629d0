"""The training runs a profile asks for, and the figures computed across them (scaling, numerics canary).

Free of torch and pytest: the acceptance tests and ``acceptance.cli.bench_train`` both plan runs with it.
Every strategy of a run shares one torchrun job (start-up, imports and rendezvous are paid once); the probe
tears each strategy down before the next and records a failure under the strategy's name. A strategy that
kills its job (a crash on some ranks only, a hang until the timeout) takes only itself down: the job's
finished strategies are kept, it is named with the job's error, and the strategies after it run in a new
job. The scaling baseline needs a smaller world, so it is a job of its own.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptance.profile.loader import Profile
from acceptance.profile.model import Training

PROBE = "training"


class TrainingPlanError(ValueError):
    """A training section that names something unusable (a DeepSpeed JSON that cannot be read)."""


BASELINE_KEY = f"{PROBE}-baseline"


def job_key(attempt: int) -> str:
    """The first job is ``training``; the next ones (a further ZeRO-3 run, or the strategies after one that
    killed its job) ``training-2``, ``training-3``, ..."""
    return PROBE if attempt == 0 else f"{PROBE}-{attempt + 1}"


def user_config(profile: Profile, strategy: str) -> dict[str, Any] | None:
    """The user's DeepSpeed JSON for ``strategy``: inline, or read from a file beside the profile."""
    run = profile.model.training.deepspeed.get(strategy)
    if run is None:
        return None
    if isinstance(run.config, dict):
        return dict(run.config)
    path = Path(run.config)
    if not path.is_absolute():
        path = profile.path.parent / path
    where = f"{profile.path}: training.deepspeed.{strategy}.config"
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise TrainingPlanError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TrainingPlanError(f"{where}: {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TrainingPlanError(f"{where}: {path} must hold a JSON object, got {type(data).__name__}")
    return data


def spec(profile: Profile, strategies: list[str], world_size: int, ranks_per_node: int, nodes: int) -> dict[str, Any]:
    """The probe's spec for one job; raises TrainingPlanError for a strategy whose DeepSpeed JSON is unusable."""
    return {
        PROBE: profile.resolved[PROBE],
        "strategies": list(strategies),
        "deepspeed_user": {s: user_config(profile, s) for s in strategies},
        "expected_world_size": world_size,
        "ranks_per_node": ranks_per_node,
        "nodes": nodes,
    }


# (strategies, job key) -> (the job's per-strategy results, or what the job died of with the results it
# finished before that): the caller launches the job, this module decides what to run and who failed
Launch = Callable[[list[str], str], tuple[dict[str, dict[str, Any]], str | None]]


# DeepSpeed 0.19's ZeRO-3 engine stays alive in its process after DeepSpeedEngine.destroy() and every
# teardown the probe does: on 2x H200 each ZeRO-3 run of llama-1b left 8.5 GiB allocated per GPU, and
# zero3_tuned, run after zero3 in the same job, held 17 GiB and ran 15% under its own job's figure
# (results/h200-x2-onejob, held_after_teardown_gib). ZeRO-1/2, DDP and FSDP leave nothing behind.
ZERO3 = ("zero3", "zero3_offload")


def job_groups(training: Training, strategies: list[str]) -> list[list[str]]:
    """The jobs the strategies run in: one for all of them, with the first ZeRO-3 run last (nothing runs
    after it in its process), and each further ZeRO-3 run in a job of its own."""

    def stage3(name: str) -> bool:
        run = training.deepspeed.get(name)
        return (run.base if run is not None else name) in ZERO3

    others, zero3 = [s for s in strategies if not stage3(s)], [s for s in strategies if stage3(s)]
    first = others + zero3[:1]
    return ([first] if first else []) + [[s] for s in zero3[1:]]


def run_jobs(groups: list[list[str]], launch: Launch) -> dict[str, dict[str, Any]]:
    """Every strategy's result (its figures, or ``{"error": ...}``), one job per group of strategies and
    as few more as the failures need.

    A job that dies is blamed on the first strategy it had not finished (the one it was in); the strategies
    after that one run in the next job. At most one job per strategy, whatever fails.
    """
    results: dict[str, dict[str, Any]] = {}
    attempt = 0
    for group in groups:
        pending = list(group)
        while pending:
            key = job_key(attempt)
            done, died = launch(pending, key)
            results.update({s: done[s] for s in pending if s in done})
            rest = [s for s in pending if s not in done]
            if died is None and rest:
                died = f"the training job ended without a result for {', '.join(rest)}"
            if rest:
                results[rest[0]] = {"error": died, "strategy": rest[0], "job": key}
            pending, attempt = rest[1:], attempt + 1
    return results


@dataclass(frozen=True)
class Baseline:
    ranks_per_node: int
    nodes: int
    label: str

    @property
    def world_size(self) -> int:
        return self.ranks_per_node * self.nodes


def baseline(training: Training, ranks_per_node: int, nodes: int) -> Baseline | str:
    """The smaller world the scaling efficiency is measured against, or why there is none."""
    if training.scaling_baseline == "none":
        return "the profile sets training.scaling_baseline: none"
    if training.scaling_baseline == "one_gpu":
        base = Baseline(1, 1, "one GPU (one rank)")
    else:
        base = Baseline(ranks_per_node, 1, f"one node ({ranks_per_node} ranks)")
    if base.world_size >= ranks_per_node * nodes:
        return f"the full world ({nodes} node(s) x {ranks_per_node}) is no larger than the baseline, {base.label}"
    return base


def scaling_efficiency(full: dict[str, Any], base: dict[str, Any]) -> float:
    """Per-GPU throughput at the full world over per-GPU throughput on the baseline (weak scaling)."""
    return float(full["tokens_per_s_per_gpu"]) / float(base["tokens_per_s_per_gpu"])


def canary(reference: list[float], other: list[float], steps: int, rtol: float) -> dict[str, Any]:
    """Compare two per-step loss curves over their first ``steps`` steps: the largest relative difference."""
    if len(reference) < steps or len(other) < steps:
        raise ValueError(f"the canary compares {steps} steps; the curves have {len(reference)} and {len(other)}")
    diffs = [abs(b - a) / abs(a) if a else abs(b - a) for a, b in zip(reference[:steps], other[:steps], strict=True)]
    worst = max(range(steps), key=diffs.__getitem__)
    return {
        "max_rel_diff": diffs[worst],
        "worst_step": worst,
        "within": diffs[worst] <= rtol,
        "rtol": rtol,
        "rel_diff": diffs,
    }


def curves_text(reference_name: str, reference: list[float], name: str, other: list[float], steps: int) -> str:
    rows = [f"step {i}: {reference_name} {reference[i]:.6f}  {name} {other[i]:.6f}" for i in range(steps)]
    return "\n".join(rows)


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
        "tokens_per_s_per_gpu_spread": (rates[-1] - rates[0]) / median,  # (max - min) / median
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
        "per_rank": [{k: r[k] for k in ("rank", "host", "loop_s", "mem_gib", "util")} for r in ranks],
    }
