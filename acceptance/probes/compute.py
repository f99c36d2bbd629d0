"""Per-GPU speed, every GPU at once: matmul TFLOP/s, device copy and host-link bandwidth, a burn-in.

Every rank measures its own GPU while all the others measure theirs (a barrier starts each timed loop
together), so a GPU that falls behind under the node's real power and thermal load shows up. A timed
loop runs after warm-up and is bounded by CUDA events on GPUs, by the host clock on the CPU, where the
same code measures an fp32 matmul and a memory copy (host links do not apply there).

Bandwidths are decimal (GB/s = 1e9 bytes/s); a device copy counts the bytes read plus the bytes written,
as the reference figures do. Inputs are random, not zeros: a matmul on zeros draws less power and
reads faster than real work.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from acceptance.families import compute as pergpu
from acceptance.probes.rank import TORCH_DTYPES, Ctx, main
from acceptance.profile.sizes import parse_size

WARMUP_S = 1.0
BURNIN_BATCH = 10  # matmuls between two checks of the clock: long enough to keep the GPU fed
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper have fp8 tensor cores (CUDA C Programming Guide, compute capabilities)
Measure = Callable[[Ctx, dict[str, Any]], "float | str"]


def identity(ctx: Ctx) -> dict[str, Any]:
    row: dict[str, Any] = {"host": ctx.host, "node_rank": ctx.node_rank, "rank": ctx.rank, "gpu": None, "uuid": None}
    if ctx.is_cuda:
        props = torch.cuda.get_device_properties(ctx.device)
        row.update(gpu=ctx.device.index, uuid=f"GPU-{props.uuid}", name=props.name)
    return row


def seconds_per_call(ctx: Ctx, fn: Callable[[], object], warmup: int, iters: int) -> float:
    """Mean seconds per call of ``fn`` over ``iters`` back-to-back calls after ``warmup`` calls.

    On a GPU the warm-up also lasts at least WARMUP_S: an idle GPU's clocks take a while to ramp, and a
    timed loop that starts before they have would measure the ramp rather than the GPU.
    """
    start_warm = time.perf_counter()
    while True:
        for _ in range(max(1, warmup)):
            fn()
        ctx.sync()
        ctx.progress()
        if not ctx.is_cuda or time.perf_counter() - start_warm >= WARMUP_S:
            break
    if ctx.is_cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _random(shape: tuple[int, int], dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device, dtype=dtype)


def matmul(ctx: Ctx, cfg: dict[str, Any]) -> float:
    """TFLOP/s of an n x n x n matmul in the profile's dtype (2 n^3 floating-point operations per call)."""
    n, dtype = cfg["matmul_size"], TORCH_DTYPES[cfg["matmul_dtype"]]
    a, b = _random((n, n), dtype, ctx.device, cfg["seed"]), _random((n, n), dtype, ctx.device, cfg["seed"] + 1)
    out = torch.empty((n, n), dtype=dtype, device=ctx.device)
    dist.barrier()
    seconds = seconds_per_call(ctx, lambda: torch.mm(a, b, out=out), cfg["warmup_iters"], cfg["matmul_iters"])
    return 2 * n**3 / seconds / 1e12


def fp8_matmul(ctx: Ctx, cfg: dict[str, Any]) -> float | str:
    """TFLOP/s of an e4m3 matmul with bf16 output (torch._scaled_mm), or why it was not measured."""
    reason = _fp8_unavailable(ctx, cfg)
    dist.barrier()  # every rank passes the same number of barriers, measured or not
    if reason:
        return reason
    n, fp8 = cfg["matmul_size"], torch.float8_e4m3fn
    a = _random((n, n), torch.bfloat16, ctx.device, cfg["seed"]).to(fp8)
    # cuBLASLt takes the second operand column-major: the transpose of a row-major tensor is that
    b = _random((n, n), torch.bfloat16, ctx.device, cfg["seed"] + 1).to(fp8).t()
    scale = torch.ones((), dtype=torch.float32, device=ctx.device)
    try:
        seconds = seconds_per_call(
            ctx,
            lambda: torch._scaled_mm(a, b, scale, scale, out_dtype=torch.bfloat16),
            cfg["warmup_iters"],
            cfg["matmul_iters"],
        )
    except RuntimeError as exc:
        return f"fp8 matmul: torch._scaled_mm failed: {str(exc).splitlines()[0]}"
    return 2 * n**3 / seconds / 1e12


def _fp8_unavailable(ctx: Ctx, cfg: dict[str, Any]) -> str | None:
    if not cfg["fp8"]:
        return "fp8 matmul: off in the profile (compute.fp8: false)"
    if not ctx.is_cuda:
        return "fp8 matmul: not applicable on the CPU"
    capability = torch.cuda.get_device_capability(ctx.device)
    if capability < FP8_MIN_CAPABILITY:
        return f"fp8 matmul: compute capability {capability[0]}.{capability[1]} has no fp8 tensor cores (needs 8.9)"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"fp8 matmul: torch {torch.__version__} has no torch._scaled_mm"
    return None


