"""One optimizer step under each strategy: torch DDP, FSDP2 (``fully_shard``), DeepSpeed ZeRO-1/2/3.

Every strategy gets the same model, the same torch AdamW and the same micro-batches, so their loss curves
must agree (the numerics canary). Precision: DDP runs under autocast with fp32 weights; FSDP2 casts the
parameters per layer through its MixedPrecisionPolicy and reduces gradients in fp32; DeepSpeed keeps bf16 or
fp16 weights with fp32 master copies. fp16 scales the loss (GradScaler, ShardedGradScaler, DeepSpeed's own).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from acceptance.families.training import IN_JOB_BASELINE
from acceptance.families.training.figures import TrainingConfig
from acceptance.json_types import JSONObject
from acceptance.probes.rank import Ctx, ProbeSpec, section
from acceptance.probes.train_ds import STAGE, Shape, base_strategy, build
from acceptance.probes.train_model import SHAPES, decoder_layers

DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}
# GPT-3 / nanoGPT's AdamW settings (Brown et al. 2020, appendix B)
BETAS, WEIGHT_DECAY = (0.9, 0.95), 0.1
INDUCTOR_MAX_THREADS = 32  # TorchInductor's own cap on compile threads (torch/_inductor/config.py)


def _nothing() -> None:
    return None


def _no_counters() -> JSONObject:
    return {}


@dataclass
class Runner:
    """``step(micro_batches)`` runs forward, backward and one optimizer step; returns the mean loss (on device).
    ``close()`` undoes what the strategy set up beyond its own objects, so the next strategy of the same
    process starts as in a fresh one; ``counters()`` reads the strategy's own counters (DeepSpeed's skipped
    steps and loss scale)."""

    step: Callable[[list[torch.Tensor]], torch.Tensor]
    info: JSONObject = field(default_factory=dict)
    close: Callable[[], None] = _nothing
    counters: Callable[[], JSONObject] = _no_counters


def adamw(params: Iterator[nn.Parameter], lr: float, device: torch.device, offload: bool = False) -> Any:
    """Fused on the GPU (one kernel for all parameters); plain on the host. No DeepSpeed op is built."""
    fused = True if device.type == "cuda" and not offload else None
    return torch.optim.AdamW(params, lr=lr, betas=BETAS, weight_decay=WEIGHT_DECAY, fused=fused)


def compile_blocks(model: nn.Module) -> None:
    """Compile each decoder layer on its own: identical layers share one compiled graph, a short cold start."""
    layers = decoder_layers(model)
    for index, layer in enumerate(layers):
        layers[index] = torch.compile(layer)  # type: ignore[assignment]


def _torch_step(
    model: nn.Module,
    opt: Any,
    t: TrainingConfig,
    sync: Callable[[bool], contextlib.AbstractContextManager[Any]],
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    scaler: Any,
) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    params = [p for p in model.parameters() if p.requires_grad]
    clip = float(t["grad_clip"])

    def step(micro: list[torch.Tensor]) -> torch.Tensor:
        total = torch.zeros((), device=micro[0].device)
        for i, tokens in enumerate(micro):
            with sync(i == len(micro) - 1), autocast():
                loss = model(input_ids=tokens, labels=tokens).loss
            scaled = loss / len(micro)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
            total += loss.detach().float()
        if scaler is not None:
            scaler.unscale_(opt)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        return total / len(micro)

    return step


def ddp(model: nn.Module, t: TrainingConfig, ctx: Ctx) -> Runner:
    from torch.nn.parallel import DistributedDataParallel as DDP

    mode = t["compile"]
    if mode == "blocks":
        compile_blocks(model)
    device_ids = [ctx.device.index] if ctx.is_cuda else None
    wrapped = DDP(model, device_ids=device_ids, process_group=ctx.within, gradient_as_bucket_view=True)
    # DDP first, then compile: TorchDynamo's DDPOptimizer splits the graph at bucket boundaries
    forward: nn.Module = torch.compile(wrapped) if mode == "model" else wrapped  # type: ignore[assignment]
    dtype = DTYPE[t["precision"]]

    def autocast() -> contextlib.AbstractContextManager[Any]:
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(ctx.device.type, dtype=dtype)

    def sync(last: bool) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext() if last else wrapped.no_sync()

    scaler = torch.amp.GradScaler(ctx.device.type) if dtype is torch.float16 else None
    opt = adamw(model.parameters(), t["lr"], ctx.device)
    return Runner(_torch_step(forward, opt, t, sync, autocast, scaler), {"compile": mode, "autocast": str(dtype)})


def fsdp(model: nn.Module, t: TrainingConfig, ctx: Ctx) -> Runner:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    # whole-model compile would trace FSDP's hooks; compiled layers inside sharded units is torchtitan's way
    mode = "blocks" if t["compile"] != "none" else "none"
    if mode == "blocks":
        compile_blocks(model)
    dtype = DTYPE[t["precision"]]
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype else MixedPrecisionPolicy()
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)

    # Between micro-batches FSDP2 without its reduction keeps every gradient unsharded (the whole model's, in
    # the parameters' dtype, on each rank); reducing each micro-batch keeps them sharded, as torchtitan does,
    # at the price of one reduce-scatter a micro-batch
    every = bool(t.get("sync_every_micro_batch", False))

    def sync(last: bool) -> contextlib.AbstractContextManager[Any]:
        model.set_requires_gradient_sync(last or every)  # type: ignore[operator]
        return contextlib.nullcontext()

    scaler = ShardedGradScaler(ctx.device.type) if dtype is torch.float16 else None
    opt = adamw(model.parameters(), t["lr"], ctx.device)
    step = _torch_step(model, opt, t, sync, contextlib.nullcontext, scaler)
    return Runner(step, {"compile": mode, "mp_policy": {"param_dtype": str(dtype), "reduce_dtype": "torch.float32"}})


def model_shape(model: Any) -> Shape:
    """What DeepSpeed's built-in configs are sized from: the hidden size and the decoder layer's class, by
    the fully qualified name that DeepSpeed's ``leaf_module.classes`` matches."""
    layer = type(decoder_layers(model)[0])
    return int(model.config.hidden_size), f"{layer.__module__}.{layer.__qualname__}"


