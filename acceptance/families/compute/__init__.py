"""Per-GPU figures: which GPU measured what, the median it is judged by, and the GPUs furthest under it.

The figure people need from a per-GPU test is which GPU is slow, not the average: every row carries its
host, GPU index and UUID, and a shortfall is reported as one line naming the GPU.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from acceptance.families.answers import clock_events_text
from acceptance.families.compute.report import REPORT
from acceptance.families.gpu_users import ForeignSeen, PcieLow, XidSeen, gpu_fault_text, seen_text
from acceptance.json_types import JSONObject
from acceptance.numbers import fmt, spread
from acceptance.schema.bounds import Threshold
from acceptance.schema.dtypes import DTYPE_NAMES
from acceptance.schema.family import GPU_ONLY, Behaviour, Family, Remeasure, Result, Shapes
from acceptance.schema.fields import PositiveInt, Size, Strict
from acceptance.schema.figure import Figure
from acceptance.schema.floors import HardwareFloor, NodePaths, floor
from acceptance.schema.initial import Initial, InitialSetup
from acceptance.schema.noise import Noise, at, combined, items, log_noise, results
from acceptance.schema.stored import StoredRun


class Compute(Strict):
    """Per-GPU speed, every GPU at once; the slow one named against the median."""

    matmul_size: PositiveInt = 8192  # m = n = k
    matmul_dtype: Literal[DTYPE_NAMES] = "bfloat16"  # type: ignore[valid-type]
    matmul_iters: PositiveInt = 100
    # and at least this long: under the power cap the clocks swing with a period of about 1 s (an H100 at
    # 700 W: 1,125-1,425 MHz, 607-713 TFLOP/s; docs/measurements.md, findings), so a 0.15 s loop reads its phase
    matmul_min_s: Annotated[float, Field(ge=0, le=60)] = 2.0
    fp8: bool = True  # also an fp8 matmul (torch._scaled_mm) where the GPU has it (compute capability >= 8.9)
    copy_size: Size = "2G"  # bytes read per device copy; bytes read + written count toward GB/s
    copy_iters: PositiveInt = 50
    host_copy_size: Size = "1G"  # pinned host buffer per direction
    host_copy_iters: PositiveInt = 10
    # together: every GPU of a node at once (shares the host's root complex); one_at_a_time: each link alone
    host_links: Literal["together", "one_at_a_time"] = "together"
    warmup_iters: Annotated[int, Field(ge=0)] = 10
    tolerance: Annotated[float, Field(ge=0, le=1)] = 0.10  # largest shortfall of one GPU under the median
    median_of: Literal["cluster", "node"] = "cluster"
    duration_s: Annotated[float, Field(ge=0)] = 0  # burn-in with a result check across GPUs; 0: off
    seed: int = 1234
    # a figure under its bound (or a GPU past the tolerance) is measured again this many times before it
    # stands: a shared host's neighbours can hold the host links down for seconds (``REMEASURE``)
    remeasure: Annotated[int, Field(ge=0, le=3)] = 1


class ComputeConfig(TypedDict):
    """The compute probe's section of the profile; ``figures`` where a re-measure asks for some only."""

    matmul_size: int
    matmul_dtype: str
    matmul_iters: int
    matmul_min_s: float
    fp8: bool
    copy_size: str
    copy_iters: int
    host_copy_size: str
    host_copy_iters: int
    host_links: str  # together or one_at_a_time
    warmup_iters: int
    tolerance: float
    median_of: str  # cluster or node
    duration_s: float
    seed: int
    remeasure: int
    figures: NotRequired[list[str]]


class ClockEvents(TypedDict):
    """The clock-event reasons sampled while a figure was timed: each reason's share of the samples, or None
    with the reason they could not be sampled."""

    clock_events: dict[str, float] | None
    clock_events_reason: str | None
    foreign: NotRequired[list[ForeignSeen]]  # processes not of this run on the GPU meanwhile: the cause
    pcie_low: NotRequired[PcieLow]  # the GPU's PCIe link below its maximum meanwhile
    xids: NotRequired[list[XidSeen]]  # critical XID events meanwhile


class Burnin(TypedDict):
    digest: str  # sha256 of the first result
    calls: int
    calls_differing: int  # results that differ from the first
    seconds: float
    tflops: float


