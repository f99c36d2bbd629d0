"""Soak: every GPU of every node at once for ``soak.duration_s``, each result checked, NVML sampled all along
(``acceptance.families.soak`` holds the rules).

The soak runs in rounds, in step on every rank (one all_reduce of a flag after each round says whether the
time is up, so every rank runs the same number of collectives):

* an all_reduce of data whose sum is exact (``probes.verifiable``) starts, and runs beside the GEMMs;
* a timed batch of GEMMs of about ``round_s`` in bfloat16, and in fp8 (``torch._scaled_mm``) where the GPU
  has it. The inputs come from ``seed`` on the host, the same on every rank. Every result is compared on the
  device with the rank's first, bit for bit, and the first wrong element kept; a sample of rows of the first
  result is compared with an fp64 product on the host, within the bound of the arithmetic (``_bound``); the
  first result's digest is compared across the ranks of one model by the rules;
* the all_reduce's result is compared with the exact sum, element by element;
* one memory-pattern pass over ``memory_fraction`` of the GPU's free memory (``probes.memory_patterns``).

Every ``checkpoint_s`` of soak (``families.soak.next_checkpoint``) the ranks keep what they measured so far:
the flag of the round's all_reduce carries a second element, "a checkpoint is due", so that every rank
agrees on the round without a collective more; in that round every rank's record so far is gathered (the
NVML watch keeps running: ``SoakWatch.snapshot``) and rank 0 replaces ``partial.json`` with it, in the final
result's shape marked incomplete (``families.soak.checkpointed``). A soak stopped later (its timeout, a
killed rank, torchrun's SIGTERM) is judged on it.

Each batch is timed alone (CUDA events on a GPU, the host clock on the CPU), so a rank's TFLOP/s is its own
GEMMs' speed and not its wait for a slower rank in the round's collectives. NVML is sampled on a thread
(``probes.soak_watch``). The device's reduced-precision reductions for bfloat16 GEMMs are turned off
(``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction``): the fp64 check's bound assumes
fp32 accumulation, and the soak checks the GPU, not a faster, less exact mode of the library.

Test-only fault knob: ``ACCEPTANCE_TEST_SOAK="WHAT@RANK[:FACTOR]"`` (several joined by ``;``):
``gemm@1`` flips an exponent bit of one element of rank 1's second bfloat16 result; ``slow@2:0.5`` holds
rank 2's GEMM batches to half their speed (it sleeps inside the timed batch); ``memory@0`` flips a bit of
one word of rank 0's first memory pass between its write and its read; ``allreduce@1`` changes one element
of rank 1's first all_reduce result; ``kill@1:0.3`` SIGKILLs rank 1 at the first round past 0.3 of
``duration_s`` (a rank killed part-way: the soak stops, and is judged on its last checkpoint). What it did is
in the result's ``injected``.
"""

from __future__ import annotations

import hashlib
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from acceptance.families.soak import (
    Bad,
    CollectiveRecord,
    GemmDtype,
    GemmRecord,
    NvmlRecord,
    RankSoak,
    SoakConfig,
    SoakResult,
    Window,
    checkpointed,
    next_checkpoint,
)
from acceptance.probes import verifiable
from acceptance.probes.compute import WARMUP_S, fp8_unavailable
from acceptance.probes.memory_patterns import MemoryPatterns
from acceptance.probes.rank import Ctx, main, section, write_json
from acceptance.probes.soak_watch import SoakWatch
from acceptance.schema.rounding import U_BF16, U_FP8_ACCUMULATE, U_FP32, accumulation_gamma
from acceptance.schema.sizes import parse_size

FAULT_ENV = "ACCEPTANCE_TEST_SOAK"
FAULTS = ("gemm", "slow", "memory", "allreduce", "kill")
FRACTIONAL = ("slow", "kill")  # the faults that take a FACTOR, 0 < FACTOR < 1
PARTIAL = "partial.json"  # what a checkpoint leaves in the probe's folder (``acceptance.run.progress``)
# the unit roundoffs of bfloat16, of float32 (bf16's accumulator) and of fp8's accumulator: schema.rounding
ALLREDUCE_BOUND = 1 << 24  # float32 holds every integer up to 2**24 exactly: the sums stay exact
# the GEMM's own memory next to the patterns': inputs, first result, the result, and the checks' temporaries
GEMM_BUFFERS = 8