def deepspeed_runner(name: str, model: Any, t: TrainingConfig, ctx: Ctx, user: JSONObject | None) -> Runner:
    if not ctx.is_cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before the import: DeepSpeed picks its accelerator then
    import deepspeed

    base = base_strategy(name, t)
    zero: Any = (user or {}).get("zero_optimization", {})  # the user's JSON, unchecked until DeepSpeed reads it
    offload = bool(base == "zero3_offload" or zero.get("offload_optimizer"))
    config, resolved = build(name, t, user, ctx.world_size, model_shape(model), ctx.is_cuda)
    # ZeRO-3 gathers parameters in module hooks that a compiled graph would trace through: run it eagerly
    mode = "blocks" if t["compile"] != "none" and STAGE[base] < 3 else "none"
    if mode == "blocks":
        compile_blocks(model)
    opt = adamw(model.parameters(), t["lr"], ctx.device, offload=offload)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config, dist_init_required=False)

    def step(micro: list[torch.Tensor]) -> torch.Tensor:
        total = torch.zeros((), device=micro[0].device)
        for tokens in micro:
            loss = engine(input_ids=tokens, labels=tokens).loss
            engine.backward(loss)  # scales by 1/gradient_accumulation_steps itself
            engine.step()  # steps the optimizer at the accumulation boundary only
            total += loss.detach().float()
        return total / len(micro)

    info = {
        "compile": mode,
        "deepspeed_version": deepspeed.__version__,
        "deepspeed_config": config,
        "deepspeed_auto_resolved": resolved,
        "optimizer": type(engine.optimizer).__name__,
    }
    return Runner(step, info, close=lambda: close_deepspeed(engine), counters=lambda: loss_scaling(engine))


def loss_scaling(engine: Any) -> JSONObject:
    """fp16's dynamic loss scaling so far: optimizer steps skipped on an overflow, and the current scale."""
    scale = getattr(engine.optimizer, "loss_scale", None)
    return {"skipped_steps": int(engine.skipped_steps), "loss_scale": float(scale) if scale is not None else None}


def clear_method_caches(cls: type) -> int:
    """Clear every ``functools`` cache among ``cls``'s methods, also one under a plain wrapper (DeepSpeed's
    ``instrument_w_nvtx`` keeps it in a closure); how many were cleared."""
    cleared = 0
    for attr in vars(cls).values():
        for cached in [attr, *(_contents(c) for c in getattr(attr, "__closure__", None) or ())]:
            if callable(getattr(cached, "cache_clear", None)):
                cached.cache_clear()
                cleared += 1
    return cleared


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return None


def close_deepspeed(engine: Any) -> None:
    """Remove the engine's hooks and free its buffers (``DeepSpeedEngine.destroy``), then destroy the process
    groups DeepSpeed cached for itself: the next engine in this process creates its own, as a new job would."""
    import deepspeed.comm
    from deepspeed.runtime.zero import parameter_offload, partitioned_param_coordinator
    from deepspeed.utils import groups

    engine.destroy()
    # ZeRO-3 pushes the model on a module-level stack (DeepSpeedZeRoOffload.__init__, DeepSpeed 0.19) that
    # nothing pops; no forward is in flight between strategies, and a fresh process has it empty.
    getattr(parameter_offload, "FWD_MODULE_STACK", []).clear()
    # PartitionedParameterCoordinator.__params_to_release is an unbounded functools.lru_cache on a method
    # (DeepSpeed 0.19): its class-level cache keys hold the coordinator and every submodule, and through them
    # the engine, its optimizer and the model, for the life of the process. It only memoizes: cleared, the
    # engine can be freed (on 2x H200 each ZeRO-3 run had left 8.5 GiB allocated per GPU).
    clear_method_caches(partitioned_param_coordinator.PartitionedParameterCoordinator)
    # groups.py caches the data-parallel clone of the world (and, for some configs, ZeRO++'s intra-node
    # group) in module globals; destroy_process_group also drops DeepSpeed's references to them
    for name in ("_WORLD_GROUP", "_ZERO_PARAM_INTRA_PARALLEL_GROUP"):
        group = getattr(groups, name, None)
        if group is not None and group is not dist.group.WORLD:
            deepspeed.comm.destroy_process_group(group)


