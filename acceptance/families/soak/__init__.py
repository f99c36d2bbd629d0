"""The soak's rules: every rank's record of a burn-in in, the GPUs that computed wrong or sagged named out.

Pure data in and out (no NVML, no torch, no pytest). The probe (``acceptance.probes.soak``) records per rank:
its GEMMs' checks (against its own first result, against an fp64 reference on the host, and its first
result's digest for the comparison across GPUs), its memory patterns' bad words, its all_reduce's wrong
elements, the GEMM speed of each window and, on GPUs, NVML's samples and counters. Each count here names
node, GPU index, UUID and the first bad value; each speed names the GPU under the median.

Every ``soak.checkpoint_s`` of soak the probe leaves the result so far in its ``partial.json``
(``checkpointed``); a soak stopped part-way (its timeout, a killed rank, torchrun's SIGTERM) is judged on its
last checkpoint (``from_partial``): each count on what it measured, and ``soak.completed_fraction`` fails it.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, model_validator
from typing_extensions import TypedDict

from acceptance.families.answers import NotMeasured, clock_events_text, unanswered
from acceptance.families.soak.report import REPORT
from acceptance.numbers import fmt
from acceptance.schema.bounds import Threshold
from acceptance.schema.family import GPU_ONLY, Behaviour, Family, Metric, Shapes
from acceptance.schema.fields import PositiveInt, Size, Strict, ThrottleReason
from acceptance.schema.figure import Figure
from acceptance.schema.results import validated
from acceptance.schema.rounding import U_FP8_ACCUMULATE, accumulation_gamma, largest_k

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


_SOAK = "soak.<figure>"


def _coverage(s: Soak) -> Threshold:
    return Threshold(min=s.memory_coverage_min, source="soak.memory_coverage_min")


def _tolerance(s: Soak) -> Threshold:
    return Threshold(max=s.tolerance, source=f"soak.tolerance (median of the {s.median_of})")


def _whole(_s: Soak) -> Threshold:
    return Threshold(min=1.0, source="soak.duration_s")


_SOAKED = Shapes[Soak](_SOAK)
SOAK = Family(
    "soak",
    "burn-in, every GPU at once for soak.duration_s: GEMM results, memory patterns, a checked all_reduce, NVML",
    Soak,
    (
        _SOAKED.count(
            r"(gemm_wrong_elements|gemm_disagreeing_gpus|gemm_reference_errors|memory_bad_words|allreduce_wrong"
            r"|missing_ranks)"
        ),
        # the share of the memory asked for that the patterns covered: a sanity gate (soak.memory_coverage_min)
        Metric[Soak](r"(memory_coverage)", _SOAK, "higher", scale="bound", kind="correctness", builtin=_coverage),
        # NVML's counters and events: none on the CPU
        _SOAKED.count(r"(ecc_new_errors|remapped_rows_new|xid_new|slowdown_gpus)", devices=GPU_ONLY),
        Metric[Soak](r"(bf16_tflops)_(min|median)", _SOAK, "higher"),
        Metric[Soak](r"(fp8_tflops)_(min|median)", _SOAK, "higher", devices=GPU_ONLY),
        # a GPU further under the median than soak.tolerance fails; the sag over the soak is information
        Metric[Soak](r"(bf16_tflops)_(below_median)", _SOAK, "lower", scale="points", builtin=_tolerance),
        Metric[Soak](
            r"(fp8_tflops)_(below_median)", _SOAK, "lower", scale="points", devices=GPU_ONLY, builtin=_tolerance
        ),
        Metric[Soak](r"(bf16_tflops)_(sag)", _SOAK, "lower", scale="points"),
        Metric[Soak](r"(fp8_tflops)_(sag)", _SOAK, "lower", scale="points", devices=GPU_ONLY),
        Metric[Soak](
            r"(temperature_c_max|memory_temperature_c_max|power_w_max)", _SOAK, "lower", scale="bound",
            devices=GPU_ONLY,
        ),
        # the share of soak.duration_s soaked: under 1 where the soak stopped part-way (its last checkpoint's)
        Metric[Soak](r"(completed_fraction)", _SOAK, "higher", scale="bound", kind="correctness", builtin=_whole),
        Metric[Soak](r"(wall_s)", _SOAK, "lower", scale="bound"),
    ),
    local=True,
    probes=("soak",),
    opt_in=True,
    behaviour=Behaviour(report=REPORT),
)  # fmt: skip


GemmDtype = Literal["bfloat16", "float8_e4m3fn"]
# the metric stem of each GEMM's speed figures
DTYPE_FIGURE: dict[str, str] = {"bfloat16": "bf16_tflops", "float8_e4m3fn": "fp8_tflops"}
EARLY_S = 60.0  # "the first minute against the last": or each half, when the soak is shorter than two minutes


class SoakConfig(TypedDict):
    """The soak's section of the profile (``acceptance.families.*.Soak``)."""

    duration_s: float
    matmul_size: int
    fp8: bool
    round_s: float
    window_s: float
    memory_fraction: float
    memory_coverage_min: float  # judged in the plugin (soak.memory_coverage), carried with the section
    host_memory_size: str
    allreduce_size: str
    spot_rows: int
    sample_s: float
    tolerance: float
    median_of: str  # cluster or node
    slowdown_reasons: list[str]
    seed: int
    checkpoint_s: float  # seconds of soak between two partial.json (``next_checkpoint``)


