"""The health rules: NVML answers of every node in, one figure per gate out.

Pure data in and out (no NVML, no torch, no pytest), so the rules are judged on recorded answers in
unit tests exactly as on a live node. Each figure names every GPU that is off; an answer NVML could
not give stays "not measured" with its reason and is never counted as healthy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field
from typing_extensions import NotRequired, TypedDict

from acceptance.families import nvlink_domain
from acceptance.families.answers import NOT_MEASURED, NotMeasured, gpu_label, is_measured, unanswered
from acceptance.families.health.initial import INITIAL
from acceptance.families.health.report import REPORT
from acceptance.families.inventory import NodeInventory as NodeInventory  # the preflight's answers, as tests name them
from acceptance.families.inventory import NvmlListed as NvmlListed
from acceptance.families.inventory import TorchDevice as TorchDevice
from acceptance.families.inventory import TorchView as TorchView
from acceptance.families.inventory import same_model
from acceptance.families.nvlink_domain import FabricAnswer
from acceptance.schema.bounds import Threshold
from acceptance.schema.family import GPU_ONLY, Behaviour, Family, Metric, Shapes
from acceptance.schema.fields import PositiveInt, Strict, ThrottleReason
from acceptance.schema.figure import Figure
from acceptance.schema.topology import topology_of


def _dotted_version(text: str) -> str:
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise ValueError(f"expected a dotted driver version like 550.54.15, got {text!r}")
    return text


class Health(Strict):
    """NVML gates per GPU. GPU count and model come from ``topology`` (gpus_per_node, gpu_model)."""

    min_driver: Annotated[str, AfterValidator(_dotted_version)] | None = None
    require_ecc: bool = True
    nvlink_links: Annotated[int, Field(ge=0)] | None = None  # active links per GPU; None: recorded, not gated
    pcie_gen: PositiveInt | None = None  # None: the generation the GPU and its slot can reach (NVML's max)
    pcie_width: PositiveInt | None = None  # None: the width the GPU and its slot can reach (NVML's max)
    # idle GPUs drop their PCIe link to Gen1 to save power: hold a copy running while the link is read
    pcie_under_load: bool = True
    throttle_reasons: list[ThrottleReason] = ["hw_slowdown", "hw_thermal", "hw_power_brake"]
    temperature_max_c: Annotated[float, Field(gt=0)] | None = None  # None: each GPU's own slowdown temperature
    # another process on the run's GPUs before it starts: foreign load (review: rerun once it is gone), or,
    # where a site holds a leftover process to be the node's fault, its configuration (drain the GPU)
    leftover_process: Literal["review", "drain"] = "review"


def _leftover_drains(s: Health) -> bool:
    return s.leftover_process == "drain"


_HEALTH = "health.<figure>"


def _nvlink_links(s: Health) -> Threshold | None:
    return None if s.nvlink_links is None else Threshold(min=s.nvlink_links, source="health.nvlink_links")


_HEALTH_COUNTS = (
    r"nvml_unavailable|driver_too_old|gpu_model_mismatch|ecc_disabled|ecc_uncorrectable_volatile"
    r"|ecc_uncorrectable_aggregate|retired_pages_pending|row_remap_failures|row_remap_pending|pcie_degraded"
    r"|throttled|nvlink_fabric_degraded"
)
_GATES = Shapes[Health](_HEALTH)
HEALTH = Family(
    "health",
    "NVML health of every GPU: count, model, driver, ECC, links, throttling",
    Health,
    (  # NVML on GPUs: the health module skips on a CPU profile
        _GATES.count(rf"({_HEALTH_COUNTS})", devices=GPU_ONLY),
        Metric[Health](r"(temperature_c_max|wall_s)", _HEALTH, "lower", scale="bound", devices=GPU_ONLY),
        Metric[Health](
            r"(nvlink_links_min)", _HEALTH, "higher", kind="correctness", devices=GPU_ONLY, builtin=_nvlink_links
        ),
        Metric[Health](r"(gpu_count)", _HEALTH, "none", kind="correctness", devices=GPU_ONLY),
    ),
    local=True,
    probes=("health",),
    in_worker=("health",),
    quick=True,
    behaviour=Behaviour(leftover_drains=_leftover_drains, report=REPORT, initial=INITIAL),
)


class HealthConfig(TypedDict):
    """The probe's ``health`` section (the profile's, as plain data)."""

    min_driver: str | None
    require_ecc: bool
    nvlink_links: int | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_under_load: bool
    throttle_reasons: list[str]
    temperature_max_c: float | None
    leftover_process: str  # the preflight's (review or drain); the probe does not read it


class PcieAnswers(TypedDict):
    gen: int | NotMeasured
    width: int | NotMeasured
    max_gen: int | NotMeasured
    max_width: int | NotMeasured


class RowRemap(TypedDict):
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class GpuIdentity(TypedDict):
    uuid: str | NotMeasured
    serial: str | NotMeasured
    pci_bus_id: str | NotMeasured
    name: str | NotMeasured
    memory_total_bytes: int | NotMeasured
    vbios: str | NotMeasured
    persistence_mode: bool | NotMeasured
    mig_mode: bool | NotMeasured


class GpuMemoryHealth(TypedDict):
    ecc_mode: bool | NotMeasured
    ecc_uncorrectable_volatile: int | NotMeasured
    ecc_uncorrectable_aggregate: int | NotMeasured
    retired_pages_pending: bool | NotMeasured
    row_remap: RowRemap | NotMeasured


class GpuAnswers(TypedDict):
    """NVML's answers for one GPU (``probes.nvml.read_gpu``); a GPU without a handle has its index and
    ``not_measured`` only."""

    index: int
    not_measured: NotRequired[str]
    pcie: NotRequired[PcieAnswers]
    uuid: NotRequired[str | NotMeasured]
    serial: NotRequired[str | NotMeasured]
    pci_bus_id: NotRequired[str | NotMeasured]
    name: NotRequired[str | NotMeasured]
    memory_total_bytes: NotRequired[int | NotMeasured]
    vbios: NotRequired[str | NotMeasured]
    persistence_mode: NotRequired[bool | NotMeasured]
    mig_mode: NotRequired[bool | NotMeasured]
    ecc_mode: NotRequired[bool | NotMeasured]
    ecc_uncorrectable_volatile: NotRequired[int | NotMeasured]
    ecc_uncorrectable_aggregate: NotRequired[int | NotMeasured]
    retired_pages_pending: NotRequired[bool | NotMeasured]
    row_remap: NotRequired[RowRemap | NotMeasured]
    nvlink_active: NotRequired[int | NotMeasured]
    fabric: NotRequired[FabricAnswer | NotMeasured]  # multi-node NVLink fabric info (families.nvlink_domain)
    clock_event_reasons: NotRequired[list[str] | NotMeasured]
    temperature_c: NotRequired[int | NotMeasured]
    slowdown_temperature_c: NotRequired[int | NotMeasured]


class NodeAnswers(TypedDict):
    """NVML's answers for one node (``probes.nvml.read_node``)."""

    driver_version: str | NotMeasured
    cuda_driver_version: str | NotMeasured
    gpu_count: int | NotMeasured
    gpus: list[GpuAnswers] | NotMeasured


