"""The drift rules: every node's and every GPU's software and settings in, the ones that differ named out.

Pure data in and out (no NVML, no torch, no pytest). A field's reference value is the one most nodes (GPUs)
have; each node (GPU) with another value is named with the field and both values. A profile may pin fields
(``drift.golden``): each node (GPU) whose value is not the pinned one is named too. Fields in
``drift.ignore`` are recorded and never compared. A field the probe could not read stays "not measured" with
its reason: never a value, never drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, TypeAlias

from pydantic import AfterValidator, model_validator
from typing_extensions import TypedDict

from acceptance.families.answers import NotMeasured, not_measured, unanswered
from acceptance.schema.family import GPU_ONLY, Family, Shapes
from acceptance.schema.fields import Strict
from acceptance.schema.figure import Figure

# The fields the drift family compares. Node fields: one value per node (local rank 0 reads them); GPU
# fields: one value per GPU (each rank reads its own). The probe (acceptance/probes/drift.py) reads them and
# its docstring says from where; every value is text, compared exactly.
DRIFT_NODE_FIELDS = ("kernel", "os", "python", "torch", "cuda", "nccl", "driver", "nic_firmware", "nic_rate")
DRIFT_GPU_FIELDS = ("gpu_name", "vbios", "ecc_mode", "persistence_mode", "mig_mode", "power_limit_w",
                    "app_clock_sm_mhz", "app_clock_mem_mhz", "pcie_max_gen", "pcie_max_width")  # fmt: skip
DRIFT_FIELDS = DRIFT_NODE_FIELDS + DRIFT_GPU_FIELDS


def _drift_field(name: str) -> str:
    if name not in DRIFT_FIELDS:
        raise ValueError(f"unknown drift field {name!r} (expected one of: {', '.join(DRIFT_FIELDS)})")
    return name


DriftField = Annotated[str, AfterValidator(_drift_field)]


class Drift(Strict):
    """Every node and GPU agrees on its software and settings; ``golden`` pins fields to a value."""

    # field -> the value every node (GPU) must have, as text: quote it (YAML reads 2.10 as the number 2.1)
    golden: dict[DriftField, str] = {}
    ignore: list[DriftField] = []  # recorded, not compared (``kernel`` on a fleet that mixes kernels)

    @model_validator(mode="after")
    def _consistent(self) -> Drift:
        both = sorted(set(self.golden) & set(self.ignore))
        if both:
            raise ValueError(f"{', '.join(both)}: pinned in golden and ignored at once (pin it, or ignore it)")
        return self


_COMPARED = Shapes[Drift]("drift.<figure>")
DRIFT = Family(
    "drift",
    "every node and GPU agrees on software and settings; optionally pinned (a golden configuration)",
    Drift,
    (
        _COMPARED.count(r"(nodes_differing|golden_mismatches)"),
        # GPU fields come from NVML: a CPU run has none to compare ("no GPU fields to compare")
        _COMPARED.count(r"(gpus_differing)", devices=GPU_ONLY),
        # information: how much the comparison could not see (no NVML, no HCA); recorded, no built-in bound
        _COMPARED.figure(r"(fields_not_measured)", "lower", scale="bound"),
    ),
    probes=("drift",),
    describes_nics=True,
    in_worker=("drift",),
    quick=True,
)


# every field's value is text, compared exactly; what could not be read keeps its reason
Reading: TypeAlias = "str | NotMeasured"


class GpuSettings(TypedDict):
    """NVML's answers for one GPU (``probes.drift.read_settings``), as NVML gives them."""

    name: str | NotMeasured
    vbios: str | NotMeasured
    ecc_mode: bool | NotMeasured
    persistence_mode: bool | NotMeasured
    mig_mode: bool | NotMeasured
    power_limit_mw: int | NotMeasured
    app_clock_sm_mhz: int | NotMeasured
    app_clock_mem_mhz: int | NotMeasured
    pcie_max_gen: int | NotMeasured
    pcie_max_width: int | NotMeasured


class SettingsAnswers(TypedDict):
    """What one rank asked NVML: the node's driver, and its own GPU's settings (None: it asked for no GPU)."""

    driver_version: str | NotMeasured
    gpu: GpuSettings | NotMeasured | None


class Hca(TypedDict):
    """One InfiniBand/RoCE adapter as sysfs shows it (``/sys/class/infiniband/<hca>``)."""

    hca: str
    fw_ver: Reading
    rates: dict[str, Reading]  # port -> its rate in sysfs' words ("400 Gb/sec (4X NDR)")


class NodeRecord(TypedDict):
    """One node's fields (``DRIFT_NODE_FIELDS``), read by its local rank 0."""

    host: str
    node_rank: int
    fields: dict[str, Reading]
    hcas: list[Hca]


class GpuRecord(TypedDict):
    """One GPU's fields (``DRIFT_GPU_FIELDS``), read by the rank that uses it."""

    host: str
    node_rank: int
    rank: int
    local_rank: int
    uuid: Reading
    fields: dict[str, Reading]