@dataclass(frozen=True)
class Fault:
    what: str
    rank: int
    factor: float = 1.0


def parse_faults(knob: str) -> list[Fault]:
    """``FAULT_ENV``'s value as faults; a malformed one is an error, never silently a run without it."""
    faults = []
    for item in (part.strip() for part in knob.split(";")):
        if not item:
            continue
        what, at, rest = item.partition("@")
        rank, colon, factor = rest.partition(":")
        ok = bool(at) and what in FAULTS and rank.isdigit()
        try:
            value = float(factor) if colon else 0.5
        except ValueError:
            ok = False
        if not ok or (what in FRACTIONAL and not 0 < value < 1) or (colon and what not in FRACTIONAL):
            raise ValueError(
                f"{FAULT_ENV}: expected WHAT@RANK (WHAT one of {', '.join(FAULTS)}), or slow@RANK:FACTOR or "
                f"kill@RANK:FACTOR with 0 < FACTOR < 1; got {item!r}"
            )
        faults.append(Fault(what, int(rank), value))
    return faults


def _fault(faults: list[Fault], what: str, rank: int) -> Fault | None:
    return next((f for f in faults if f.what == what and f.rank == rank), None)


# ---- GEMMs ------------------------------------------------------------------------------------------------


def _inputs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same bfloat16 matrices on every rank: drawn on the host, where the generator is the same
    whatever the device."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn((n, n), generator=gen, dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn((n, n), generator=gen, dtype=torch.float32).to(torch.bfloat16)
    return a, b


def _bound(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor, gamma: float) -> torch.Tensor:
    """The largest error of each element of a product rounded to bfloat16: the inner product's error bound
    gamma |a||b| (``schema.rounding.accumulation_gamma``: Higham's gamma_k where it is meaningful, else
    Higham and Mary's probabilistic one) plus the final rounding to bfloat16 (u |result|)."""
    return gamma * (1 + U_BF16) * (a.abs() @ b.abs()) + U_BF16 * ref.abs() + 1e-30


def _no_bound(dtype: str, k: int, accumulate: float) -> str:
    return (
        f"{dtype}: no meaningful error bound for k = {k} with the accumulator's u = 2^{math.log2(accumulate):g} "
        "(soak.matmul_size too large): the fp64 reference check was not made"
    )


def _fmt(value: float) -> str:
    return f"{value:.9g}"


def _where(index: int, n: int) -> str:
    return f"element {index:,} (row {index // n}, column {index % n})"