class OutsideGpu(TypedDict):
    """A GPU of the node that is not the run's: recorded, never judged or drained."""

    index: int
    uuid: str | None
    name: str | None
    pci_bus_id: str | None


class NodeHealth(TypedDict):
    """One node's record in the health probe's result."""

    host: str
    node_rank: int
    nvml: NodeAnswers | NotMeasured
    # the node's GPUs that this job was not given (CUDA's view under the run's environment); absent: all are
    outside_allocation: NotRequired[list[OutsideGpu]]


class HealthResult(TypedDict):
    nodes: list[NodeHealth]
    pcie_under_load: bool
    load_copies: dict[int, int]  # rank -> host-to-device copies it kept going while the links were read


class InventoryRow(TypedDict):
    """One GPU in the evidence: identity, versions and modes; an unanswered field keeps its reason."""

    host: str
    driver_version: str | NotMeasured | None
    cuda_driver_version: str | NotMeasured | None
    index: int | None
    uuid: str | NotMeasured | None
    serial: str | NotMeasured | None
    pci_bus_id: str | NotMeasured | None
    name: str | NotMeasured | None
    memory_total_bytes: int | NotMeasured | None
    vbios: str | NotMeasured | None
    persistence_mode: bool | NotMeasured | None
    mig_mode: bool | NotMeasured | None
    ecc_mode: bool | NotMeasured | None
    pcie: PcieAnswers | None
    nvlink_active: int | NotMeasured | None