class GpuRow(TypedDict):
    """One rank's row: who it is and what it measured. The figures of FIGURES are keys of their own where
    measured (floats), and under ``not_measured`` with the reason where not."""

    host: str
    node_rank: int
    rank: int
    gpu: int | None  # None on the CPU path
    uuid: str | None
    name: NotRequired[str]
    not_measured: dict[str, str]
    matmul_tflops: NotRequired[float]
    matmul_fp8_tflops: NotRequired[float]
    copy_gbps: NotRequired[float]
    h2d_gbps: NotRequired[float]
    d2h_gbps: NotRequired[float]
    clocks: dict[str, ClockEvents]
    windows: dict[str, list[float]]  # each timed window's figure
    burnin: NotRequired[Burnin]


class Summary(TypedDict):
    """Cluster min / median / max of one figure and who is slowest."""

    min: float
    median: float
    max: float
    count: int
    slowest: str
    slowest_clocks: str
    slowest_windows: list[float]
    window_spread_max: float
    window_spread_gpu: str


class BurninVerdict(TypedDict):
    reference: str | None
    disagreeing: list[str]
    first: str | None
    majority: NotRequired[bool]
    calls: NotRequired[dict[str, int]]


class ComputeResult(TypedDict):
    rows: list[GpuRow]
    summary: dict[str, Summary | None]
    not_measured: dict[str, list[str]]
    burnin: BurninVerdict | None
    config: ComputeConfig
    software: dict[str, str | None]


# a row of figures: a GPU's (GpuRow), or a node's (storage.NodeRate); read by the figure's name
Row = Mapping[str, Any]
R = TypeVar("R", bound=Row)

FigureName = Literal["matmul_tflops", "matmul_fp8_tflops", "copy_gbps", "h2d_gbps", "d2h_gbps"]
HOST_LINK_FIGURES: tuple[FigureName, ...] = ("h2d_gbps", "d2h_gbps")  # the figures the PCIe link carries
# figure -> (what it is, unit); the keys are the rows' field names and the metric names' stems
FIGURES: dict[str, tuple[str, str]] = {
    "matmul_tflops": ("matmul", "TFLOP/s"),
    "matmul_fp8_tflops": ("fp8 matmul", "TFLOP/s"),
    "copy_gbps": ("device copy", "GB/s"),
    "h2d_gbps": ("host-to-device", "GB/s"),
    "d2h_gbps": ("device-to-host", "GB/s"),
}


def label(row: Row) -> str:
    """``gpu-node-1 GPU 5 (GPU-3f2a...)``, or ``host rank 3 (cpu)`` on the CPU path."""
    if row.get("gpu") is None:
        return f"{row['host']} rank {row['rank']} (cpu)"
    uuid = row.get("uuid")
    return f"{row['host']} GPU {row['gpu']} ({uuid[:8]}...)" if uuid else f"{row['host']} GPU {row['gpu']}"


def clocks(row: Row, figure: str) -> str:
    """What held this GPU's clocks back while ``figure`` was timed (``clock events while timed: sw_power_cap
    100%``), why that is not known, or "" for a row with no record of it."""
    found = (row.get("clocks") or {}).get(figure)
    if not found:
        return ""
    # the PCIe link carries the host-link figures only: during a GPU-bound figure it idles, and may train down
    pcie = found.get("pcie_low") if figure in HOST_LINK_FIGURES else None
    causes = [gpu_fault_text(pcie, found.get("xids") or []), seen_text(found.get("foreign") or [])]
    if found.get("clock_events") is None:
        causes.append(f"clock events not sampled: {found.get('clock_events_reason')}")
    else:
        causes.append(f"clock events while timed: {clock_events_text(found['clock_events'])}")
    return "; ".join(c for c in causes if c)


def measured_rows(rows: Sequence[R], figure: str) -> list[R]:
    """The rows that carry a number for ``figure``."""
    return [r for r in rows if isinstance(r.get(figure), (int, float))]


def summary(rows: Sequence[Row], figure: str) -> Summary | None:
    """Cluster min / median / max of one figure and who is slowest; None when no rank measured it."""
    have = measured_rows(rows, figure)
    if not have:
        return None
    values = [float(r[figure]) for r in have]
    slowest = min(have, key=lambda r: float(r[figure]))
    unsteady = max(have, key=lambda r: window_spread(r, figure))
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "count": len(values),
        "slowest": label(slowest),
        "slowest_clocks": clocks(slowest, figure),
        "slowest_windows": windows(slowest, figure),
        # the GPU whose timed windows spread furthest: (max - min) / its figure
        "window_spread_max": window_spread(unsteady, figure),
        "window_spread_gpu": label(unsteady),
    }