class Bad(TypedDict):
    """The first bad value a check found: where, what it read, what it should have read."""

    where: str
    got: str
    want: str


class Window(TypedDict):
    t: float  # seconds from the soak's start to the window's start
    tflops: float


class GemmRecord(TypedDict):
    """One GEMM dtype on one rank: every result checked against the rank's first, a sample against fp64."""

    dtype: GemmDtype
    not_measured: str | None  # why this dtype was not run (no fp8 on the CPU); the rest is empty then
    calls: int
    wrong_calls: int  # results that differ from the first in any element
    wrong_elements: int
    first_bad: Bad | None
    digest: str  # sha256 of the first result's bytes
    reference_checked: int  # elements of the first result compared with an fp64 product on the host
    reference_errors: int  # of those, the ones outside the error bound
    reference_worst: float  # the largest |error| / bound among them (1 = at the bound)
    reference_first_bad: Bad | None
    # why the fp64 reference check was not made where the GEMM ran (no meaningful error bound for its k)
    reference_not_measured: str | None
    windows: list[Window]


class MemoryRecord(TypedDict):
    bytes: int  # the patterns' buffer
    # what the profile asked for: soak.memory_fraction of the free memory, or soak.host_memory_size
    asked_bytes: int  # 0: not known (a record from before it was kept)
    passes: int  # whole-buffer write-and-read passes
    patterns: dict[str, int]  # pattern -> passes
    bad_words: int  # 64-bit words read back other than written
    first_bad: Bad | None


class CollectiveRecord(TypedDict):
    elements: int  # per all_reduce
    iterations: int
    wrong: int  # elements other than the exact sum, over all iterations
    first_bad: Bad | None


class Sample(TypedDict):
    """One NVML sample; None where NVML does not answer that query on this GPU."""

    t: float  # seconds from the soak's start
    sm_mhz: int | None
    power_w: float | None
    temp_c: int | None
    mem_temp_c: int | None
    events: list[str]  # clock-event reasons set (probes.nvml.CLOCK_EVENT_BITS)


class Counters(TypedDict):
    """NVML's error counters of one GPU, read before and after the soak."""

    ecc_corrected: int | NotMeasured  # volatile: since the driver loaded
    ecc_uncorrected: int | NotMeasured
    remapped_rows: int | NotMeasured  # correctable + uncorrectable remapped rows (nvmlDeviceGetRemappedRows)
    remap_pending: bool | NotMeasured
    remap_failure: bool | NotMeasured


class Xid(TypedDict):
    t: float
    xid: int


class NvmlRecord(TypedDict):
    samples: list[Sample]
    samples_reason: str | None  # why there is no sample, else None
    before: Counters | NotMeasured
    after: Counters | NotMeasured
    xids: list[Xid] | NotMeasured  # the XID events NVML delivered during the soak