@dataclass
class Gemm:
    """One GEMM dtype on this rank: the call, its first result, and the checks' counters on the device."""

    dtype: GemmDtype
    call: Callable[[torch.Tensor | None], torch.Tensor]  # (out or None) -> the result
    host_a: torch.Tensor  # the inputs as the GPU sees them, on the host (compact; float64 while checked)
    host_b: torch.Tensor
    accumulate: float
    n: int
    ref: torch.Tensor = field(init=False)
    out: torch.Tensor = field(init=False)
    wrong: torch.Tensor = field(init=False)
    wrong_calls: torch.Tensor = field(init=False)
    bad_index: torch.Tensor = field(init=False)
    bad_value: torch.Tensor = field(init=False)
    calls: int = 0
    per_call_s: float = 0.0
    windows: list[tuple[float, float, float]] = field(default_factory=list)  # (t, flop, seconds) per batch
    # the first result's digest and fp64 check: it never changes after ``start``, so each checkpoint's
    # record reuses them (a copy of the result to the host and a product in fp64 each time, else)
    _first: tuple[str, tuple[int, int, float, Bad | None]] | None = None

    def start(self) -> None:
        self.ref = self.call(None).clone()
        self.out = torch.empty_like(self.ref)
        device = self.ref.device
        self.wrong = torch.zeros((), dtype=torch.int64, device=device)
        self.wrong_calls = torch.zeros((), dtype=torch.int64, device=device)
        self.bad_index = torch.zeros(1, dtype=torch.int64, device=device)
        self.bad_value = torch.zeros(1, dtype=torch.float64, device=device)

    def once(self, corrupt: bool = False) -> None:
        """One GEMM, its result compared with the first on the device (no copy, no wait)."""
        self.call(self.out)
        flat = self.out.view(-1)
        if corrupt:
            flat.view(torch.int16)[self.n + 7 : self.n + 8].bitwise_xor_(0x2000)  # an exponent bit
        differ = flat != self.ref.view(-1)
        count = differ.sum()
        first = torch.argmax(differ.view(torch.uint8)).view(1)  # the first True: argmax takes the first maximum
        new = (count > 0) & (self.wrong == 0)
        self.bad_index.copy_(torch.where(new, first, self.bad_index))
        self.bad_value.copy_(torch.where(new, flat.index_select(0, first).double(), self.bad_value))
        self.wrong += count
        self.wrong_calls += (count > 0).long()
        self.calls += 1

    def digest(self) -> str:
        return hashlib.sha256(self.ref.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()

    def reference_gamma(self) -> tuple[float, str] | None:
        """The inner products' error bound factor for this GEMM's k and accumulator; None: none is meaningful."""
        return accumulation_gamma(self.host_a.shape[1], self.accumulate)

    def reference(self, rows: int) -> tuple[int, int, float, Bad | None]:
        """Rows of the first result against the fp64 product on the host: elements checked, elements
        outside the bound, the largest |error| / bound, the first one outside it. Nothing checked where no
        bound is meaningful for this k (``reference_gamma``; ``record`` says why)."""
        found = self.reference_gamma()
        if found is None:
            return 0, 0, 0.0, None
        picked = sorted({(i * self.n) // rows for i in range(rows)})
        got = self.ref[picked].double().cpu()
        a, b = self.host_a[picked].double(), self.host_b.double()
        want = a @ b
        error = (got - want).abs()
        ratio = error / _bound(a, b, want, found[0])
        outside = (ratio > 1) | ratio.isnan()
        first: Bad | None = None
        if bool(outside.any()):
            r, c = (int(x) for x in outside.nonzero()[0])
            first = {
                "where": _where(picked[r] * self.n + c, self.n),
                "got": _fmt(float(got[r, c])),
                "want": f"{_fmt(float(want[r, c]))} (fp64, bound {_fmt(float(error[r, c] / ratio[r, c]))})",
            }
        worst = float(ratio.nan_to_num(nan=math.inf).max())
        return got.numel(), int(outside.sum()), worst, first

    def record(self, spot_rows: int, window_s: float) -> GemmRecord:
        wrong = int(self.wrong.item())
        first: Bad | None = None
        if wrong:
            i = int(self.bad_index.item())
            first = {
                "where": _where(i, self.n),
                "got": _fmt(float(self.bad_value.item())),
                "want": _fmt(float(self.ref.view(-1)[i].double().item())),
            }
        if self._first is None:
            self._first = (self.digest(), self.reference(spot_rows))
        digest, (checked, errors, worst, ref_first) = self._first
        gamma = self.reference_gamma()
        return {
            "dtype": self.dtype,
            "not_measured": None,
            "calls": self.calls,
            "wrong_calls": int(self.wrong_calls.item()),
            "wrong_elements": wrong,
            "first_bad": first,
            "digest": digest,
            "reference_checked": checked,
            "reference_errors": errors,
            "reference_worst": worst,
            "reference_first_bad": ref_first,
            "reference_not_measured": (
                None if gamma is not None else _no_bound(self.dtype, self.host_a.shape[1], self.accumulate)
            ),
            "windows": windowed(self.windows, window_s),
        }


def windowed(batches: list[tuple[float, float, float]], window_s: float) -> list[Window]:
    """The batches (start time, floating-point operations, seconds) as windows of ``window_s``: each window's
    TFLOP/s is its operations over its GEMMs' seconds."""
    grouped: dict[int, list[tuple[float, float, float]]] = {}
    for batch in batches:
        grouped.setdefault(int(batch[0] // window_s), []).append(batch)
    out: list[Window] = []
    for _, members in sorted(grouped.items()):
        seconds = sum(m[2] for m in members)
        if seconds > 0:
            out.append({"t": round(members[0][0], 3), "tflops": sum(m[1] for m in members) / seconds / 1e12})
    return out


def unmeasured(dtype: GemmDtype, reason: str) -> GemmRecord:
    return {
        "dtype": dtype,
        "not_measured": reason,
        "calls": 0,
        "wrong_calls": 0,
        "wrong_elements": 0,
        "first_bad": None,
        "digest": "",
        "reference_checked": 0,
        "reference_errors": 0,
        "reference_worst": 0.0,
        "reference_first_bad": None,
        "reference_not_measured": None,
        "windows": [],
    }


def gemms(ctx: Ctx, cfg: SoakConfig) -> tuple[list[Gemm], list[GemmRecord]]:
    """The GEMMs this rank runs, and the records of those it cannot (fp8 off the GPU)."""
    n = cfg["matmul_size"]
    a, b = _inputs(n, cfg["seed"])
    da, db = a.to(ctx.device), b.to(ctx.device)
    bf16 = Gemm(
        "bfloat16",
        lambda out: torch.mm(da, db) if out is None else torch.mm(da, db, out=out),
        a,
        b,
        U_FP32,
        n,
    )
    reason = fp8_unavailable(ctx, cfg["fp8"], "fp8 GEMM", "soak.fp8")
    if reason is not None:
        return [bf16], [unmeasured("float8_e4m3fn", reason)]
    a8, b8 = da.to(torch.float8_e4m3fn), db.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major b
    one = torch.ones((), dtype=torch.float32, device=ctx.device)

    def fp8(out: torch.Tensor | None) -> torch.Tensor:
        got = torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
        return got if out is None else out.copy_(got)

    try:
        fp8(None)
    except RuntimeError as exc:  # a torch or cuBLASLt that cannot run it here: the bf16 GEMM soaks alone
        return [bf16], [unmeasured("float8_e4m3fn", f"fp8 GEMM: torch._scaled_mm failed: {str(exc).splitlines()[0]}")]
    host8 = (a8.float().cpu(), b8.float().cpu())  # every e4m3 value is exact in float32
    return [bf16, Gemm("float8_e4m3fn", fp8, *host8, U_FP8_ACCUMULATE, n)], []


# ---- the all_reduce --------------------------------------------------------------------------------------


@dataclass
class Exact:
    """An all_reduce of float32 data whose sum is exact (``probes.verifiable``), checked on the device."""

    mine: torch.Tensor
    want: torch.Tensor
    buf: torch.Tensor = field(init=False)
    wrong: torch.Tensor = field(init=False)
    bad_index: torch.Tensor = field(init=False)
    bad_value: torch.Tensor = field(init=False)
    iterations: int = 0

    def __post_init__(self) -> None:
        self.buf = torch.empty_like(self.mine)
        device = self.mine.device
        self.wrong = torch.zeros((), dtype=torch.int64, device=device)
        self.bad_index = torch.zeros(1, dtype=torch.int64, device=device)
        self.bad_value = torch.zeros(1, dtype=torch.float64, device=device)

    @classmethod
    def make(cls, ctx: Ctx, nbytes: int) -> Exact:
        index = torch.arange(max(1, nbytes // 4), dtype=torch.int64, device=ctx.device)
        mine = verifiable.summand(ctx.rank, ctx.world_size, index, ALLREDUCE_BOUND).to(torch.float32)
        return cls(mine, verifiable.target(index, ALLREDUCE_BOUND).to(torch.float32))

    def launch(self) -> dist.Work:
        self.buf.copy_(self.mine)
        work = dist.all_reduce(self.buf, async_op=True)
        assert work is not None
        return work

    def check(self, work: dist.Work, corrupt: bool = False) -> None:
        work.wait()
        if corrupt:
            self.buf[3:4].add_(1.0)
        differ = self.buf != self.want
        count = differ.sum()
        first = torch.argmax(differ.view(torch.uint8)).view(1)
        new = (count > 0) & (self.wrong == 0)
        self.bad_index.copy_(torch.where(new, first, self.bad_index))
        self.bad_value.copy_(torch.where(new, self.buf.index_select(0, first).double(), self.bad_value))
        self.wrong += count
        self.iterations += 1

    def record(self) -> CollectiveRecord:
        wrong = int(self.wrong.item())
        first: Bad | None = None
        if wrong:
            i = int(self.bad_index.item())
            first = {
                "where": f"element {i:,}",
                "got": _fmt(float(self.bad_value.item())),
                "want": _fmt(float(self.want[i].item())),
            }
        return {"elements": self.mine.numel(), "iterations": self.iterations, "wrong": wrong, "first_bad": first}


# ---- the soak --------------------------------------------------------------------------------------------


class Span:
    """One timed GEMM batch: CUDA events on a GPU (the GEMMs' time on the device, not the host's), the host
    clock on the CPU; read after the round's synchronisation."""

    def __init__(self, cuda: bool) -> None:
        self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
        self.t0, self.host_s = time.perf_counter(), 0.0
        if self.events is not None:
            self.events[0].record()

    def end(self) -> None:
        if self.events is not None:
            self.events[1].record()
        else:
            self.host_s = time.perf_counter() - self.t0

    def seconds(self) -> float:
        if self.events is None:
            return self.host_s
        return float(self.events[0].elapsed_time(self.events[1])) / 1e3


def warm_up(ctx: Ctx, work: list[Gemm]) -> None:
    """Each GEMM's first result, then calls for at least WARMUP_S on a GPU (clocks ramp): the pace of the
    batches (``per_call_s``) is the warm-up's last round's."""
    for g in work:
        g.start()
    begun = time.perf_counter()
    while True:
        for g in work:
            t0 = time.perf_counter()
            g.call(g.out)
            ctx.sync()
            g.per_call_s = time.perf_counter() - t0
        ctx.progress()
        if not ctx.is_cuda or time.perf_counter() - begun >= WARMUP_S:
            return


def _allocate(nbytes: int, device: torch.device, seed: int, tries: int = 4) -> MemoryPatterns:
    """The patterns' buffer; halved after an out-of-memory error (another process on the GPU took memory
    between the free-memory reading and the allocation), so the soak runs on what there is. The bytes it
    got are in the record."""
    for _ in range(tries):
        try:
            return MemoryPatterns.allocate(nbytes, device, seed)
        except torch.cuda.OutOfMemoryError:
            nbytes //= 2
            torch.cuda.empty_cache()
    return MemoryPatterns.allocate(nbytes, device, seed)


@dataclass(frozen=True)
class Injected:
    """The faults of ``FAULT_ENV`` that hit this rank."""

    gemm: Fault | None
    slow: Fault | None
    memory: Fault | None
    allreduce: Fault | None
    kill: Fault | None

    @classmethod
    def of(cls, faults: list[Fault], rank: int) -> Injected:
        return cls(*(_fault(faults, what, rank) for what in FAULTS))

    def lines(self, rank: int) -> list[str]:
        said = {
            "gemm": "one element of its second bfloat16 result flipped",
            "slow": f"GEMM batches held to {self.slow.factor if self.slow else 1:g} of their speed",
            "memory": "one memory word flipped in its first pass",
            "allreduce": "one element of its first all_reduce changed",
            "kill": f"SIGKILLed at {self.kill.factor if self.kill else 1:g} of the soak's duration",
        }
        return [f"rank {rank}: {said[what]}" for what in FAULTS if getattr(self, what) is not None]


@dataclass
class Soak:
    """This rank's soak: its GEMMs, all_reduce, memory patterns and NVML watch, and the rounds so far."""

    ctx: Ctx
    cfg: SoakConfig
    work: list[Gemm]
    skipped: list[GemmRecord]
    exact: Exact
    memory: MemoryPatterns
    uuid: str | None
    watch: SoakWatch | None
    faults: Injected
    batch: dict[GemmDtype, int] = field(default_factory=dict)
    asked_bytes: int = 0  # the patterns' buffer the profile asked for (``memory.bytes`` is what they got)
    rounds: int = 0
    t0: float = 0.0
    # the soak time every rank agreed on at the last round's end (the longest rank's), and the next
    # checkpoint's: derived from agreed values only, so every rank takes the same rounds for checkpoints
    soaked_s: float = 0.0
    checkpoint_at: float = 0.0
    checkpoints: int = 0

    @classmethod
    def prepare(cls, ctx: Ctx, cfg: SoakConfig, faults: list[Fault]) -> Soak:
        """Inputs, first results and warm-up, then the memory buffer from what is left free."""
        if ctx.is_cuda:
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        ctx.phase("inputs")
        work, skipped = gemms(ctx, cfg)
        exact = Exact.make(ctx, parse_size(cfg["allreduce_size"]))
        warm_up(ctx, work)
        ctx.phase("memory")
        if ctx.is_cuda:
            free, _ = torch.cuda.mem_get_info(ctx.device)
            asked = int(free * cfg["memory_fraction"])  # what the profile asked for (soak.memory_fraction)
            nbytes = asked - GEMM_BUFFERS * work[0].ref.numel() * 2
        else:
            asked = nbytes = parse_size(cfg["host_memory_size"])
        # the bytes covered against ``asked`` are in the record: soak.memory_coverage fails a buffer that the
        # GEMMs' memory or _allocate's halving left short (max(8, ...): a buffer however small, never none)
        memory = _allocate(max(8, nbytes), ctx.device, cfg["seed"])
        uuid = f"GPU-{torch.cuda.get_device_properties(ctx.device).uuid}" if ctx.is_cuda else None
        watch = SoakWatch(uuid, cfg["sample_s"]) if uuid is not None else None
        # every GEMM gets its share of the round, at the warm-up's pace
        share = cfg["round_s"] / len(work)
        batch = {g.dtype: max(1, round(share / max(g.per_call_s, 1e-6))) for g in work}
        injected = Injected.of(faults, ctx.rank)
        return cls(ctx, cfg, work, skipped, exact, memory, uuid, watch, injected, batch, asked_bytes=asked)

    def start(self) -> None:
        self.ctx.phase("soak")
        dist.barrier()
        self.t0 = time.perf_counter()
        if self.watch is not None:
            self.watch.start(self.t0)
        self.checkpoint_at = next_checkpoint(0.0, self.cfg["checkpoint_s"])

    def round(self) -> bool:
        """One round; True when the ranks agree that the time is up (``checkpoint_due`` then says whether
        this round was to keep what the soak measured so far)."""
        ctx, faults = self.ctx, self.faults
        if faults.kill is not None and time.perf_counter() - self.t0 >= faults.kill.factor * self.cfg["duration_s"]:
            os.kill(os.getpid(), signal.SIGKILL)  # the test knob's killed rank: no handler, no goodbye
        pending = self.exact.launch()
        spans: list[tuple[Gemm, float, Span]] = []
        for g in self.work:
            begun, span = time.perf_counter() - self.t0, Span(ctx.is_cuda)
            for _ in range(self.batch[g.dtype]):
                g.once(corrupt=faults.gemm is not None and g.dtype == "bfloat16" and g.calls == 1)
            if faults.slow is not None:  # inside the span: the GPU idles while the host sleeps
                ctx.sync()
                time.sleep((time.perf_counter() - self.t0 - begun) * (1 / faults.slow.factor - 1))
            span.end()
            spans.append((g, begun, span))
        self.exact.check(pending, corrupt=faults.allreduce is not None and self.exact.iterations == 0)
        self.memory.run_pass(corrupt=faults.memory is not None and self.memory.passes == 0)
        # the round's one collective of its own: the longest-running rank's soak time, on every rank. The
        # time is up when it is up on any rank; a checkpoint is due when the agreed time passed the next one
        agreed = torch.tensor([time.perf_counter() - self.t0], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        self.soaked_s = float(agreed.item())  # the round's synchronisation: every span has ended
        finished = self.soaked_s >= self.cfg["duration_s"]
        for g, begun, span in spans:
            g.windows.append((begun, 2.0 * g.n**3 * self.batch[g.dtype], span.seconds()))
        self.memory.bad_words()
        self.rounds += 1
        ctx.progress()
        return finished

    @property
    def checkpoint_due(self) -> bool:
        """Whether the last round's agreed soak time reached the next checkpoint (the same on every rank)."""
        return self.soaked_s >= self.checkpoint_at

    def checkpoint(self) -> None:
        """Every rank's record so far to every rank; local rank 0 of each node (each node's pytest reads its
        own folder) replaces ``partial.json`` with it, atomically: a kill mid-write leaves the last whole one."""
        ctx = self.ctx
        everyone: list[tuple[RankSoak, list[str]]] = ctx.gather((self.snapshot(), self.faults.lines(ctx.rank)))
        self.checkpoints += 1
        self.checkpoint_at = next_checkpoint(self.soaked_s, self.cfg["checkpoint_s"])
        if ctx.local_rank == 0:
            write_json(ctx.out / PARTIAL, checkpointed(result(ctx, self.cfg, everyone), self.soaked_s))

    def snapshot(self) -> RankSoak:
        """The record so far; the NVML watch keeps sampling."""
        return self._record(time.perf_counter() - self.t0, self.watch.snapshot() if self.watch is not None else None)

    def record(self) -> RankSoak:
        seconds = time.perf_counter() - self.t0
        nvml = self.watch.stop() if self.watch is not None else None
        self.ctx.phase("records")
        return self._record(seconds, nvml)

    def _record(self, seconds: float, nvml: NvmlRecord | None) -> RankSoak:
        ctx, cfg = self.ctx, self.cfg
        return {
            "host": ctx.host,
            "node_rank": ctx.node_rank,
            "rank": ctx.rank,
            "local_rank": ctx.local_rank,
            "gpu": ctx.device.index if ctx.is_cuda else None,
            "uuid": self.uuid,
            "model": torch.cuda.get_device_properties(ctx.device).name if ctx.is_cuda else "cpu",
            "seconds": round(seconds, 3),
            "rounds": self.rounds,
            "gemm": [g.record(cfg["spot_rows"], cfg["window_s"]) for g in self.work] + self.skipped,
            "memory": {**self.memory.record(), "asked_bytes": self.asked_bytes},
            "allreduce": self.exact.record(),
            "nvml": nvml,
        }


def soak(ctx: Ctx, cfg: SoakConfig, faults: list[Fault]) -> tuple[RankSoak, list[str]]:
    """This rank's record, and what the fault knob did to it."""
    state = Soak.prepare(ctx, cfg, faults)
    state.start()
    while not state.round():
        if state.checkpoint_due:
            state.checkpoint()
    return state.record(), state.faults.lines(ctx.rank)


def run(ctx: Ctx) -> SoakResult:
    faults = parse_faults(os.environ.get(FAULT_ENV, ""))
    cfg = section(ctx.spec, "soak", SoakConfig)
    mine = soak(ctx, cfg, faults)
    ctx.phase("gather")
    return result(ctx, cfg, ctx.gather(mine))


def result(ctx: Ctx, cfg: SoakConfig, everyone: list[tuple[RankSoak, list[str]]]) -> SoakResult:
    """The probe's result from every rank's record and fault lines: the final one, or a checkpoint's."""
    return {
        "ranks": [r for r, _ in everyone],
        "config": cfg,
        "device": "cuda" if ctx.is_cuda else "cpu",
        "injected": [line for _, lines in everyone for line in lines],
        "software": {"torch": torch.__version__, "cuda": torch.version.cuda},
    }


if __name__ == "__main__":
    main(run)