def windows(row: Row, figure: str) -> list[float]:
    """The figure of each timed window on this GPU (its figure is their median); empty in older evidence."""
    return [float(v) for v in (row.get("windows") or {}).get(figure, [])]


def window_spread(row: Row, figure: str) -> float:
    """(max - min) / median of this GPU's timed windows; 0 with fewer than two."""
    return spread(windows(row, figure))


def not_measured(rows: Sequence[Row], figure: str) -> list[str]:
    """Why ``figure`` is missing, one line per reason, naming the ranks it applies to."""
    by_reason: dict[str, list[str]] = {}
    for r in rows:
        if not isinstance(r.get(figure), (int, float)):
            by_reason.setdefault(r.get("not_measured", {}).get(figure, "no figure"), []).append(label(r))
    return [f"{reason} ({', '.join(labels)})" for reason, labels in by_reason.items()]


def partly_measured(rows: Sequence[Row], figure: str) -> str | None:
    """A failure message when some GPUs measured ``figure`` and others did not, naming those and why.

    The min, median and tolerance are computed over the GPUs that measured; a GPU that could not (out of
    memory, a failed kernel) would otherwise vanish from them and the figure would pass without it. None
    when every GPU measured it, or none did (then the figure does not apply here: the test skips).
    """
    have = measured_rows(rows, figure)
    if not have or len(have) == len(rows):
        return None
    missing = not_measured(rows, figure)
    return f"{figure}: measured on {len(have)} of {len(rows)} GPUs, not on these:\n  " + "\n  ".join(missing)


@dataclass(frozen=True)
class Shortfall:
    row: Row
    value: float
    median: float
    scope: str  # "the median" or "the median of node HOST"

    @property
    def fraction(self) -> float:
        """How far under the median, 0.22 = 22%; 0 at or above it."""
        return max(0.0, (self.median - self.value) / self.median) if self.median > 0 else 0.0


def shortfalls(rows: Sequence[Row], figure: str, median_of: str = "cluster") -> list[Shortfall]:
    """Every measured GPU against the median of the cluster (or of its own node), worst first."""
    have = measured_rows(rows, figure)
    groups: dict[Hashable, list[Row]] = {}
    for r in have:
        groups.setdefault(r["node_rank"] if median_of == "node" else None, []).append(r)
    out = []
    for key, members in groups.items():
        median = statistics.median(float(r[figure]) for r in members)
        scope = "the median" if key is None else f"the median of node {members[0]['host']}"
        out += [Shortfall(r, float(r[figure]), median, scope) for r in members]
    return sorted(out, key=lambda s: s.fraction, reverse=True)


def describe(short: Shortfall, figure: str) -> str:
    """``gpu-node-1 GPU 5 (GPU-3f2a...) matmul 611 TFLOP/s, 22% under the median 784 (clock events ...)``."""
    what, unit = FIGURES[figure]
    seen = clocks(short.row, figure)
    return (
        f"{label(short.row)} {what} {fmt(short.value)} {unit}, "
        f"{short.fraction:.0%} under {short.scope} {fmt(short.median)}" + (f" ({seen})" if seen else "")
    )


def burnin_verdict(rows: Sequence[Row]) -> BurninVerdict:
    """Which GPUs computed something else than the others from the same seed, in rank order.

    The reference answer is the one most GPUs agree on; without a strict majority (two GPUs that
    differ) it is rank 0's, and the others are named against it.
    """
    ran = [r for r in rows if r.get("burnin")]
    if not ran:
        return {"reference": None, "disagreeing": [], "first": None}
    digests = Counter(r["burnin"]["digest"] for r in ran)
    top, votes = digests.most_common(1)[0]
    reference = top if votes * 2 > len(ran) else ran[0]["burnin"]["digest"]
    disagreeing = []
    for r in sorted(ran, key=lambda r: r["rank"]):
        b = r["burnin"]
        why = []
        if b["digest"] != reference:
            why.append(f"result digest {b['digest'][:12]} differs from the reference {reference[:12]}")
        if b["calls_differing"]:
            why.append(f"{b['calls_differing']} of {b['calls']} repeated results differ from its first")
        if why:
            disagreeing.append(f"{label(r)}: {'; '.join(why)}")
    return {
        "reference": reference,
        "majority": votes * 2 > len(ran),
        "disagreeing": disagreeing,
        "first": disagreeing[0] if disagreeing else None,
        "calls": {label(r): r["burnin"]["calls"] for r in ran},
    }