Nodes = Sequence[NodeHealth]
# reads one answer of a GPU; the answers differ in type from field to field, so the rules take them as they come
Read = Callable[[Mapping[str, object]], Any]


@dataclass(frozen=True)
class Expect:
    """What the profile says a node looks like."""

    gpus_per_node: int = 0
    gpu_model: str | None = None
    min_driver: str | None = None
    require_ecc: bool = True
    nvlink_links: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    throttle_reasons: tuple[str, ...] = ("hw_slowdown", "hw_thermal", "hw_power_brake")
    temperature_max_c: float | None = None

    @classmethod
    def from_profile(cls, model: object) -> Expect:
        h, topo = HEALTH.section_of(model), topology_of(model)
        same = ("min_driver", "require_ecc", "nvlink_links", "pcie_gen", "pcie_width", "temperature_max_c")
        return cls(
            gpus_per_node=topo.gpus_per_node,
            gpu_model=topo.gpu_model,
            throttle_reasons=tuple(h.throttle_reasons),
            **{name: getattr(h, name) for name in same},
        )


def _field(key: str) -> Read:
    def read(gpu: Mapping[str, object]) -> Any:
        return gpu.get(key, {NOT_MEASURED: f"{key}: not in NVML's answers"})

    return read


def _gpus(nodes: Nodes, fig: Figure) -> Iterator[tuple[str, NodeAnswers, GpuAnswers]]:
    """(host, node answers, GPU answers) for every GPU; a node or GPU NVML could not read is noted on ``fig``."""
    for node in nodes:
        host, answers = node["host"], node["nvml"]
        if unanswered(answers):
            fig.not_measured.append(f"{host}: {answers['not_measured']}")
            continue
        gpus = answers["gpus"]
        if unanswered(gpus):
            fig.not_measured.append(f"{host}: {gpus['not_measured']}")
            continue
        for gpu in gpus:
            if "not_measured" in gpu:
                fig.not_measured.append(f"{gpu_label(host, gpu)}: {gpu['not_measured']}")
            else:
                yield host, answers, gpu


def _answers(nodes: Nodes, fig: Figure, read: Read) -> Iterator[tuple[str, Any]]:
    """(GPU label, answer) for every GPU that answered; the others are noted on ``fig`` with the reason."""
    for host, _, gpu in _gpus(nodes, fig):
        answer = read(gpu)
        if is_measured(answer):
            yield gpu_label(host, gpu), answer
        else:
            fig.not_measured.append(f"{gpu_label(host, gpu)}: {answer[NOT_MEASURED]}")


Judge = Callable[[Any], "str | None"]


def _measured(fig: Figure, value: float | None) -> Figure:
    """``fig`` with its ``value``; None (no GPU or node could answer) skips it with the reasons: an answer
    NVML could not give is never a pass."""
    if value is None:
        fig.skip = fig.skip or f"{fig.metric} not measured: " + "; ".join(fig.not_measured)
    else:
        fig.value = value
    return fig


def _count_off(nodes: Nodes, fig: Figure, read: Read, judge: Judge) -> Figure:
    """Value = how many GPUs ``judge`` finds off (it says what is wrong, or returns None)."""
    measured = 0
    for label, answer in _answers(nodes, fig, read):
        measured += 1
        wrong = judge(answer)
        if wrong:
            fig.findings.append(f"{label}: {wrong}")
    return _measured(fig, len(fig.findings) if measured else None)