class DriftResult(TypedDict):
    nodes: list[NodeRecord]
    gpus: list[GpuRecord]
    no_gpus: str | None  # why there is no GPU record at all (a run on the CPU), else None
    injected: list[str]  # what the test-only fault knob changed (``probes.drift.FAULT_ENV``); empty in a real run


# ---- from the probe's raw answers to text ----------------------------------------------------------------


def _onoff(value: bool | NotMeasured) -> Reading:
    return value if unanswered(value) else ("enabled" if value else "disabled")


def _number(value: float | NotMeasured, scale: float = 1.0) -> Reading:
    return value if unanswered(value) else f"{value / scale:g}"


def gpu_fields(answers: GpuSettings | NotMeasured) -> dict[str, Reading]:
    """A GPU's fields as text: modes ``enabled``/``disabled``, the power limit in W, clocks in MHz."""
    if unanswered(answers):
        return {name: answers for name in DRIFT_GPU_FIELDS}
    return {
        "gpu_name": answers["name"],
        "vbios": answers["vbios"],
        "ecc_mode": _onoff(answers["ecc_mode"]),
        "persistence_mode": _onoff(answers["persistence_mode"]),
        "mig_mode": _onoff(answers["mig_mode"]),
        "power_limit_w": _number(answers["power_limit_mw"], 1000.0),  # NVML answers in milliwatts
        "app_clock_sm_mhz": _number(answers["app_clock_sm_mhz"]),
        "app_clock_mem_mhz": _number(answers["app_clock_mem_mhz"]),
        "pcie_max_gen": _number(answers["pcie_max_gen"]),
        "pcie_max_width": _number(answers["pcie_max_width"]),
    }


def _tally(values: Sequence[str], unit: str) -> str:
    """``28.39.1002 on 8 HCAs``; where they differ, each value with its count."""
    counts = Counter(values)
    return ", ".join(f"{v} on {n} {unit}{'' if n == 1 else 's'}" for v, n in sorted(counts.items()))


def nic_fields(hcas: Sequence[Hca], none_why: str | None) -> dict[str, Reading]:
    """A node's ``nic_firmware`` and ``nic_rate``: every adapter's firmware and every port's rate, counted, so
    that a node with an adapter or a port fewer, or one of another firmware, differs from its peers."""
    if none_why is not None:
        return {"nic_firmware": not_measured(none_why), "nic_rate": not_measured(none_why)}
    firmware: list[Reading] = [h["fw_ver"] for h in hcas]
    rates: list[Reading] = [rate for h in hcas for rate in h["rates"].values()]
    return {"nic_firmware": _counted(firmware, "HCA"), "nic_rate": _counted(rates, "port")}


def _counted(readings: Sequence[Reading], unit: str) -> Reading:
    missing = next((r for r in readings if unanswered(r)), None)
    if missing is not None:
        return missing
    if not readings:
        return not_measured(f"no {unit} listed in sysfs")
    return _tally([r for r in readings if isinstance(r, str)], unit)


# ---- the rules ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pins:
    """What the profile says of the fields (``drift:``)."""

    golden: Mapping[str, str] = field(default_factory=dict)
    ignore: frozenset[str] = frozenset()

    @classmethod
    def from_profile(cls, model: object) -> Pins:
        section = DRIFT.section_of(model)
        return cls(dict(section.golden), frozenset(section.ignore))


@dataclass(frozen=True)
class Holder:
    """A node or a GPU: a label a person finds it by, and its fields."""

    label: str
    fields: Mapping[str, Reading]


def node_label(node_rank: int, host: str) -> str:
    return f"node {node_rank} ({host})"


def nodes_of(result: DriftResult) -> list[Holder]:
    nodes = sorted(result["nodes"], key=lambda n: n["node_rank"])
    return [Holder(node_label(n["node_rank"], n["host"]), n["fields"]) for n in nodes]


def gpus_of(result: DriftResult) -> list[Holder]:
    return [
        Holder(f"{node_label(g['node_rank'], g['host'])} GPU {g['local_rank']} (rank {g['rank']})", g["fields"])
        for g in sorted(result["gpus"], key=lambda g: g["rank"])
    ]


def _measured(holders: Sequence[Holder], name: str) -> list[tuple[Holder, str]]:
    return [(h, v) for h in holders if isinstance(v := h.fields.get(name, _absent(name)), str)]


def _absent(name: str) -> NotMeasured:
    return not_measured("not in the probe's answers")


def _others(counts: Counter[str], noun: str) -> str:
    """The other holders' values: ``the other 3 nodes 2.13.0``, ``the other node 2.13.0``, or each value with
    its count where they differ among themselves."""
    total = sum(counts.values())
    if len(counts) == 1:
        (value,) = counts
        return f"the other {noun} {value}" if total == 1 else f"the other {total} {noun}s {value}"
    return f"the other {total} {noun}s: " + ", ".join(f"{v} on {n}" for v, n in counts.most_common())