def _summary_text(found: Summary, spread_of_all: bool) -> str:
    """The slowest GPU with its clocks and timed windows (``spread_of_all``: the spread over every GPU instead)."""
    if spread_of_all:
        text = f"min {fmt(found['min'])}, max {fmt(found['max'])} over {found['count']} GPUs"
        text += f"; slowest GPU's {found['slowest_clocks']}" if found["slowest_clocks"] else ""
        if found["window_spread_max"]:
            widest, where = found["window_spread_max"], found["window_spread_gpu"]
            text += f"; widest spread of one GPU's timed windows {widest:.1%} ({where})"
        return text
    text = f"slowest: {found['slowest']}" + (f" ({found['slowest_clocks']})" if found["slowest_clocks"] else "")
    if found["slowest_windows"]:
        text += f"; its timed windows {fmt(min(found['slowest_windows']))}-{fmt(max(found['slowest_windows']))}"
    return text


def figures_of(result: Result, figure: str, median_of: str, limit: float) -> tuple[Figure, Figure, Figure]:
    """``figure``'s slowest GPU, median, and shortfall under the median (every GPU further under it than
    ``limit`` named, else the furthest), each with its earlier readings where it was measured again. They skip
    where no GPU measured the figure; the min and median are over the GPUs that did, so those that did not
    fail them (``unmeasured``)."""
    unit = FIGURES[figure][1]
    out = (
        Figure(f"compute.{figure}_min", unit),
        Figure(f"compute.{figure}_median", unit),
        Figure(f"compute.{figure}_below_median", "fraction"),
    )
    found = result["summary"].get(figure)
    if found is None:
        for fig in out:
            fig.skip = f"{figure} not measured: " + "; ".join(result["not_measured"].get(figure, []))
        return out
    rows = result["rows"]
    shorts = shortfalls(rows, figure, median_of)
    off = [describe(s, figure) for s in shorts if s.fraction > limit] or [describe(shorts[0], figure)]
    values = (found["min"], found["median"], shorts[0].fraction)
    texts = (_summary_text(found, False), _summary_text(found, True), "\n".join(off))
    unmeasured, earlier = partly_measured(rows, figure), earlier_text(result, figure)
    for fig, value, text in zip(out, values, texts, strict=True):
        fig.value = value
        fig.findings.append("; ".join(part for part in (text, earlier) if part))
        fig.unmeasured += [unmeasured] if unmeasured else []
    return out


def missing_ranks(result: Result, world_size: int) -> Figure:
    """Ranks of the run that reported no figures: the min and median are over the others."""
    reported = len(result["rows"])
    fig = Figure("compute.missing_ranks", "ranks", world_size - reported)
    if fig.value:
        fig.findings.append(f"{reported} ranks reported, {world_size} ran")
    return fig


def burnin_figure(result: Result) -> Figure:
    """GPUs whose burn-in results differ from the others', the first one that does named first."""
    fig = Figure("compute.burnin_disagreeing_gpus", "GPUs")
    verdict = result["burnin"]
    if verdict is None:
        fig.skip = "burn-in off: set compute.duration_s (seconds) to run it"
        return fig
    fig.value = len(verdict["disagreeing"])
    fig.findings = [
        *([f"first GPU that disagrees: {verdict['first']}"] if verdict["first"] else []),
        *verdict["disagreeing"],
    ]
    return fig


# Measured again before it stands. A shared host's other tenants can hold its links down for seconds: on a fresh
# 2x H200 machine the host links read 43.8 GB/s in one suite and 53.0 a minute later; sixteen rounds of the same
# copies on another read 48.2-55.3, with or without processes importing beside them (docs/measurements.md,
# findings). So a figure under its bound, or a GPU further under the median than the tolerance allows, is
# measured again (``compute.remeasure`` times, every GPU at once as the first time), and the last reading is the
# one judged. A figure that holds its bound but is worse than ``--cluster-baseline`` beyond the tolerance would
# fail as well, and is measured again too: the run's judge decides both. A link that is really slow reads low
# every time and still fails, with every reading in its message; one that was only crowded passes, and the
# evidence keeps what it read first (``per_gpu[].earlier``, ``remeasured``).
ROW_PARTS = ("windows", "clocks", "not_measured")  # a row's per-figure records, replaced with the figure