def make_runner(name: str, model: nn.Module, t: TrainingConfig, ctx: Ctx, user: JSONObject | None) -> Runner:
    if ctx.within is not None and name not in IN_JOB_BASELINE:  # the plan never asks for it
        raise ValueError(f"{name} runs on the whole world only, not on a smaller process group")
    if name == "ddp":
        return ddp(model, t, ctx)
    if name == "fsdp":
        return fsdp(model, t, ctx)
    if base_strategy(name, t) in STAGE:
        return deepspeed_runner(name, model, t, ctx, user)
    raise ValueError(f"unknown training strategy {name!r}")


def global_mean(values: list[torch.Tensor], ctx: Ctx) -> list[float]:
    """Per-step losses averaged over ranks: one all-reduce at the end, no host sync inside the timed steps."""
    stacked = torch.stack([v.float() for v in values])
    dist.all_reduce(stacked, group=ctx.within)
    return [float(x) for x in (stacked / ctx.world_size).tolist()]


def compile_threads(cores: int, local_ranks: int) -> int:
    """Each rank's share of the node's cores, for TorchInductor's compile workers: its default is every core
    (up to its cap) for one process, and every rank of the job compiles at the same time."""
    return max(1, min(INDUCTOR_MAX_THREADS, cores // max(1, local_ranks)))


def share_compile_threads(local_ranks: int) -> None:
    """This rank's share of the node's cores for TorchInductor's compile workers, unless
    TORCHINDUCTOR_COMPILE_THREADS says (before the workers start: a staged job's ``preload``, or the job's
    start)."""
    from torch._inductor import config

    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        config.compile_threads = compile_threads(len(os.sched_getaffinity(0)), local_ranks)


def start_compile_workers(local_ranks: int) -> Callable[[], None]:
    """Start TorchInductor's compile workers now, while the job waits, and return the wait for them to be up.

    Inductor starts them at the first compiled call otherwise: on 4x H200 DDP's first step took 10.7 s with
    them up beforehand and 13.9 s without, at 8 threads per rank (benchmarks/compile_start.sh,
    docs/measurements.md). TORCHINDUCTOR_COMPILE_THREADS, where set, decides the workers' number. Nothing
    starts without Triton (a CPU build compiles in the process), where the user turned the early start off
    (TORCH_WARM_POOL=0, Inductor's own switch), or where the workers would be forked from this process
    (TORCHINDUCTOR_WORKER_START other than subprocess: that prepares the fork here, CUDA included). The
    workers' parent, started by Inductor as a child of this rank, reads the GPUs' properties before it forks
    them: it initialises the CUDA driver, creating no context and taking no GPU memory."""
    from torch._inductor import config
    from torch.utils._triton import has_triton_package

    share_compile_threads(local_ranks)
    started_apart = getattr(config, "worker_start_method", "subprocess") == "subprocess"
    early = os.environ.get("TORCH_WARM_POOL", "1") == "1" and started_apart
    if not early or not has_triton_package():
        return _nothing
    from torch._inductor.async_compile import AsyncCompile, maybe_warm_pool

    maybe_warm_pool()
    return AsyncCompile.wait_pool_ready


def preload(spec: ProbeSpec) -> None:
    """What a staged training job imports while it waits for the node (``rank.wait_at_gate``): transformers'
    model classes, DeepSpeed where a strategy runs on it, TorchInductor and its compile workers where layers
    are compiled; seconds of start-up that a job started on a free node spends before its first step. The
    rank touches no GPU; the workers are waited for here, so none is still starting when the node's next
    probe measures. One that fails is left to the strategy that needs it, which fails alone with the same
    error."""
    t = section(spec, "training", TrainingConfig)
    family = SHAPES[t["model"]][0]
    workers_up: Callable[[], None] = _nothing
    compiles = t["compile"] != "none"
    if compiles:
        with contextlib.suppress(Exception):
            workers_up = start_compile_workers(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    wanted = ["transformers", f"transformers.models.{family}.modeling_{family}"]  # with torch's DTensor
    if any(s in (t.get("deepspeed") or {}) or s in STAGE for s in spec["strategies"]):
        wanted.append("deepspeed")
    if compiles:
        wanted.append("torch._inductor.compile_fx")
    for module in wanted:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with contextlib.suppress(Exception):
        workers_up()