class RankSoak(TypedDict):
    host: str
    node_rank: int
    rank: int
    local_rank: int
    gpu: int | None  # None on the CPU
    uuid: str | None
    model: str  # the device's name (``NVIDIA H100 80GB HBM3``), "cpu" on the CPU: GEMMs compare within one
    seconds: float
    rounds: int
    gemm: list[GemmRecord]
    memory: MemoryRecord
    allreduce: CollectiveRecord
    nvml: NvmlRecord | None  # None on the CPU


class _SoakResult(TypedDict):
    ranks: list[RankSoak]
    config: SoakConfig
    device: str  # topology.device
    injected: list[str]  # what the test-only fault knob did (``probes.soak.FAULT_ENV``); empty in a real run
    software: dict[str, str | None]


class SoakResult(_SoakResult, total=False):
    """The probe's result; a checkpoint's (``partial.json``) has ``complete`` False and the seconds soaked
    when it was written (``checkpointed``), the final result neither."""

    complete: bool
    soaked_s: float
    stopped: str  # why the probe ended before soak.duration_s: its error (``from_partial``)


def section(model: object) -> Soak:
    """The profile's ``soak:`` section."""
    return SOAK.section_of(model)


def parts(duration_s: float, limit_s: float) -> int:
    """The probe's time limit in parts of ``limit_s`` (``timeouts.soak``, else ``timeouts.default``): the
    limit is that much beyond the soak's own duration, so a longer soak never needs a new timeout."""
    return math.ceil((duration_s + limit_s) / limit_s)


# ---- checkpoints ----------------------------------------------------------------------------------------


def next_checkpoint(soaked_s: float, every_s: float) -> float:
    """The soak time of the first checkpoint after ``soaked_s``: the next multiple of ``every_s`` (a round
    longer than ``every_s`` skips the multiples it passed: one checkpoint per round at most)."""
    return (math.floor(soaked_s / every_s) + 1) * every_s


def checkpointed(result: SoakResult, soaked_s: float) -> SoakResult:
    """A checkpoint's ``partial.json``: the result so far in the final result's shape, marked incomplete."""
    return {**result, "complete": False, "soaked_s": round(soaked_s, 3)}


def from_partial(found: Mapping[str, object], error: str) -> SoakResult | None:
    """The result a stopped probe left at its last checkpoint (its ``partial.json``, as
    ``ClusterRun.partial`` reads it back), with why it stopped; None where it left none (it stopped before
    its first checkpoint): then nothing was measured that could be judged."""
    ranks = found.get("ranks")
    if found.get("complete") is not False or not isinstance(ranks, list) or not ranks:
        return None
    return validated("soak", SoakResult, {**found, "stopped": error})


# ---- who a rank is --------------------------------------------------------------------------------------


def label(r: RankSoak) -> str:
    """``node 0 (gpu-a) GPU 3 (GPU-3f2a91c0...) rank 3``, or ``node 0 (host) rank 1 (cpu)``."""
    where = f"node {r['node_rank']} ({r['host']})"
    if r["gpu"] is None:
        return f"{where} rank {r['rank']} (cpu)"
    uuid = f" ({r['uuid']})" if r["uuid"] else ""
    return f"{where} GPU {r['gpu']}{uuid} rank {r['rank']}"


def _bad(bad: Bad | None) -> str:
    return f"; first at {bad['where']}: got {bad['got']}, expected {bad['want']}" if bad else ""


def _count(fig: Figure, r: RankSoak, count: int, what: str, first: Bad | None) -> None:
    """Add a rank's count of wrong values to ``fig``, where it has any, with a finding that names the rank, what
    was wrong (``what``) and the first wrong value."""
    if count:
        fig.value += count
        fig.findings.append(f"{label(r)}: {what}{_bad(first)}")


# ---- figures ---------------------------------------------------------------------------------------------


def _measured_gemms(r: RankSoak) -> list[GemmRecord]:
    return [g for g in r["gemm"] if g["not_measured"] is None]