def low_figures(result: Result, fails: Callable[[str, float], bool], section: Compute) -> list[str]:
    """The figures a test of ``test_compute`` would fail now, as the run's judge (``fails``) says: the slowest
    GPU or the median under its bound, or one GPU further under the median than the tolerance, or any of them
    worse than the --cluster-baseline run. A known issue (``xfail``) is not measured again."""
    low: list[str] = []
    for figure in FIGURES:
        found = result["summary"].get(figure)
        if found is None or partly_measured(result["rows"], figure):  # that fails whatever it reads
            continue
        shorts = shortfalls(result["rows"], figure, section.median_of)
        bounded = [fails(f"compute.{figure}_{stat}", float(found[stat])) for stat in ("min", "median")]
        within = fails(f"compute.{figure}_below_median", shorts[0].fraction)
        if any(bounded) or within:
            low.append(figure)
    return low


def _gpu(row: Row) -> tuple[Any, ...]:
    """A GPU by its UUID (a job of its own may give the ranks out in another order), a CPU rank by host and rank."""
    return (row["uuid"],) if row.get("uuid") else (row.get("host"), row["rank"])


def again_spec(section: JSONObject, figures: list[str]) -> JSONObject:
    """The probe's section for a re-measure: those figures alone, and no second burn-in."""
    return {**section, "figures": list(figures), "duration_s": 0}


def merged(first: Result, again: Result, figures: list[str]) -> Result:
    """``first`` with ``figures`` as ``again`` measured them, each row keeping its earlier readings.

    A figure the re-measure measured on fewer GPUs than the first time keeps the first readings, and the
    reasons go into ``remeasured``: a GPU that could not measure it again must not turn a failure into a
    pass or a skip."""
    fresh = {_gpu(row): row for row in again["rows"]}
    now = [fresh.get(_gpu(row), {}) for row in first["rows"]]
    taken = [f for f in figures if len(measured_rows(now, f)) >= len(measured_rows(first["rows"], f))]
    rows = []
    for row, new_row in zip(first["rows"], now, strict=True):
        new, earlier = dict(row), {k: list(v) for k, v in (row.get("earlier") or {}).items()}
        for part in ROW_PARTS:
            new[part] = {k: v for k, v in (row.get(part) or {}).items() if k not in taken}
            new[part].update({k: v for k, v in (new_row.get(part) or {}).items() if k in taken})
        for figure in taken:
            earlier.setdefault(figure, []).append(row.get(figure))
            new[figure] = new_row.get(figure)
        new["earlier"] = earlier
        rows.append(new)
    out = dict(first, rows=rows)
    out["summary"] = {**first["summary"], **{f: summary(rows, f) for f in taken}}
    out["not_measured"] = {**first["not_measured"], **{f: not_measured(rows, f) for f in taken}}
    record = dict(first.get("remeasured") or {})
    for figure in figures:
        entry = record.setdefault(figure, {"earlier_min": []})
        if figure in taken:
            entry["earlier_min"].append((first["summary"].get(figure) or {}).get("min"))
        else:
            entry["not_measured_again"] = not_measured(now, figure)
    out["remeasured"] = record
    return out


def earlier_text(result: Result, figure: str) -> str:
    """``measured again: the slowest GPU read 43.8 first`` for a figure measured more than once, else ""."""
    found = (result.get("remeasured") or {}).get(figure)
    if not found:
        return ""
    if found.get("not_measured_again"):
        why = "; ".join(found["not_measured_again"])
        return f"measured again, but not on every GPU ({why}): the readings before stand"
    readings = ", then ".join(fmt(v) for v in found["earlier_min"] if v is not None)
    return f"measured {len(found['earlier_min']) + 1} times: the slowest GPU read {readings} before this"


def _ratio(low: object, middle: object) -> float | None:
    if isinstance(low, (int, float)) and isinstance(middle, (int, float)) and middle > 0 and low >= 0:
        return min(float(low) / float(middle), 1.0)
    return None