def _extreme(nodes: Nodes, fig: Figure, read: Read, lowest: bool) -> Figure:
    """Value = the lowest (or highest) answer over all GPUs; the GPUs past the bound are named."""
    values = [(float(answer), label) for label, answer in _answers(nodes, fig, read)]
    if not values:
        return _measured(fig, None)
    fig.value = (min if lowest else max)(v for v, _ in values)
    limit = None if fig.bound is None else fig.bound.min if lowest else fig.bound.max
    if limit is not None:
        off = [(v, label) for v, label in values if (v < limit if lowest else v > limit)]
        fig.findings += [f"{label}: {v:g} {fig.unit}" for v, label in off]
    return fig


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _per_node(nodes: Nodes, fig: Figure, key: str) -> Iterator[tuple[str, Any]]:
    """(host, answer) for a node-wide answer; a node that could not give it is noted on ``fig``."""
    for node in nodes:
        answers: Mapping[str, Any] = node["nvml"]
        answer: Any = answers.get(key) if is_measured(answers) else answers
        if is_measured(answer):
            yield node["host"], answer
        else:
            fig.not_measured.append(f"{node['host']}: {answer[NOT_MEASURED]}")


def allocated(answers: NodeAnswers, visible: Sequence[str] | None) -> tuple[NodeAnswers, list[OutsideGpu]]:
    """NVML's answers for the run's own GPUs, and the node's others. NVML lists every GPU of the node whatever
    the job was given; the job's are those CUDA shows under the run's environment (Slurm's GRES and
    Kubernetes' device plugin set CUDA_VISIBLE_DEVICES or mount only the job's devices), by UUID. ``visible``
    None: not known (no CUDA), every GPU is the run's. A GPU NVML cannot name (no UUID) is kept: judged,
    never passed over."""
    gpus = answers["gpus"]
    if visible is None or unanswered(gpus):
        return answers, []
    mine = set(visible)
    kept = [g for g in gpus if not isinstance(g.get("uuid"), str) or g.get("uuid") in mine]
    outside: list[OutsideGpu] = [
        {
            "index": g["index"],
            "uuid": _text_or_none(g.get("uuid")),
            "name": _text_or_none(g.get("name")),
            "pci_bus_id": _text_or_none(g.get("pci_bus_id")),
        }
        for g in gpus
        if g not in kept
    ]
    return {**answers, "gpus": kept, "gpu_count": len(kept)}, outside


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def outside_text(nodes: Nodes) -> str:
    """The GPUs outside the run's allocation, one line per node ("" when there are none)."""
    lines = [
        f"{n['host']}: not this run's (outside its allocation, not judged): "
        + ", ".join(f"GPU {g['index']} ({g['uuid'] or g['pci_bus_id'] or 'no UUID'})" for g in outside)
        for n in nodes
        if (outside := n.get("outside_allocation"))
    ]
    return "\n".join(lines)


def _node_figures(nodes: Nodes, expect: Expect) -> list[Figure]:
    unavailable = Figure("health.nvml_unavailable", "nodes")
    unavailable.findings = [f"{n['host']}: {nvml['not_measured']}" for n in nodes if unanswered(nvml := n["nvml"])]
    unavailable.value = len(unavailable.findings)
    want = expect.gpus_per_node
    count = Figure("health.gpu_count", "GPUs")
    if want:
        count.bound = Threshold(eq=want, source="topology.gpus_per_node")
    counts = list(_per_node(nodes, count, "gpu_count"))
    count.findings = [f"{host}: {n} GPUs, expected {want}" for host, n in counts if want and n != want]
    count.notes = [line for line in outside_text(nodes).splitlines() if line]
    # the figure is the node furthest from the profile, so one number can fail the gate
    _measured(count, max((n for _, n in counts), key=lambda n: abs(n - want), default=None))
    return [unavailable, count, _driver(nodes, expect)]


