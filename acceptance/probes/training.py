"""Short real training runs, every strategy of the run in this one job: tokens/s per GPU, memory, MFU, loss.

Named after the profile section it reads (``training:``), like every probe. Per strategy: a fresh model from
the seed, ``warmup_steps`` untimed steps (compilation, allocator and communicator warm-up), then ``steps``
timed ones. On GPUs each step is timed by CUDA events on the stream, so the host never waits inside the timed
loop. The cluster's figure is the slowest rank's: a job runs at its pace.

Between strategies the probe tears the last one down (its objects, DeepSpeed's hooks and process groups,
compiled graphs, cached GPU memory) and every rank agrees on how it ended, through the job's store (not a
collective, which a stuck rank would never join): a strategy that raised on every rank is recorded with its
error and the next one runs. A rank that raised
while another is still inside the strategy (stuck in a collective that will never complete) re-raises after
AGREE_WAIT_S, which ends the job; the launcher names the rank and the phase, ``<strategy>: <what>``. After
each strategy local rank 0 writes ``partial.json``, so a job that dies keeps what it finished.

The data are synthetic but learnable, so the loss must fall: each sequence counts up from a random start
with a random stride through a small part of the vocabulary, with 10% of the tokens replaced by noise.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import itertools
import json
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, TCPStore  # typed here; torch.distributed re-exports them

from acceptance.families.training import BASELINE_PART, StrategyResult, TrainingResult
from acceptance.families.training.figures import RankRun, RawRun, TrainingConfig, figures
from acceptance.json_types import JSONObject
from acceptance.probes.gpu_sampler import GpuSampler
from acceptance.probes.host_load import HostLoad
from acceptance.probes.rank import Ctx, main, section, write_json
from acceptance.probes.train_baseline import run_baseline
from acceptance.probes.train_ds import STAGE
from acceptance.probes.train_model import (
    FSDP_STATE_BYTES,
    ZERO_STATE_BYTES,
    build_config,
    build_model,
    describe,
    layers_that_fit,
)
from acceptance.probes.train_strategies import Runner, global_mean, make_runner, preload, share_compile_threads
from acceptance.probes.train_trace import traced_steps

DATA_VOCAB = 1024  # the synthetic text's alphabet: small enough that a few steps visibly learn it
NOISE = 0.1
GIB = 1 << 30
# how long a rank that raised waits for the others to finish the strategy too; longer than ranks of one
# job drift apart at the same line of code, far shorter than a probe timeout
AGREE_WAIT_S = 30.0
PEAK_RSS_RESET = Path("/proc/self/clear_refs")  # writing "5" resets VmHWM (Linux >= 4.0, proc(5))


def synthetic_batches(t: TrainingConfig, vocab: int, ctx: Ctx, count: int) -> list[list[torch.Tensor]]:
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
    dist.barrier(group=ctx.within)
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


def reset_peak_mem(ctx: Ctx) -> bool:
    """Start this strategy's peak-memory count; False where the host's peak RSS cannot be reset."""
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
        return True
    try:
        PEAK_RSS_RESET.write_text("5")
    except OSError:
        return False
    return True


def peak_mem(ctx: Ctx, was_reset: bool) -> tuple[float, str]:
    if ctx.is_cuda:
        return torch.cuda.max_memory_allocated(ctx.device) / GIB, "torch.cuda.max_memory_allocated"
    if was_reset:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):  # kB
                return int(line.split()[1]) * 1024 / GIB, "peak RSS during this strategy (VmHWM)"
    # the process's peak resident set since it started (KiB on Linux), earlier strategies included
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, "peak RSS of the job (ru_maxrss)"


def measure(ctx: Ctx, name: str, part: str) -> RawRun:
    """One strategy from a fresh model to every rank's measurements; its runner is closed however it ends.
    ``part``: what the heartbeat's phases call it (the strategy, or the scaling baseline)."""
    t = section(ctx.spec, "training", TrainingConfig)
    mem_reset, held_at_start = reset_peak_mem(ctx), held_mem_gib(ctx)  # the peak counts what is held already
    ctx.phase(f"{part}: build model")
    whole = build_config(t["model"], t["seq_len"])
    zero = name in STAGE or name in t["deepspeed"]  # DeepSpeed's, built in or named under deepspeed:
    layers = layer_count(t, whole, ctx, ZERO_STATE_BYTES if zero else FSDP_STATE_BYTES)
    model = build_model(t["model"], t["seq_len"], ctx.device, int(t["seed"]), layers)
    shape = describe(model, t["seq_len"])
    if layers is not None:
        shape["layers_of"] = int(whole.num_hidden_layers)
    batches = synthetic_batches(t, shape["vocab_size"], ctx, t["warmup_steps"] + t["steps"])
    ctx.phase(f"{part}: wrap")
    with unwinding_on_term():
        runner = make_runner(name, model, t, ctx, ctx.spec["deepspeed_user"].get(name))
    try:
        ctx.phase(f"{part}: warm-up steps")
        warm = []
        for micro in batches[: t["warmup_steps"]]:
            ctx.progress()
            warm.append(runner.step(micro))
        before = runner.counters()
        ctx.phase(f"{part}: timed steps")
        sampler, host = GpuSampler(ctx.device), HostLoad()
        sampler.start()
        host.start()
        losses, step_s, loop_s = timed_steps(runner, batches[t["warmup_steps"] :], ctx)
        util, host_load = sampler.stop(), host.stop()
        traced = traced_steps(runner, batches, ctx, part, t["trace_steps"]) if t.get("trace_steps") else None
        ctx.phase(f"{part}: gather figures")
        mem, mem_source = peak_mem(ctx, mem_reset)
        counters: JSONObject = {"before_timed_steps": before, "after": runner.counters()} if before else {}
        mine: RankRun = {
            "rank": ctx.rank,
            "host": ctx.host,
            "step_s": step_s,
            "loop_s": loop_s,
            "mem_gib": mem,
            "util": util,
            "host_load": host_load,
            "trace": traced,
            "held_at_start_gib": held_at_start,
        }
        return {
            "ranks": ctx.gather(mine),
            "losses": global_mean(warm + losses, ctx),
            "shape": shape,
            "info": {**runner.info, **({"loss_scaling": counters} if counters else {})},
            "mem_source": mem_source,
        }
    finally:
        runner.close()