def _noise_of(evidence: StoredRun, figure: str, statistic: str) -> Noise | None:
    """``_min``: the slowest GPU's windows; ``_median``: every GPU's windows (the GPUs differ, and the
    median over them moves with that too); ``_below_median``: both, in points."""
    for result in results(evidence, "compute"):
        found = at(result, "summary", figure)
        slowest = items(at(found, "slowest_windows"))
        every = [w for row in items(result.get("rows")) for w in items(at(row, "windows", figure))]
        low = log_noise(slowest, f"the slowest GPU's {len(slowest)} timed windows") if slowest else None
        middle = log_noise(every, f"{len(every)} timed windows of every GPU") if every else None
        if statistic == "min":
            return low
        if statistic == "median":
            return middle
        both = combined(low, middle)
        ratio = _ratio(at(found, "min"), at(found, "median"))
        if both is None or ratio is None:
            return None
        # 1 - min/median moves by min/median x the relative change of the ratio: that many points
        return Noise(ratio * both.standard_error, both.readings, both.source)
    return None


def noise(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    """The noise of ``compute.<figure>_<min|median|below_median>`` from the GPUs' timed windows."""
    figure, _, statistic = parts[0].rpartition("_") if len(parts) == 1 and not size else ("", "", "")
    if statistic == "median" and figure.endswith("_below"):
        return _noise_of(evidence, figure.removesuffix("_below"), "below_median")
    return _noise_of(evidence, figure, statistic) if statistic in ("min", "median") else None


REMEASURE = Remeasure[Compute](lambda s: s.remeasure, low_figures, again_spec, merged)


_PER_GPU = Shapes[Compute]("compute.<figure>_<min|median|below_median>")


def _tolerance(s: Compute) -> Threshold:
    return Threshold(max=s.tolerance, source=f"compute.tolerance (median of the {s.median_of})")


_COMPUTE_FIGURES = r"(matmul_tflops|copy_gbps)"
# the CPU path has no fp8 tensor cores and no device memory to copy to: "not applicable on the CPU"
_GPU_COMPUTE_FIGURES = r"(matmul_fp8_tflops|h2d_gbps|d2h_gbps)"
# The host links' floor from the node's own links (``Behaviour.floors``)
HOST_FRACTION = 0.4
HOST_WHY = (
    "healthy Gen5 x16 hosts move 49-55 GB/s (2x H200, 0.78-0.87) and 31-40 GB/s with four GPUs copying at "
    "once (4x H200, 0.49); a link at half its width or generation fails"
)


def floors(paths: NodePaths) -> list[HardwareFloor]:
    """``compute.{h2d,d2h}_gbps_min``: the slowest GPU's PCIe link at the generation and width it can reach."""
    if paths.host is None:
        return []
    return [floor(f"compute.{m}_gbps_min", paths.host, HOST_FRACTION, HOST_WHY, "host") for m in ("h2d", "d2h")]


def initial_metrics(figure: str, _holds_at: Callable[[int], bool], _setup: InitialSetup) -> list[str]:
    """A reference row bounds the per-GPU figure on the slowest GPU of the run (its ``_min``)."""
    return [f"{figure}_min"]


COMPUTE = Family(
    "compute",
    "per-GPU speed, every GPU at once: matmul, copies, host links, burn-in",
    Compute,
    (
        _PER_GPU.figure(rf"{_COMPUTE_FIGURES}_(min|median)", "higher"),
        _PER_GPU.figure(rf"{_COMPUTE_FIGURES}_below_median", "lower", scale="points", builtin=_tolerance),
        _PER_GPU.figure(rf"{_GPU_COMPUTE_FIGURES}_(min|median)", "higher", devices=GPU_ONLY),
        _PER_GPU.figure(
            rf"{_GPU_COMPUTE_FIGURES}_below_median", "lower", scale="points", devices=GPU_ONLY, builtin=_tolerance
        ),
        # ranks of the run that reported no figures: the min and median are over the others
        _PER_GPU.count(r"(missing_ranks)"),
        _PER_GPU.count(r"(burnin_disagreeing_gpus)"),
        _PER_GPU.figure(r"(wall_s)", "lower", scale="bound"),
    ),
    local=True,
    probes=("compute",),
    in_worker=("compute",),
    gpu_timed=True,
    lets_import=True,
    quick=True,
    behaviour=Behaviour(
        remeasure=REMEASURE, noise=noise, floors=floors, report=REPORT, initial=Initial(metrics=initial_metrics)
    ),
)
