"""Health in the report: the NVML inventory of every GPU of every node, once (each node's pytest gathers the
whole cluster)."""

from __future__ import annotations

from acceptance.json_types import JSONObject, JSONValue
from acceptance.schema.report import Heading, ReportedRun, ReportSection, SectionBlock, Table, Text, object_of, objects


def _answer(value: JSONValue) -> str:
    """An NVML answer for a cell: a not-measured answer reads as its reason."""
    if isinstance(value, dict) and "not_measured" in value:
        return "n/a"
    return "-" if value is None else str(value)


def _pcie(pcie: JSONValue) -> str:
    if not isinstance(pcie, dict):
        return _answer(pcie)
    return f"Gen{pcie.get('gen')} x{pcie.get('width')} (max Gen{pcie.get('max_gen')} x{pcie.get('max_width')})"


def _inventory(host: str, nvml: JSONObject, gpu: JSONObject) -> list[object]:
    mode = gpu.get("ecc_mode")
    ecc = "on" if mode is True else "off" if mode is False else _answer(mode)
    errors = f"{_answer(gpu.get('ecc_uncorrectable_volatile'))} / {_answer(gpu.get('ecc_uncorrectable_aggregate'))}"
    temperature = f"{_answer(gpu.get('temperature_c'))} (slowdown {_answer(gpu.get('slowdown_temperature_c'))})"
    reasons = gpu.get("clock_event_reasons")
    events = ", ".join(map(str, reasons)) if isinstance(reasons, list) else _answer(reasons)
    return [
        host, gpu.get("index"), gpu.get("name"), _answer(gpu.get("serial")), gpu.get("uuid"),
        nvml.get("driver_version"), _answer(gpu.get("vbios")), _pcie(gpu.get("pcie")),
        _answer(gpu.get("nvlink_active")), f"{ecc}, {errors}", temperature, events or "none",
    ]  # fmt: skip


INVENTORY = ["host", "GPU", "model", "serial", "UUID", "driver", "VBIOS", "PCIe", "NVLink links",
             "ECC, uncorrectable (volatile / aggregate)", "temperature C", "clock-event reasons"]  # fmt: skip


def section(run: ReportedRun) -> list[SectionBlock]:
    rows: dict[str, list[object]] = {}
    missing: list[str] = []
    for series in run.series("health"):
        # the health probe's NVML answers, each field an answer or why it is not one (JSON, read with get)
        for node in objects(series.result.get("nodes")):
            nvml = object_of(node.get("nvml"))
            gpus = objects(nvml.get("gpus"))
            if not gpus:
                missing.append(f"{node.get('host')}: {nvml.get('error') or nvml.get('not_measured') or 'no GPU'}")
            for gpu in gpus:
                rows.setdefault(f"{node.get('host')}/{node.get('node_rank')}/{gpu.get('uuid')}",
                                _inventory(str(node.get("host")), nvml, gpu))  # fmt: skip
    if not rows and not missing:
        return []
    blocks: list[SectionBlock] = [Heading("Health inventory")]
    blocks += [Table(INVENTORY, list(rows.values()))] if rows else []
    return blocks + [Text(f"No NVML answers from {m}", note=True) for m in missing]


REPORT = ReportSection(40, section)
