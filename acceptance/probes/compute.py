"""Per-GPU speed, every GPU at once: matmul TFLOP/s, device copy and host-link bandwidth, a burn-in.

Every rank measures its own GPU while all the others measure theirs (a barrier after every rank's warm-up
starts the timed loops together), so a GPU that falls behind under the node's real power and thermal load
shows up. A timed loop runs after warm-up and is bounded by CUDA events on GPUs, by the host clock on the
CPU, where the same code measures an fp32 matmul and a memory copy (host links do not apply there). While a
loop is timed, NVML's clock-event reasons are sampled: a sustained figure under the power cap says so.

Bandwidths are decimal (GB/s = 1e9 bytes/s); a device copy counts the bytes read plus the bytes written,
as the reference figures do. Inputs are random, not zeros: a matmul on zeros draws less power and
reads faster than real work.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from acceptance.families import compute
from acceptance.families.compute import Burnin, ClockEvents, ComputeConfig, ComputeResult, FigureName, GpuRow
from acceptance.probes import windows
from acceptance.probes.gpu_sampler import GpuSampler
from acceptance.probes.rank import TORCH_DTYPES, Ctx, let_staged_import, main, section
from acceptance.schema.sizes import parse_size

WARMUP_S = 1.0
BURNIN_BATCH = 10  # matmuls between two checks of the clock: long enough to keep the GPU fed
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper have fp8 tensor cores (CUDA C Programming Guide, compute capabilities)
CLOCK_SAMPLE_S = 0.01  # host copies are timed for ~0.2 s on an H200: enough samples to say "throughout"


@dataclass
class Timed:
    """Seconds per call in each timed window, and the clock-event reasons sampled while the loop ran
    (GpuSampler.stop()); None off the GPU, where there are no GPU clocks to hold back."""

    windows: list[float]
    clocks: ClockEvents | None

    def rate(self, work: float) -> Measured:
        """``work`` per second: the median window's, and each window's."""
        per_window = [work / seconds for seconds in self.windows]
        return statistics.median(per_window), self.clocks, per_window


# a figure, or why it was not measured; the clocks while it was timed (None when it was not); each timed
# window's figure (none when it was not measured)
Measured = tuple["float | str", "ClockEvents | None", list[float]]
Measure = Callable[[Ctx, ComputeConfig], Measured]


def identity(ctx: Ctx) -> GpuRow:
    """The row's identity; its figures are filled in by ``run``."""
    row: GpuRow = {
        "host": ctx.host,
        "node_rank": ctx.node_rank,
        "rank": ctx.rank,
        "gpu": None,
        "uuid": None,
        "not_measured": {},
        "clocks": {},
        "windows": {},
    }
    if ctx.is_cuda:
        props = torch.cuda.get_device_properties(ctx.device)
        row["gpu"], row["uuid"], row["name"] = ctx.device.index, f"GPU-{props.uuid}", props.name
    return row


def warm_up(ctx: Ctx, fn: Callable[[], object], warmup: int) -> float:
    """``warmup`` calls; on a GPU for at least WARMUP_S: an idle GPU's clocks take a while to ramp, and a timed
    loop that starts before they have would measure the ramp rather than the GPU. Returns the seconds per
    call of its last round, on the host's clock once the device has caught up: the pace of the timed loop."""
    start_warm = time.perf_counter()
    while True:
        begun, calls = time.perf_counter(), max(1, warmup)
        for _ in range(calls):
            fn()
        ctx.sync()
        per_call = (time.perf_counter() - begun) / calls
        ctx.progress()
        if not ctx.is_cuda or time.perf_counter() - start_warm >= WARMUP_S:
            return per_call