def layer_count(t: TrainingConfig, whole: Any, ctx: Ctx, state_bytes: int) -> int | None:
    """The decoder layers to build of ``whole`` (the shape's config): the section's count, or with "fit" as
    many as the smallest GPU of the run holds with ``state_bytes`` of training state per parameter (every
    rank builds the same model); None: all of them. On the CPU "fit" builds them all: the host's memory is
    the tiny shapes' least concern."""
    wanted = t.get("layers")
    if wanted is None or (wanted == "fit" and not ctx.is_cuda):
        return None
    if wanted != "fit":
        return min(int(wanted), int(whole.num_hidden_layers))
    memory = torch.tensor([torch.cuda.get_device_properties(ctx.device).total_memory], device=ctx.device)
    dist.all_reduce(memory, op=dist.ReduceOp.MIN, group=ctx.within)
    tokens = int(t["micro_batch"]) * int(t["seq_len"])
    return layers_that_fit(whole, ctx.world_size, int(memory.item()), tokens, state_bytes)


def release(ctx: Ctx) -> None:
    """What a strategy leaves in the process beyond its objects: compiled graphs and cached GPU memory."""
    gc.collect()  # DeepSpeed's engine and optimizer hold reference cycles
    torch._dynamo.reset()  # another model's graphs: a fresh process would compile its own, and so do we
    if ctx.is_cuda:
        torch.cuda.empty_cache()


def held_mem_gib(ctx: Ctx) -> float:
    """What this rank still holds after a strategy's teardown: GPU memory allocated through torch, or the
    process's resident set on the CPU; a figure that grows from strategy to strategy is a leak."""
    if ctx.is_cuda:
        return torch.cuda.memory_allocated(ctx.device) / GIB
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):  # kB
            return int(line.split()[1]) * 1024 / GIB
    return float("nan")


def agree(ctx: Ctx, store: Any, name: str, failure: BaseException | None) -> list[tuple[str | None, float]]:
    """Every rank's error for the strategy just run (None where it finished) and the memory it still holds,
    once all ranks are out of the strategy. Through the job's store, where each rank waits as long as it
    chooses: a rank that raised waits AGREE_WAIT_S, the others as long as the probe may take."""
    error = None if failure is None else f"{type(failure).__name__}: {failure}".strip()
    store.set(f"agree/{name}/{ctx.rank}", json.dumps([error, round(held_mem_gib(ctx), 3)]))
    keys = [f"agree/{name}/{rank}" for rank in range(ctx.world_size)]
    wait = AGREE_WAIT_S if failure is not None else float(ctx.spec.get("pg_timeout_s", 600))
    try:
        store.wait(keys, datetime.timedelta(seconds=wait))
    except RuntimeError:  # DistStoreError: a rank is still inside the strategy
        if failure is not None:  # stuck in a collective that will never complete: only ending the job frees it
            raise failure from None
        raise
    return [tuple(json.loads(store.get(key))) for key in keys]  # type: ignore[misc]