def gemm_wrong(result: SoakResult) -> Figure:
    """Elements of repeated GEMM results that differ from the rank's own first result (same inputs)."""
    fig = Figure("soak.gemm_wrong_elements", "elements")
    for r in result["ranks"]:
        for g in _measured_gemms(r):
            what = f"{g['dtype']}: {g['wrong_elements']} wrong element(s) in {g['wrong_calls']} of {g['calls']} results"
            _count(fig, r, g["wrong_elements"], what, g["first_bad"])
    return fig


def gemm_reference(result: SoakResult) -> Figure:
    """Elements of the first result outside the error bound of an fp64 product of the same inputs."""
    fig = Figure("soak.gemm_reference_errors", "elements")
    worst: dict[str, float] = {}
    for r in result["ranks"]:
        for g in _measured_gemms(r):
            if g.get("reference_not_measured"):  # never a pass: the test fails with it
                fig.unmeasured.append(f"{label(r)}: {g.get('reference_not_measured')}")
                continue
            worst[g["dtype"]] = max(worst.get(g["dtype"], 0.0), g["reference_worst"])
            what = (
                f"{g['dtype']}: {g['reference_errors']} of {g['reference_checked']} elements checked against fp64 "
                "are outside the bound"
            )
            _count(fig, r, g["reference_errors"], what, g["reference_first_bad"])
    fig.notes = [f"{dtype}: largest error {w:.3g} of the bound" for dtype, w in sorted(worst.items())]
    return fig


def gemm_disagreeing(result: SoakResult) -> Figure:
    """GPUs whose first result differs bit for bit from what most GPUs of the same model computed.

    cuBLAS gives the same bits run to run on GPUs of one architecture and SM count (cuBLAS documentation,
    "Results reproducibility"); the same inputs on the same model must then give the same digest. The
    reference is the digest most of the model's GPUs have; on a tie, the lowest rank's."""
    fig = Figure("soak.gemm_disagreeing_gpus", "GPUs")
    groups: dict[tuple[str, str], list[tuple[RankSoak, GemmRecord]]] = {}
    for r in result["ranks"]:
        for g in _measured_gemms(r):
            groups.setdefault((r["model"], g["dtype"]), []).append((r, g))
    compared = {key: members for key, members in groups.items() if len(members) > 1}
    if not compared:
        fig.skip = "no two ranks of the same model ran the same GEMM: nothing to compare"
        return fig
    bad: set[int] = set()
    for (model, dtype), members in sorted(compared.items()):
        votes = Counter(g["digest"] for _, g in members)
        top = max(votes.values())
        reference = next(
            g["digest"] for _, g in sorted(members, key=lambda m: m[0]["rank"]) if votes[g["digest"]] == top
        )
        for r, g in members:
            if g["digest"] != reference:
                bad.add(r["rank"])
                fig.findings.append(
                    f"{label(r)}: {dtype} result digest {g['digest'][:12]} differs from {reference[:12]}, "
                    f"that of {votes[reference]} of the {len(members)} {model} ranks"
                )
    fig.value = len(bad)
    return fig


def memory_coverage(result: SoakResult) -> Figure:
    """The smallest share of the memory asked for (``asked_bytes``) that a rank's patterns covered: an
    allocation halved after an out-of-memory error, or a buffer the GEMMs' memory left short, checks less
    than the profile asked (``soak.memory_coverage_min``)."""
    fig = Figure("soak.memory_coverage", "fraction", value=1.0)
    worst: tuple[float, RankSoak] | None = None
    for r in result["ranks"]:
        asked = r["memory"].get("asked_bytes")
        if asked:
            share = r["memory"]["bytes"] / asked
            worst = (share, r) if worst is None or share < worst[0] else worst
    if worst is None:
        fig.skip = "no rank recorded the memory it asked for"
        return fig
    fig.value, r = worst
    m = r["memory"]
    fig.findings.append(
        f"{label(r)}: patterns over {m['bytes'] / 2**30:.3g} GiB of the {m.get('asked_bytes', 0) / 2**30:.3g} GiB "
        f"asked ({fig.value:.1%}), the least of any rank"
    )
    return fig