def seconds_per_call(
    ctx: Ctx, fn: Callable[[], object], warmup: int, iters: int, together: bool = True, min_s: float = 0.0
) -> Timed:
    """Seconds per call of ``fn`` in each timed window (``windows.split``) of ``iters`` back-to-back calls in
    all, after the warm-up; more calls where ``iters`` would take less than ``min_s`` at the warm-up's pace.

    ``together``: every rank is measuring, and a barrier after every rank's warm-up starts their timed loops
    at once (a warm-up lasts as long as its GPU needs, so a barrier before it would let the loops drift
    apart). A rank whose warm-up fails still meets the barrier, then raises.
    """
    failed: RuntimeError | None = None
    per_call = 0.0
    try:
        per_call = warm_up(ctx, fn, warmup)
    except RuntimeError as exc:
        failed = exc
    if together:
        ctx.progress()
        dist.barrier()
    if failed is not None:
        raise failed
    calls = max(iters, math.ceil(min_s / per_call)) if per_call > 0 else iters
    sampler = GpuSampler(ctx.device, period_s=CLOCK_SAMPLE_S)
    sampler.start()
    seconds = windows.timed_windows(ctx, fn, windows.split(calls))
    sampled = sampler.stop()
    clocks: ClockEvents | None = None
    if ctx.is_cuda:
        clocks = {"clock_events": sampled["clock_events"], "clock_events_reason": sampled["clock_events_reason"]}
        if "foreign" in sampled:
            clocks["foreign"] = sampled["foreign"]
        if "pcie_low" in sampled:
            clocks["pcie_low"] = sampled["pcie_low"]
        if "xids" in sampled:
            clocks["xids"] = sampled["xids"]
    return Timed(seconds, clocks)


def _random(shape: tuple[int, int], dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device, dtype=dtype)


def matmul(ctx: Ctx, cfg: ComputeConfig) -> Measured:
    """TFLOP/s of an n x n x n matmul in the profile's dtype (2 n^3 floating-point operations per call)."""
    n, dtype = cfg["matmul_size"], TORCH_DTYPES[cfg["matmul_dtype"]]
    a, b = _random((n, n), dtype, ctx.device, cfg["seed"]), _random((n, n), dtype, ctx.device, cfg["seed"] + 1)
    out = torch.empty((n, n), dtype=dtype, device=ctx.device)
    timed = seconds_per_call(
        ctx, lambda: torch.mm(a, b, out=out), cfg["warmup_iters"], cfg["matmul_iters"], min_s=cfg["matmul_min_s"]
    )
    return timed.rate(2 * n**3 / 1e12)


def fp8_matmul(ctx: Ctx, cfg: ComputeConfig) -> Measured:
    """TFLOP/s of an e4m3 matmul with bf16 output (torch._scaled_mm), or why it was not measured."""
    reason = fp8_unavailable(ctx, cfg["fp8"], "fp8 matmul", "compute.fp8")
    if reason:
        dist.barrier()  # every rank passes the same number of barriers, measured or not
        return reason, None, []
    n, fp8 = cfg["matmul_size"], torch.float8_e4m3fn
    a = _random((n, n), torch.bfloat16, ctx.device, cfg["seed"]).to(fp8)
    # cuBLASLt takes the second operand column-major: the transpose of a row-major tensor is that
    b = _random((n, n), torch.bfloat16, ctx.device, cfg["seed"] + 1).to(fp8).t()
    scale = torch.ones((), dtype=torch.float32, device=ctx.device)
    try:
        timed = seconds_per_call(
            ctx,
            lambda: torch._scaled_mm(a, b, scale, scale, out_dtype=torch.bfloat16),
            cfg["warmup_iters"],
            cfg["matmul_iters"],
            min_s=cfg["matmul_min_s"],
        )
    except RuntimeError as exc:
        return f"fp8 matmul: torch._scaled_mm failed: {str(exc).splitlines()[0]}", None, []
    return timed.rate(2 * n**3 / 1e12)


def fp8_unavailable(ctx: Ctx, enabled: bool, what: str, setting: str) -> str | None:
    """Why ``what`` (an fp8 GEMM) cannot run on this rank, or None: off by the profile's ``setting``, a CPU,
    a GPU without fp8 tensor cores, or a torch without ``_scaled_mm``."""
    if not enabled:
        return f"{what}: off in the profile ({setting}: false)"
    if not ctx.is_cuda:
        return f"{what}: not applicable on the CPU"
    capability = torch.cuda.get_device_capability(ctx.device)
    if capability < FP8_MIN_CAPABILITY:
        return f"{what}: compute capability {capability[0]}.{capability[1]} has no fp8 tensor cores (needs 8.9)"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"{what}: torch {torch.__version__} has no torch._scaled_mm"
    return None