def _differing(holders: Sequence[Holder], names: Sequence[str], noun: str) -> list[tuple[str, str]]:
    """(label, line) for each holder and field whose value is not the field's reference: the value most
    holders have; on a tie, that of the first holder (the lowest node, the lowest rank) among the tied ones."""
    found = []
    for name in names:
        values = _measured(holders, name)
        counts = Counter(v for _, v in values)
        if len(counts) < 2:
            continue
        top = max(counts.values())
        first, reference = next((h, v) for h, v in values if counts[v] == top)
        tie = sum(1 for n in counts.values() if n == top) > 1
        for holder, value in values:
            if value == reference:
                continue
            line = f"{holder.label}: {name} {value}, {_others(counts - Counter([value]), noun)}"
            if tie:
                line += f" (no majority: {first.label}'s value is taken as the reference)"
            found.append((holder.label, line))
    return found


def _unread(holders: Sequence[Holder], names: Sequence[str]) -> list[tuple[str, str]]:
    """(field, line) per field and reason: the holders that could not read the field, and why."""
    found = []
    for name in names:
        by_reason: dict[str, list[str]] = {}
        for holder in holders:
            reading = holder.fields.get(name, _absent(name))
            if unanswered(reading):
                by_reason.setdefault(reading["not_measured"], []).append(holder.label)
        found += [(name, f"{name} on {', '.join(labels)}: {reason}") for reason, labels in by_reason.items()]
    return found


def _compared(names: Sequence[str], pins: Pins) -> list[str]:
    return [n for n in names if n not in pins.ignore]


def _ignored_note(names: Sequence[str], pins: Pins) -> list[str]:
    ignored = [n for n in names if n in pins.ignore]
    return [f"not compared (drift.ignore): {', '.join(ignored)}"] if ignored else []


def _agreement(metric: str, one: str, holders: Sequence[Holder], names: Sequence[str], pins: Pins) -> Figure:
    """Value = how many holders (each a ``one``: node, GPU) differ from the reference in a compared field."""
    fig = Figure(metric, f"{one}s")
    if len(holders) < 2:
        # one node (GPU) always agrees with itself: a figure that cannot fail is no check
        fig.skip = f"{len(holders)} {one}{'' if len(holders) == 1 else 's'}: no other {one} to compare with"
        return fig
    compared = _compared(names, pins)
    found = _differing(holders, compared, one)
    fig.findings = [line for _, line in found]
    fig.not_measured = [line for _, line in _unread(holders, compared)]
    fig.notes = _ignored_note(names, pins)
    fig.value = len({label for label, _ in found})
    return fig


def _golden(result: DriftResult, pins: Pins) -> Figure:
    """Value = how many (node or GPU, field) pairs hold another value than the pinned one; a pinned field a
    node (GPU) could not read is not measured: it cannot be confirmed, and is never a mismatch."""
    fig = Figure("drift.golden_mismatches", "fields")
    if not pins.golden:
        fig.skip = "the profile pins no field (drift.golden)"
        return fig
    nodes, gpus = nodes_of(result), gpus_of(result)
    for name, want in pins.golden.items():
        holders = nodes if name in DRIFT_NODE_FIELDS else gpus
        if not holders:
            fig.not_measured.append(f"{name}: no GPU to read it from: {result['no_gpus'] or 'no GPU record'}")
        off = [f"{h.label}: {name} {value}, golden {want}" for h, value in _measured(holders, name) if value != want]
        fig.findings += off
        fig.not_measured += [line for _, line in _unread(holders, [name])]
    fig.value = len(fig.findings)
    if fig.not_measured:  # a pinned value nobody could read is not confirmed: never a pass
        fig.unmeasured.append("pinned in drift.golden but not measured:\n  " + "\n  ".join(fig.not_measured))
    return fig


def _fields_not_measured(result: DriftResult, pins: Pins) -> Figure:
    """Value = how many compared fields some node (GPU) could not read: information, no built-in bound."""
    fig = Figure("drift.fields_not_measured", "fields")
    nodes, gpus = nodes_of(result), gpus_of(result)
    found = _unread(nodes, _compared(DRIFT_NODE_FIELDS, pins)) + _unread(gpus, _compared(DRIFT_GPU_FIELDS, pins))
    fig.findings = [line for _, line in found]
    fig.value = len({name for name, _ in found})
    if not gpus:
        fig.notes = [f"GPU fields not read: {result['no_gpus'] or 'no GPU record'}"]
    return fig


def evaluate(result: DriftResult, pins: Pins) -> list[Figure]:
    """One figure each: nodes that differ, GPUs that differ, golden mismatches, fields not measured."""
    gpus = _agreement("drift.gpus_differing", "GPU", gpus_of(result), DRIFT_GPU_FIELDS, pins)
    if not result["gpus"]:
        gpus.skip = f"no GPU fields to compare: {result['no_gpus'] or 'no GPU record'}"
    return [
        _agreement("drift.nodes_differing", "node", nodes_of(result), DRIFT_NODE_FIELDS, pins),
        gpus,
        _golden(result, pins),
        _fields_not_measured(result, pins),
    ]


METRICS = tuple(f.metric for f in evaluate({"nodes": [], "gpus": [], "no_gpus": None, "injected": []}, Pins()))