def completed(result: SoakResult) -> Figure:
    """The share of ``soak.duration_s`` soaked: 1 for a soak that ran to its end (the rounds end when the
    first rank's time is up: the longest rank's seconds); for a stopped one, its last checkpoint's seconds,
    and the stop in ``unmeasured``, so that the rest of the soak, never measured, fails the test whatever
    the fraction (a checkpoint written just before the time was up included)."""
    fig = Figure("soak.completed_fraction", "fraction")
    duration = result["config"]["duration_s"]
    soaked = max((r["seconds"] for r in result["ranks"]), default=0.0)
    fig.value = min(1.0, soaked / duration) if duration > 0 else 0.0
    if result.get("complete", True):
        return fig
    soaked = result.get("soaked_s", soaked)
    fig.findings.append(
        f"the soak stopped at {soaked:.0f} of {duration:g} s: its figures are those of its last checkpoint "
        f"(soak.checkpoint_s {result['config']['checkpoint_s']:g} s)"
    )
    fig.unmeasured.append(
        f"soak stopped after {soaked:.0f} of {duration:g} s: {result.get('stopped') or 'the probe did not finish'}"
    )
    return fig


def memory_and_allreduce(result: SoakResult) -> tuple[Figure, Figure]:
    """The checks each rank made once: 64-bit words its memory patterns read back other than written, and
    elements of its checked all_reduce other than the exact sum; each rank's count added, with a finding for
    each rank that has any."""
    memory, allreduce = Figure("soak.memory_bad_words", "words"), Figure("soak.allreduce_wrong", "elements")
    for r in result["ranks"]:
        m, a = r["memory"], r["allreduce"]
        words = f"{m['bad_words']} bad 64-bit word(s) in {m['passes']} passes over {m['bytes'] / 2**30:.2f} GiB"
        _count(memory, r, m["bad_words"], words, m["first_bad"])
        elements = f"{a['wrong']} wrong element(s) in {a['iterations']} all_reduces of {a['elements']:,} elements"
        _count(allreduce, r, a["wrong"], elements, a["first_bad"])
    return memory, allreduce


def _nvml(result: SoakResult) -> list[tuple[RankSoak, NvmlRecord]]:
    return [(r, r["nvml"]) for r in result["ranks"] if r["nvml"] is not None]


def _gpu_only(fig: Figure, result: SoakResult) -> bool:
    """Skip the figure where there is no GPU; True when it applies. A GPU run whose ranks recorded no NVML
    at all is unmeasured (its test fails), never a skip."""
    if not _nvml(result):
        if result["device"] == "cuda":
            fig.unmeasured.append("not measured on any GPU: no rank of this GPU run recorded NVML")
        else:
            fig.skip = "no GPU: NVML's counters, events and clocks exist on GPUs only (topology.device: cpu)"
        return False
    return True


def _delta(before: Counters | NotMeasured, after: Counters | NotMeasured, key: str) -> int | str:
    """after - before of a counter, or why it is not known."""
    if unanswered(before):
        return f"before: {before['not_measured']}"
    if unanswered(after):
        return f"after: {after['not_measured']}"
    b, a = before[key], after[key]  # type: ignore[literal-required]
    if unanswered(b):
        return str(b["not_measured"])
    if unanswered(a):
        return str(a["not_measured"])
    return int(a) - int(b)