def _driver(nodes: Nodes, expect: Expect) -> Figure:
    fig = Figure("health.driver_too_old", "nodes")
    if expect.min_driver is None:
        fig.skip = "the profile sets no health.min_driver"
        return fig
    found = list(_per_node(nodes, fig, "driver_version"))
    fig.findings = [
        f"{host}: driver {version}, expected >= {expect.min_driver}"
        for host, version in found
        if _version(version) < _version(expect.min_driver)
    ]
    return _measured(fig, len(fig.findings) if found else None)


PCIE_KEYS = ("gen", "width", "max_gen", "max_width")


def _pcie_read(gpu: Mapping[str, object]) -> Any:
    link = _field("pcie")(gpu)
    if not is_measured(link):
        return link
    return next((link[k] for k in PCIE_KEYS if not is_measured(link[k])), link)


def _pcie_judge(expect: Expect) -> Judge:
    def judge(link: Mapping[str, int]) -> str | None:  # every part of the link measured (``_pcie_read``)
        gen, width = expect.pcie_gen or link["max_gen"], expect.pcie_width or link["max_width"]
        if link["gen"] < gen or link["width"] < width:
            return f"PCIe Gen{link['gen']} x{link['width']}, expected Gen{gen} x{width}"
        return None

    return judge


def _throttle_judge(expect: Expect) -> Judge:
    def judge(reasons: list[str]) -> str | None:
        active = sorted(set(expect.throttle_reasons) & set(reasons))
        return f"clocks held back by {', '.join(active)}" if active else None

    return judge


def _remap(key: str) -> Read:
    def read(gpu: Mapping[str, object]) -> Any:
        rows = _field("row_remap")(gpu)
        return rows[key] if is_measured(rows) else rows

    return read


def _flag(what: str) -> Judge:
    return lambda on: what if on else None


def _temperature(nodes: Nodes, expect: Expect) -> Figure:
    fig = Figure("health.temperature_c_max", "C")
    if expect.temperature_max_c is not None:
        fig.bound = Threshold(max=expect.temperature_max_c, source="health.temperature_max_c")
    else:
        scratch = Figure("", "")
        known = [float(t) for _, t in _answers(nodes, scratch, _field("slowdown_temperature_c"))]
        if known:
            fig.bound = Threshold(max=min(known), source="the GPUs' own slowdown temperature (NVML)")
    return _extreme(nodes, fig, _field("temperature_c"), lowest=False)


def _nvlink(nodes: Nodes, expect: Expect) -> Figure:
    fig = Figure("health.nvlink_links_min", "links")
    if expect.nvlink_links == 0:
        fig.skip = "the profile expects no NVLink (health.nvlink_links: 0)"
        return fig
    # the bound the judge holds it to (the metric's own, from health.nvlink_links), here too: the GPUs below it
    # are named by the rules, so a drain list names the GPU and not the node
    fig.bound = _nvlink_links(Health(nvlink_links=expect.nvlink_links))
    return _extreme(nodes, fig, _field("nvlink_active"), lowest=True)


def _fabric(nodes: Nodes) -> Figure:
    """The GPUs of a multi-node NVLink domain (GB200 NVL72) whose fabric state, registration or health mask is
    off, each named with its clique; skipped where no GPU is of such a fabric (NVML: not supported)."""
    fig = Figure("health.nvlink_fabric_degraded", "GPUs")
    answers = [(g, a) for g, a in _answers(nodes, fig, _field("fabric")) if nvlink_domain.in_fabric(a)]
    for gpu, answer in answers:
        wrong = nvlink_domain.problems(answer)
        if wrong:
            where = nvlink_domain.label(f"{answer['cluster_uuid']}/{answer['clique_id']}")
            fig.findings.append(f"{gpu} ({where}): {', '.join(wrong)}")
    if not answers and not fig.not_measured:
        fig.skip = "no GPU is of a multi-node NVLink fabric (NVML: fabric info not supported)"
        return fig
    return _measured(fig, len(fig.findings) if answers else None)


def _sum_errors(nodes: Nodes, key: str) -> Figure:
    """Value = uncorrectable errors summed over all GPUs; every GPU with any is named."""
    fig = Figure(f"health.{key}", "errors")
    counts = list(_answers(nodes, fig, _field(key)))
    fig.findings = [f"{label}: {n} uncorrectable ECC errors" for label, n in counts if n]
    return _measured(fig, sum(int(n) for _, n in counts) if counts else None)