def device_copy(ctx: Ctx, cfg: ComputeConfig) -> Measured:
    """GB/s of a copy within the GPU's memory (or the host's), counting bytes read plus bytes written."""
    nbytes = parse_size(cfg["copy_size"])
    src = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device).random_(0, 256)
    dst = torch.empty_like(src)
    timed = seconds_per_call(ctx, lambda: dst.copy_(src), cfg["warmup_iters"], cfg["copy_iters"])
    return timed.rate(2 * nbytes / 1e9)


def host_links(ctx: Ctx, cfg: ComputeConfig, wanted: set[str]) -> dict[FigureName, Measured]:
    """Pinned host-to-device and device-to-host GB/s (those of ``wanted``), each direction alone on the link."""
    if not ctx.is_cuda:
        reason = "host links: not applicable on the CPU (no device memory to copy to)"
        return {figure: (reason, None, []) for figure in HOST_LINKS if figure in wanted}
    nbytes = parse_size(cfg["host_copy_size"])
    # DMA speed does not depend on the bytes; filling a large host buffer would only cost start-up time
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device).random_(0, 256)
    calls: dict[FigureName, Callable[[], object]] = {
        "h2d_gbps": lambda: dev.copy_(host, non_blocking=True),
        "d2h_gbps": lambda: host.copy_(dev, non_blocking=True),
    }
    calls = {figure: call for figure, call in calls.items() if figure in wanted}
    # together: every GPU of the node copies at once, timed from the barrier after every warm-up;
    # one_at_a_time: the node's GPUs take turns (all nodes in step), so no two links share the root complex
    together = cfg["host_links"] == "together"
    turns: list[int | None] = [None] if together else list(range(ctx.local_world_size))
    out: dict[FigureName, Measured] = {}
    for turn in turns:
        for figure, call in calls.items():
            ctx.progress()
            if not together:
                dist.barrier()  # the previous GPU's turn is over
            if turn is None or turn == ctx.local_rank:
                timed = seconds_per_call(ctx, call, cfg["warmup_iters"], cfg["host_copy_iters"], together)
                out[figure] = timed.rate(nbytes / 1e9)
    return out


def burnin(ctx: Ctx, cfg: ComputeConfig) -> Burnin:
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


MEASURES: dict[FigureName, Measure] = {
    "matmul_tflops": matmul,
    "matmul_fp8_tflops": fp8_matmul,
    "copy_gbps": device_copy,
}
HOST_LINKS: tuple[FigureName, ...] = ("h2d_gbps", "d2h_gbps")  # measured together by host_links


def run(ctx: Ctx) -> ComputeResult:
    cfg = section(ctx.spec, "compute", ComputeConfig)
    # a re-measure (families/compute/__init__.py, REMEASURE) names the figures it wants again; the first run
    # measures them all
    only = set(cfg.get("figures") or [*MEASURES, *HOST_LINKS])
    row, found = identity(ctx), dict[FigureName, Measured]()
    if only & set(HOST_LINKS):  # first: a job staged beside the probe imports once they are measured
        ctx.phase("host links")
        found.update(host_links(ctx, cfg, only))
    let_staged_import(ctx)
    for figure, measure in MEASURES.items():
        if figure in only:
            ctx.phase(figure)
            found[figure] = measure(ctx, cfg)
    row["not_measured"] = {f: value for f, (value, _, _) in found.items() if isinstance(value, str)}
    for f, (value, _, _) in found.items():
        if not isinstance(value, str):
            row[f] = value
    row["clocks"] = {f: clocks for f, (_, clocks, _) in found.items() if clocks is not None}
    row["windows"] = {f: per_window for f, (_, _, per_window) in found.items() if per_window}
    if cfg["duration_s"] > 0:
        ctx.phase("burn-in")
        row["burnin"] = burnin(ctx, cfg)
    ctx.phase("gather")
    rows = ctx.gather(row)
    return {
        "rows": rows,
        "summary": {f: compute.summary(rows, f) for f in compute.FIGURES},
        "not_measured": {f: compute.not_measured(rows, f) for f in compute.FIGURES},
        "burnin": compute.burnin_verdict(rows) if cfg["duration_s"] > 0 else None,
        "config": cfg,
        "software": {"torch": torch.__version__, "cuda": torch.version.cuda},
    }


if __name__ == "__main__":
    main(run)