def ecc_new(result: SoakResult) -> tuple[Figure, Figure]:
    """New uncorrectable ECC errors, and new remapped rows (a pending remap or a failed one counts too);
    new correctable errors are listed, not counted: ECC corrected them."""
    ecc, rows = Figure("soak.ecc_new_errors", "errors"), Figure("soak.remapped_rows_new", "rows")
    if not _gpu_only(ecc, result):
        rows.skip = ecc.skip
        return ecc, rows
    for r, n in _nvml(result):
        unc, cor = _delta(n["before"], n["after"], "ecc_uncorrected"), _delta(n["before"], n["after"], "ecc_corrected")
        if isinstance(unc, str):
            ecc.unmeasured.append(f"{label(r)}: uncorrectable ECC not measured: {unc}")
        elif unc:
            ecc.value += unc
            ecc.findings.append(f"{label(r)}: {unc} new uncorrectable ECC error(s) during the soak")
        if isinstance(cor, int) and cor:
            ecc.notes.append(f"{label(r)}: {cor} new correctable ECC error(s) (corrected; not counted)")
        remapped = _delta(n["before"], n["after"], "remapped_rows")
        if isinstance(remapped, str):
            rows.unmeasured.append(f"{label(r)}: remapped rows not measured: {remapped}")
        elif remapped:
            rows.value += remapped
            rows.findings.append(f"{label(r)}: {remapped} row(s) remapped during the soak")
        after = n["after"]
        if not unanswered(after):
            flags = [k for k in ("remap_pending", "remap_failure") if after[k] is True]  # type: ignore[literal-required]
            if flags:
                rows.value += len(flags)
                rows.findings.append(f"{label(r)}: after the soak: {', '.join(flags)}")
    return _none_measured(ecc, result), _none_measured(rows, result)


def xid_new(result: SoakResult) -> Figure:
    fig = Figure("soak.xid_new", "events")
    if not _gpu_only(fig, result):
        return fig
    for r, n in _nvml(result):
        xids = n["xids"]
        if unanswered(xids):
            fig.unmeasured.append(f"{label(r)}: XIDs not watched: {xids['not_measured']}")
            continue
        if xids:
            fig.value += len(xids)
            first = xids[0]
            fig.findings.append(f"{label(r)}: {len(xids)} XID event(s); first XID {first['xid']} at {first['t']:.0f} s")
    return _none_measured(fig, result)


def first_set(samples: Sequence[Sample], reasons: Sequence[str]) -> tuple[float, str] | None:
    """The time of the first sample with one of ``reasons`` set, and which."""
    for s in samples:
        hit = [e for e in s["events"] if e in reasons]
        if hit:
            return s["t"], hit[0]
    return None


def event_shares(samples: Sequence[Sample]) -> dict[str, float]:
    """Each clock-event reason's share of the samples."""
    if not samples:
        return {}
    names = {e for s in samples for e in s["events"]}
    return {n: sum(n in s["events"] for s in samples) / len(samples) for n in sorted(names)}


def slowdowns(result: SoakResult) -> Figure:
    """GPUs whose clocks a thermal or hardware slowdown held back at any sample (``soak.slowdown_reasons``)."""
    fig = Figure("soak.slowdown_gpus", "GPUs")
    if not _gpu_only(fig, result):
        return fig
    reasons = result["config"]["slowdown_reasons"]
    for r, n in _nvml(result):
        if not n["samples"]:
            fig.unmeasured.append(f"{label(r)}: no NVML sample: {n['samples_reason']}")
            continue
        hit = first_set(n["samples"], reasons)
        if hit is not None:
            fig.value += 1
            fig.findings.append(
                f"{label(r)}: {hit[1]} from {hit[0]:.0f} s (clock events over the soak: "
                f"{clock_events_text(event_shares(n['samples']))})"
            )
    fig.notes.append(f"counted: {', '.join(reasons)}")
    return _none_measured(fig, result)


def _none_measured(fig: Figure, result: SoakResult) -> Figure:
    """A figure that some GPUs, or every GPU, could not measure keeps them in ``unmeasured``, which fails its
    test: on a GPU run (``topology.device: cuda``) an NVML count no GPU could read is unmeasured, never a
    skip that reads as a pass. (On the CPU, ``_gpu_only`` skipped it before: no NVML there.)"""
    if fig.unmeasured and len(fig.unmeasured) >= len(_nvml(result)) and result["device"] != "cuda":
        fig.skip = "not measured on any GPU:\n" + "\n".join(fig.unmeasured)
    elif fig.unmeasured and len(fig.unmeasured) >= len(_nvml(result)):
        fig.unmeasured.insert(0, "not measured on any GPU of this GPU run:")
    return fig


# ---- speed -----------------------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def sustained(windows: Sequence[Window]) -> float | None:
    """A GPU's sustained TFLOP/s: the median of its windows."""
    return _median([w["tflops"] for w in windows])