def _gate(nodes: Nodes, metric: str, read: Read, judge: Judge) -> Figure:
    return _count_off(nodes, Figure(metric, "GPUs"), read, judge)


def _model(nodes: Nodes, expect: Expect) -> Figure:
    if expect.gpu_model is None:
        return Figure("health.gpu_model_mismatch", "GPUs", skip="the profile names no topology.gpu_model")
    want = expect.gpu_model
    return _gate(
        nodes,
        "health.gpu_model_mismatch",
        _field("name"),
        lambda name: None if same_model(name, want) else f"{name}, expected {want}",
    )


def _ecc(nodes: Nodes, expect: Expect) -> Figure:
    if not expect.require_ecc:
        return Figure("health.ecc_disabled", "GPUs", skip="the profile does not require ECC (health.require_ecc)")
    return _gate(nodes, "health.ecc_disabled", _field("ecc_mode"), lambda on: None if on else "ECC disabled")


def evaluate(nodes: Nodes, expect: Expect) -> list[Figure]:
    """One figure per gate, over every GPU of every node, in the order a person would look; a gate measured on
    some GPUs but not on others fails (``unmeasured``): the count over the GPUs that answered is no pass for
    those that did not."""
    figures = [
        *_node_figures(nodes, expect),
        _model(nodes, expect),
        _ecc(nodes, expect),
        _sum_errors(nodes, "ecc_uncorrectable_volatile"),
        _sum_errors(nodes, "ecc_uncorrectable_aggregate"),
        _gate(nodes, "health.retired_pages_pending", _field("retired_pages_pending"), _flag("retired pages pending")),
        _gate(nodes, "health.row_remap_failures", _remap("failure"), _flag("row remapping failed")),
        _gate(nodes, "health.row_remap_pending", _remap("pending"), _flag("row remaps pending (needs a GPU reset)")),
        _nvlink(nodes, expect),
        _fabric(nodes),
        _gate(nodes, "health.pcie_degraded", _pcie_read, _pcie_judge(expect)),
        _gate(nodes, "health.throttled", _field("clock_event_reasons"), _throttle_judge(expect)),
        _temperature(nodes, expect),
    ]
    for fig in figures:
        if fig.not_measured and not fig.skip:
            lines = "\n  ".join(fig.not_measured)
            fig.unmeasured.append(f"{fig.metric}: measured on some GPUs but not on these:\n  {lines}")
    return figures


METRICS = tuple(f.metric for f in evaluate([], Expect(gpu_model="any", min_driver="1")))

INVENTORY_FIELDS = ("index", "uuid", "serial", "pci_bus_id", "name", "memory_total_bytes", "vbios")
MODE_FIELDS = ("persistence_mode", "mig_mode", "ecc_mode")


def inventory(nodes: Nodes) -> list[InventoryRow]:
    """One row per GPU for the evidence: identity, versions and modes; an unanswered field keeps its reason.

    The fields in the order of INVENTORY_FIELDS, then MODE_FIELDS, as the evidence has always had them."""
    rows = []
    for host, node, gpu in _gpus(nodes, Figure("", "")):
        row: InventoryRow = {
            "host": host,
            "driver_version": node.get("driver_version"),
            "cuda_driver_version": node.get("cuda_driver_version"),
            "index": gpu.get("index"),
            "uuid": gpu.get("uuid"),
            "serial": gpu.get("serial"),
            "pci_bus_id": gpu.get("pci_bus_id"),
            "name": gpu.get("name"),
            "memory_total_bytes": gpu.get("memory_total_bytes"),
            "vbios": gpu.get("vbios"),
            "persistence_mode": gpu.get("persistence_mode"),
            "mig_mode": gpu.get("mig_mode"),
            "ecc_mode": gpu.get("ecc_mode"),
            "pcie": gpu.get("pcie"),
            "nvlink_active": gpu.get("nvlink_active"),
        }
        rows.append(row)
    return rows
