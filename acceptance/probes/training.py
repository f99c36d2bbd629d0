"""A short real training run of one strategy: tokens/s per GPU, step times, memory, MFU, utilisation, loss curve.

Named after the profile section it reads (``training:``), like every probe. ``warmup_steps`` untimed steps
(compilation, allocator and NCCL warm-up), then ``steps`` timed ones. On GPUs each step is timed by CUDA
events on the stream, so the host never waits inside the timed loop; the rate over the loop is taken
between two synchronisations. The cluster's figure is the slowest rank's: a job runs at its pace.

The data are synthetic but learnable, so the loss must fall: each sequence counts up from a random start
with a random stride through a small part of the vocabulary, with 10% of the tokens replaced by noise.
"""

from __future__ import annotations

import itertools
import resource
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from acceptance.probes.gpu_sampler import UtilSampler
from acceptance.probes.rank import Ctx, main
from acceptance.probes.train_model import build_model, describe
from acceptance.probes.train_strategies import Runner, global_mean, make_runner

DATA_VOCAB = 1024  # the synthetic text's alphabet: small enough that a few steps visibly learn it
NOISE = 0.1
GIB = 1 << 30


def synthetic_batches(t: dict[str, Any], vocab: int, ctx: Ctx, count: int) -> list[list[torch.Tensor]]:
    """``count`` steps of ``grad_accum`` micro-batches; rank-dependent, identical for every strategy."""
    gen = torch.Generator(device=ctx.device)
    gen.manual_seed(int(t["seed"]) * 1000 + ctx.rank)
    alphabet, shape = min(vocab, DATA_VOCAB), (count * t["grad_accum"], t["micro_batch"], t["seq_len"])

    def draw(high: int, size: tuple[int, ...], low: int = 0) -> torch.Tensor:
        return torch.randint(low, high, size, generator=gen, device=ctx.device)

    start, stride = draw(alphabet, (*shape[:2], 1)), draw(8, (*shape[:2], 1), low=1)
    tokens = (start + stride * torch.arange(t["seq_len"], device=ctx.device)) % alphabet
    noise = torch.rand(shape, generator=gen, device=ctx.device) < NOISE
    tokens = torch.where(noise, draw(alphabet, shape), tokens)
    micro = list(tokens.unbind(0))
    return [micro[i * t["grad_accum"] : (i + 1) * t["grad_accum"]] for i in range(count)]


def timed_steps(runner: Runner, batches: list[list[torch.Tensor]], ctx: Ctx) -> tuple[list[Any], list[float], float]:
    """(losses, per-step seconds, seconds for the whole loop)."""
    losses: list[Any] = []
    ctx.sync()
    ctx.progress()
    dist.barrier()
    if ctx.is_cuda:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(batches) + 1)]
        start = time.perf_counter()
        events[0].record()
        for i, micro in enumerate(batches):
            ctx.progress()
            losses.append(runner.step(micro))
            events[i + 1].record()
        ctx.sync()
        total = time.perf_counter() - start
        return losses, [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(events)], total
    stamps = [time.perf_counter()]
    for micro in batches:
        ctx.progress()
        losses.append(runner.step(micro))
        stamps.append(time.perf_counter())
    return losses, [b - a for a, b in itertools.pairwise(stamps)], stamps[-1] - stamps[0]


def peak_mem(ctx: Ctx) -> tuple[float, str]:
    if ctx.is_cuda:
        return torch.cuda.max_memory_allocated(ctx.device) / GIB, "torch.cuda.max_memory_allocated"
    # the process's peak resident set (KiB on Linux): model, optimizer and the runtime itself
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, "peak RSS (getrusage ru_maxrss)"


def _setup(ctx: Ctx) -> None:
    torch.set_float32_matmul_precision("high")  # fp32 matrix products on tensor cores (TF32), as training code does
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)