def early_late(windows: Sequence[Window], seconds: float) -> tuple[float | None, float | None]:
    """The median TFLOP/s of the first minute's windows and of the last minute's (of each half when the soak
    is under two minutes long)."""
    span = min(EARLY_S, seconds / 2)
    first = [w["tflops"] for w in windows if w["t"] < span]
    last = [w["tflops"] for w in windows if w["t"] >= seconds - span]
    return _median(first), _median(last)


@dataclass(frozen=True)
class Speed:
    rank: RankSoak
    tflops: float
    median: float  # of the cluster, or of the rank's node (``soak.median_of``)
    node_median: float
    cluster_median: float

    @property
    def below(self) -> float:
        return max(0.0, (self.median - self.tflops) / self.median) if self.median > 0 else 0.0


def speeds(result: SoakResult, dtype: str) -> list[Speed]:
    """Every rank that ran ``dtype`` against the median (of its model), worst first."""
    have: list[tuple[RankSoak, float]] = []
    for r in result["ranks"]:
        for g in _measured_gemms(r):
            value = sustained(g["windows"]) if g["dtype"] == dtype else None
            if value is not None:
                have.append((r, value))
    out = []
    for r, value in have:
        model = [v for o, v in have if o["model"] == r["model"]]
        node = [v for o, v in have if o["model"] == r["model"] and o["node_rank"] == r["node_rank"]]
        cluster, on_node = statistics.median(model), statistics.median(node)
        median = on_node if result["config"]["median_of"] == "node" else cluster
        out.append(Speed(r, value, median, on_node, cluster))
    return sorted(out, key=lambda s: s.below, reverse=True)


def speed_figures(result: SoakResult, dtype: str) -> list[Figure]:
    """``<dtype>_tflops_min``, ``_median``, ``_below_median`` (the largest shortfall, the GPU named) and
    ``_sag`` (the largest drop from the first minute to the last)."""
    stem = f"soak.{DTYPE_FIGURE[dtype]}"
    figs = [Figure(f"{stem}_{kind}", unit) for kind, unit in (("min", "TFLOP/s"), ("median", "TFLOP/s"))]
    below, sag = Figure(f"{stem}_below_median", "fraction"), Figure(f"{stem}_sag", "fraction")
    found = speeds(result, dtype)
    reasons = {
        g["not_measured"] for r in result["ranks"] for g in r["gemm"] if g["dtype"] == dtype and g["not_measured"]
    }
    if not found:
        why = "; ".join(sorted(reasons)) or f"no rank ran the {dtype} GEMM"
        for fig in (*figs, below, sag):
            fig.skip = why
        return [*figs, below, sag]
    values = [s.tflops for s in found]
    figs[0].value, figs[1].value = min(values), statistics.median(values)
    # the ranks that ran no such GEMM beside those that did: the min and median are over the others
    figs[0].unmeasured = [
        f"{label(r)}: {g['not_measured']}"
        for r in result["ranks"]
        for g in r["gemm"]
        if g["dtype"] == dtype and g["not_measured"]
    ]
    slowest = min(found, key=lambda s: s.tflops)
    figs[0].findings.append(f"slowest: {label(slowest.rank)} {fmt(slowest.tflops)} TFLOP/s")
    worst = found[0]
    below.value = worst.below
    scope = "its node's median" if result["config"]["median_of"] == "node" else "the median"
    below.findings = [
        f"{label(s.rank)} {fmt(s.tflops)} TFLOP/s, {s.below:.0%} under {scope} {fmt(s.median)}"
        for s in found
        if s.below
    ][:5]
    for s in found:
        first, last = early_late(_windows_of(s.rank, dtype), s.rank["seconds"])
        if first and last is not None and first > 0:
            drop = max(0.0, (first - last) / first)
            if drop > sag.value:
                sag.value = drop
                sag.findings = [f"{label(s.rank)}: {fmt(first)} TFLOP/s at the start, {fmt(last)} at the end"]
    return [*figs, below, sag]


def _windows_of(r: RankSoak, dtype: str) -> list[Window]:
    return next((g["windows"] for g in r["gemm"] if g["dtype"] == dtype), [])