def device_copy(ctx: Ctx, cfg: dict[str, Any]) -> float:
    """GB/s of a copy within the GPU's memory (or the host's), counting bytes read plus bytes written."""
    nbytes = parse_size(cfg["copy_size"])
    src = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device).random_(0, 256)
    dst = torch.empty_like(src)
    dist.barrier()
    seconds = seconds_per_call(ctx, lambda: dst.copy_(src), cfg["warmup_iters"], cfg["copy_iters"])
    return 2 * nbytes / seconds / 1e9


def host_links(ctx: Ctx, cfg: dict[str, Any]) -> dict[str, float | str]:
    """Pinned host-to-device and device-to-host GB/s, each direction alone on the link."""
    if not ctx.is_cuda:
        reason = "host links: not applicable on the CPU (no device memory to copy to)"
        return {"h2d_gbps": reason, "d2h_gbps": reason}
    nbytes = parse_size(cfg["host_copy_size"])
    # DMA speed does not depend on the bytes; filling a large host buffer would only cost start-up time
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device).random_(0, 256)
    calls: dict[str, Callable[[], object]] = {
        "h2d_gbps": lambda: dev.copy_(host, non_blocking=True),
        "d2h_gbps": lambda: host.copy_(dev, non_blocking=True),
    }
    # one_at_a_time: the node's GPUs take turns (all nodes in step), so no two links share the root complex
    turns: list[int | None] = [None] if cfg["host_links"] == "together" else list(range(ctx.local_world_size))
    out: dict[str, float | str] = {}
    for turn in turns:
        for figure, call in calls.items():
            ctx.progress()
            dist.barrier()
            if turn is None or turn == ctx.local_rank:
                seconds = seconds_per_call(ctx, call, cfg["warmup_iters"], cfg["host_copy_iters"])
                out[figure] = nbytes / seconds / 1e9
    return out


def burnin(ctx: Ctx, cfg: dict[str, Any]) -> dict[str, Any]:
    """Keep the GPU busy for ``duration_s`` on one matmul whose inputs every rank draws from the same seed.

    Every result must equal this GPU's first one (checked on the device, no copy per call), and the first
    one's digest must equal the other GPUs': a GPU that computes a different answer is corrupting data.
    """
    n, dtype = cfg["matmul_size"], TORCH_DTYPES[cfg["matmul_dtype"]]
    a, b = _random((n, n), dtype, ctx.device, cfg["seed"]), _random((n, n), dtype, ctx.device, cfg["seed"] + 1)
    ref = torch.mm(a, b)
    digest = hashlib.sha256(ref.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()
    out = torch.empty_like(ref)
    bad = torch.zeros((), dtype=torch.int64, device=ctx.device)
    ctx.progress()
    dist.barrier()
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < cfg["duration_s"]:
        for _ in range(BURNIN_BATCH):
            torch.mm(a, b, out=out)
            bad += (out != ref).any()
        ctx.sync()
        ctx.progress()
        calls += BURNIN_BATCH
    elapsed = time.perf_counter() - t0
    return {
        "digest": digest,
        "calls": calls,
        "calls_differing": int(bad.item()),
        "seconds": round(elapsed, 3),
        "tflops": 2 * n**3 * calls / elapsed / 1e12,
    }


MEASURES: dict[str, Measure] = {"matmul_tflops": matmul, "matmul_fp8_tflops": fp8_matmul, "copy_gbps": device_copy}


def run(ctx: Ctx) -> dict[str, Any]:
    cfg = ctx.spec["compute"]
    row, skipped = identity(ctx), {}
    for figure, measure in MEASURES.items():
        ctx.phase(figure)
        row[figure] = measure(ctx, cfg)
    ctx.phase("host links")
    row.update(host_links(ctx, cfg))
    for figure in pergpu.FIGURES:
        if isinstance(row.get(figure), str):
            skipped[figure] = row.pop(figure)
    row["not_measured"] = skipped
    if cfg["duration_s"] > 0:
        ctx.phase("burn-in")
        row["burnin"] = burnin(ctx, cfg)
    ctx.phase("gather")
    rows = ctx.gather(row)
    return {
        "rows": rows,
        "summary": {f: pergpu.summary(rows, f) for f in pergpu.FIGURES},
        "not_measured": {f: pergpu.not_measured(rows, f) for f in pergpu.FIGURES},
        "burnin": pergpu.burnin_verdict(rows) if cfg["duration_s"] > 0 else None,
        "config": cfg,
        "software": {"torch": torch.__version__, "cuda": torch.version.cuda},
    }


if __name__ == "__main__":
    main(run)