def measure(ctx: Ctx) -> dict[str, Any]:
    t, name = ctx.spec["training"], ctx.spec["strategy"]
    _setup(ctx)
    ctx.phase("build model")
    model = build_model(t["model"], t["seq_len"], ctx.device, int(t["seed"]))
    shape = describe(model, t["seq_len"])
    batches = synthetic_batches(t, shape["vocab_size"], ctx, t["warmup_steps"] + t["steps"])
    ctx.phase(f"wrap {name}")
    runner = make_runner(name, model, t, ctx, ctx.spec.get("deepspeed_user"))
    ctx.phase("warm-up steps")
    warm = []
    for micro in batches[: t["warmup_steps"]]:
        ctx.progress()
        warm.append(runner.step(micro))
    ctx.phase("timed steps")
    sampler = UtilSampler(ctx.device)
    sampler.start()
    losses, step_s, loop_s = timed_steps(runner, batches[t["warmup_steps"] :], ctx)
    util = sampler.stop()
    ctx.phase("gather figures")
    mem, mem_source = peak_mem(ctx)
    mine = {"rank": ctx.rank, "host": ctx.host, "step_s": step_s, "loop_s": loop_s, "mem_gib": mem, "util": util}
    return {
        "ranks": ctx.gather(mine),
        "losses": global_mean(warm + losses, ctx),
        "shape": shape,
        "info": runner.info,
        "mem_source": mem_source,
    }


def _quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank quantile of an ascending list."""
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(raw: dict[str, Any], t: dict[str, Any], world_size: int) -> dict[str, Any]:
    """The cluster's figures from every rank's measurements (the slowest rank's pace, the largest memory)."""
    ranks, shape = raw["ranks"], raw["shape"]
    tokens_per_step = t["micro_batch"] * t["grad_accum"] * t["seq_len"]
    loop_s = max(r["loop_s"] for r in ranks)
    step_s = [max(r["step_s"][i] for r in ranks) for i in range(len(ranks[0]["step_s"]))]
    per_step = sorted(tokens_per_step / s for s in step_s)
    rate = tokens_per_step * len(step_s) / loop_s
    utils = [r["util"]["mean_pct"] for r in ranks]
    peak = t.get("peak_tflops")
    losses = raw["losses"]
    return {
        "tokens_per_step_per_gpu": tokens_per_step,
        "tokens_per_s_per_gpu": rate,
        "tokens_per_s_per_gpu_median": statistics.median(per_step),
        "tokens_per_s_per_gpu_p10": _quantile(per_step, 0.1),
        "tokens_per_s_per_gpu_p90": _quantile(per_step, 0.9),
        "step_time_s": statistics.median(step_s),
        "step_time_std_s": statistics.pstdev(step_s),
        "step_times_s": step_s,
        "timed_loop_s": loop_s,
        "peak_mem_gib": max(r["mem_gib"] for r in ranks),
        "peak_mem_per_rank_gib": [r["mem_gib"] for r in ranks],
        "peak_mem_source": raw["mem_source"],
        "flops_per_token": shape["flops_per_token"],
        "mfu": rate * shape["flops_per_token"] / (peak * 1e12) if peak else None,
        "mfu_reason": None if peak else "the profile sets no training.peak_tflops",
        "peak_tflops": peak,
        "peak_tflops_source": t.get("peak_tflops_source"),
        "gpu_util_pct": min(utils) if None not in utils else None,
        "gpu_util_per_rank_pct": utils,
        "gpu_util_reason": next((r["util"]["reason"] for r in ranks if r["util"]["reason"]), None),
        "losses": losses,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "loss_ratio": losses[-1] / losses[0] if losses[0] else float("nan"),
        "world_size": world_size,
        "per_rank": [{k: r[k] for k in ("rank", "host", "loop_s", "mem_gib", "util")} for r in ranks],
    }


def run(ctx: Ctx) -> dict[str, Any]:
    raw = measure(ctx)
    t = ctx.spec["training"]
    out = figures(raw, t, ctx.world_size)
    out.update(
        strategy=ctx.spec["strategy"],
        model=t["model"],
        model_shape=raw["shape"],
        precision=t["precision"],
        device_name=torch.cuda.get_device_name(ctx.device) if ctx.is_cuda else "cpu",
        torch_version=torch.__version__,
        setup={k: t[k] for k in ("seq_len", "micro_batch", "grad_accum", "warmup_steps", "steps", "lr", "seed")},
        **raw["info"],
    )
    return out


if __name__ == "__main__":
    main(run)