# ---- steady state ----------------------------------------------------------------------------------------


def steady(samples: Sequence[Sample], key: Literal["power_w", "temp_c", "mem_temp_c", "sm_mhz"]) -> float | None:
    """The median of a sampled value over the soak's second half: its steady state."""
    if not samples:
        return None
    end = samples[-1]["t"]
    values = [float(v) for s in samples if s["t"] >= end / 2 and (v := s[key]) is not None]
    return _median(values)


def steady_figures(result: SoakResult) -> list[Figure]:
    """The hottest GPU's steady temperature and memory temperature, the highest steady power: recorded."""
    out = []
    for key, metric, unit in (
        ("temp_c", "soak.temperature_c_max", "°C"),
        ("mem_temp_c", "soak.memory_temperature_c_max", "°C"),
        ("power_w", "soak.power_w_max", "W"),
    ):
        fig = Figure(metric, unit)
        if _gpu_only(fig, result):
            found = [(r, v) for r, n in _nvml(result) if (v := steady(n["samples"], key)) is not None]  # type: ignore[arg-type]
            if found:
                r, fig.value = max(found, key=lambda f: f[1])
                fig.findings.append(f"highest: {label(r)}")
            else:
                fig.skip = f"NVML gave no {key} sample"
        out.append(fig)
    return out


# ---- the table -------------------------------------------------------------------------------------------


class GpuLine(TypedDict):
    """One rank's figures, for the evidence's table and the report."""

    gpu: str
    tflops: dict[str, float | None]  # dtype -> sustained
    first_minute: dict[str, float | None]
    last_minute: dict[str, float | None]
    below_node_median: dict[str, float]
    below_cluster_median: dict[str, float]
    steady_temp_c: float | None
    steady_mem_temp_c: float | None
    steady_power_w: float | None
    steady_sm_mhz: float | None
    first_slowdown_s: float | None  # the first sample with a reason of ``slowdown_reasons`` set
    first_power_cap_s: float | None  # the first with sw_power_cap: the GEMM at the power limit
    clock_events: dict[str, float]


def table(result: SoakResult) -> list[GpuLine]:
    per_dtype = {dtype: {s.rank["rank"]: s for s in speeds(result, dtype)} for dtype in DTYPE_FIGURE}
    lines = []
    for r in sorted(result["ranks"], key=lambda r: r["rank"]):
        samples = r["nvml"]["samples"] if r["nvml"] is not None else []
        mine = {d: found[r["rank"]] for d, found in per_dtype.items() if r["rank"] in found}
        early = {d: early_late(_windows_of(r, d), r["seconds"]) for d in mine}
        slow = first_set(samples, result["config"]["slowdown_reasons"])
        cap = first_set(samples, ["sw_power_cap"])
        lines.append(
            GpuLine(
                gpu=label(r),
                tflops={d: s.tflops for d, s in mine.items()},
                first_minute={d: e[0] for d, e in early.items()},
                last_minute={d: e[1] for d, e in early.items()},
                below_node_median={d: _under(s.tflops, s.node_median) for d, s in mine.items()},
                below_cluster_median={d: _under(s.tflops, s.cluster_median) for d, s in mine.items()},
                steady_temp_c=steady(samples, "temp_c"),
                steady_mem_temp_c=steady(samples, "mem_temp_c"),
                steady_power_w=steady(samples, "power_w"),
                steady_sm_mhz=steady(samples, "sm_mhz"),
                first_slowdown_s=slow[0] if slow else None,
                first_power_cap_s=cap[0] if cap else None,
                clock_events=event_shares(samples),
            )
        )
    return lines


def _under(value: float, median: float) -> float:
    return max(0.0, (median - value) / median) if median > 0 else 0.0


def counts(result: SoakResult) -> list[Figure]:
    """The correctness counts, each 0 on a healthy cluster."""
    ecc, rows = ecc_new(result)
    return [
        gemm_wrong(result),
        gemm_disagreeing(result),
        gemm_reference(result),
        *memory_and_allreduce(result),
        ecc,
        rows,
        xid_new(result),
        slowdowns(result),
    ]