def job_store() -> Any:
    """A client of the store torchrun's agent keeps for this job (MASTER_ADDR:MASTER_PORT, where every rank
    met for init_process_group), under a prefix of our own."""
    env = os.environ
    client = TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False)
    return PrefixStore("acceptance-training", client)


def one_strategy(ctx: Ctx, name: str, store: Any, part: str = "", within: Ctx | None = None) -> StrategyResult:
    """Run ``name``, tear it down and agree with every rank on how it ended. ``part``: its name in the job
    (default: the strategy). ``within``: the smaller world this rank runs it in (a scaling baseline, where
    ranks outside it skip to the teardown and wait there)."""
    t = section(ctx.spec, "training", TrainingConfig)
    start, part, here = time.perf_counter(), part or name, within or ctx
    failure: BaseException | None = None
    out: StrategyResult = {}
    try:
        if part == name or within is not None:
            raw = measure(here, name, part)
            out = dict(figures(raw, t, here.world_size))
            out.update(model_shape=raw["shape"], **raw["info"])
    except Exception as exc:
        traceback.print_exception(exc)
        traceback.clear_frames(exc.__traceback__)  # the frames hold the model: let it go
        failure = exc
    ctx.phase(f"{part}: teardown")
    release(ctx)
    ended = agree(ctx, store, part, failure)
    dist.barrier()  # on the training group: nothing of this strategy is left in flight
    failed = [(rank, e) for rank, (e, _) in enumerate(ended) if e is not None]
    if failed:
        ranks = ", ".join(str(rank) for rank, _ in failed)
        out = {"error": f"{part} failed on rank(s) {ranks}: rank {failed[0][0]} raised {failed[0][1]}"}
    out["held_after_teardown_gib"] = [held for _, held in ended]
    return {**out, **common(here, name), "wall_s": round(time.perf_counter() - start, 3)}


def common(ctx: Ctx, name: str) -> StrategyResult:
    t = section(ctx.spec, "training", TrainingConfig)
    return {
        "strategy": name,
        "model": t["model"],
        "precision": t["precision"],
        "world_size": ctx.world_size,
        "device_name": torch.cuda.get_device_name(ctx.device) if ctx.is_cuda else "cpu",
        "torch_version": torch.__version__,
        "setup": {
            **{k: t[k] for k in ("seq_len", "micro_batch", "grad_accum", "warmup_steps", "steps", "lr", "seed")},
            # where FSDP2 reduces the gradients: each micro-batch's, or the last one's only (a public figure's way)
            "sync_every_micro_batch": bool(t.get("sync_every_micro_batch", False)),
        },
    }


def _exit_on_term(signum: int, frame: Any) -> None:
    sys.exit(128 + signum)


@contextlib.contextmanager
def unwinding_on_term() -> Iterator[None]:
    """While a strategy is set up (where DeepSpeed JIT-builds its ops), SIGTERM, the first signal of a timeout
    or an interrupt, unwinds the stack, so that a build in progress removes its lock file in its own
    ``finally``: the default action would leave the lock behind, and every later build of the op would wait
    on it forever. Only here: elsewhere a rank blocked inside a collective could not run the handler."""
    previous = signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(ctx: Ctx) -> TrainingResult:
    torch.set_float32_matmul_precision("high")  # fp32 matrix products on tensor cores (TF32), as training code does
    if section(ctx.spec, "training", TrainingConfig)["compile"] != "none":  # a staged job's preload did it too
        share_compile_threads(ctx.local_world_size)
    store = job_store()
    results: dict[str, StrategyResult] = {}
    for name in ctx.spec["strategies"]:
        if name == BASELINE_PART:
            results[name] = run_baseline(ctx, store, one_strategy)
        else:
            results[name] = one_strategy(ctx, name, store)
        if ctx.local_rank == 0:
            write_json(ctx.out / "partial.json", {"parts": results})
    return {"strategies": results}


if __name__ == "__main__":
    main(run, preload=preload)
