"""The report's reference column: beside each figure, what a healthy machine of the run's kind measures,
and where that is published (``acceptance.profile.references``).

The run's setup is read from its evidence: the GPU model and GPUs per node from the profile (else the
devices the connectivity probe listed), the node count from the run, NVLS from the profile's
``NCCL_NVLS_ENABLE`` (unset: unknown, so only rows that do not depend on it apply), and the NICs from the
port rates a family's probe recorded (``Family.describes_nics``: drift's).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from acceptance.evidence.model import EvidenceDoc
from acceptance.profile.references import ReferenceTable, Setup, table
from acceptance.profile.registry import FAMILIES
from acceptance.reports import view

# an InfiniBand port's rate as sysfs writes it: "400 Gb/sec (4X NDR)"
_IB_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\s*\(\s*\d+X\s+(?:EDR|HDR|NDR|XDR)\s*\)")


def setup_of(data: EvidenceDoc, refs: ReferenceTable) -> Setup | None:
    """The run's setup as the table keys it; None for a CPU run (no row describes one)."""
    topo = view.section(data, "topology")
    if topo.get("device") != "cuda":
        return None
    ran = data.topology
    model = topo.get("gpu_model")
    gpu = refs.gpu_of(model if isinstance(model, str) else None) or refs.gpu_of(_device_name(data))
    nvls_env = view.section(data, "env").get("NCCL_NVLS_ENABLE")
    return Setup(
        gpu=gpu,
        nodes=int(ran.nodes or view.number(topo.get("nodes")) or 1),
        gpus_per_node=int(view.number(topo.get("gpus_per_node")) or ran.ranks_per_node or 0),
        nvls=None if nvls_env is None else str(nvls_env).strip() != "0",
        nics=tuple(dict.fromkeys(_nic_kinds(data, refs))),
    )


def _device_name(data: EvidenceDoc) -> str | None:
    for node in data.cluster.nodes:
        for device in node.devices:
            if device.get("device_name"):
                return str(device["device_name"])
    return None


def _nic_kinds(data: EvidenceDoc, refs: ReferenceTable) -> Iterator[str]:
    probes = {p for f in FAMILIES if f.describes_nics for p in f.probes}
    for probe in data.probes:
        if probe.name in probes and probe.result is not None:
            for rate in _rates(probe.result):
                match = _IB_RATE.match(rate)
                kind = refs.nic_of("InfiniBand", float(match.group(1))) if match else None
                if kind:
                    yield kind


def _rates(value: Any) -> Iterator[str]:
    """Every port rate under the result's ``hcas`` lists, wherever they sit."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "hcas" and isinstance(item, list):
                for hca in item:
                    yield from (str(r) for r in ((hca or {}).get("rates") or {}).values())
            else:
                yield from _rates(item)
    elif isinstance(value, list):
        for item in value:
            yield from _rates(item)


def column(data: EvidenceDoc) -> Callable[[str], str]:
    """metric -> the reference shown beside it ("" where no row describes it on this run's setup)."""
    refs = table()
    setup = setup_of(data, refs)
    if setup is None:
        return lambda metric: ""

    def words(metric: str) -> str:
        row = refs.for_figure(metric, setup)
        return row.words() if row else ""

    return words
