"""NVLink domains across nodes (``families.nvlink_domain``): a GB200 NVL72 rack recorded as NVML's fabric info
gives one domain across its 18 trays; NCCL over NET between two of its trays is a named mismatch, over
P2P/MNNVL none; a GPU with a degraded fabric fails health; H100/H200 (NVML: not supported) are in none.

The rack's fabric info is that NCCL logged on a GB200 tray in github.com/NVIDIA/nccl/issues/1769::

    MNNVL busId 0x901000 fabric UUID 3143b15bc2cd192b.28cc9b5473fb5b93 cliqueId 0x7ffe state 3 healthMask 0xaa

(NCCL prints the 16-byte cluster UUID as two little-endian 64-bit words, src/init.cc.)"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from acceptance.families import nvlink_domain, transport
from acceptance.families.health import Expect, NodeHealth, NodeInventory
from acceptance.families.nvlink_domain import FabricAnswer
from acceptance.families.transport import RankLog
from acceptance.probes import nvml
from tests import test_fault_units as fault_units
from tests.test_fault_units import BUS
from tests.test_health_units import RecordedNvml, answered, figures, h100, node, passes

UUID = (0x3143B15BC2CD192B).to_bytes(8, "little") + (0x28CC9B5473FB5B93).to_bytes(8, "little")
CLIQUE = 0x7FFE
HEALTHY_MASK = 0xAA  # every health field "false" (not degraded, no recovery, route healthy, no timeout)
TRAYS = [f"gb200-rack1-tray{t:02d}" for t in range(1, 19)]


def _gb200(state: int = 3, mask: int = HEALTHY_MASK, status: int = 0) -> FabricAnswer:
    return nvlink_domain.answer(state, UUID, CLIQUE, status, mask)


NOT_SUPPORTED = nvlink_domain.answer(0, bytes(16), 0, 0, 0)  # every H100/H200 HGX GPU


def test_an_nvl72_rack_is_one_nvlink_domain_across_its_trays() -> None:
    rack = {tray: [_gb200() for _ in range(4)] for tray in TRAYS}
    found = nvlink_domain.domains(rack)
    assert list(found.values()) == [TRAYS]
    (key,) = found
    assert key == f"{UUID.hex()}/{CLIQUE}"
    assert nvlink_domain.label(key) == "clique 32766 of fabric 2b19cdc2"
    # a tray whose fabric is not set up yet, H100 nodes beside it: of no domain
    assert nvlink_domain.domains({"h100-1": [NOT_SUPPORTED], "tray": [_gb200(state=2)]}) == {}


def _line(host: str, rank: int, dev: int, text: str) -> str:
    return f"{host}:1:1 [{dev}] NCCL INFO {text}"


def _tray_logs(transport_line: str, peer_line: str) -> list[RankLog]:
    """Rank 0 on tray 1's GPU 0, rank 4 on tray 2's GPU 0 (4 ranks a tray); ranks 1 on tray 1 GPU 1."""
    logs: list[RankLog] = []
    for rank, host, dev, text in ((0, TRAYS[0], 0, transport_line), (4, TRAYS[1], 0, peer_line)):
        lines = [_line(host, rank, dev, f"comm 0x1 rank {rank} nranks 8 cudaDev {dev} nvmlDev {dev} - Init START"),
                 _line(host, rank, dev, text)]  # fmt: skip
        _, connections = transport.parse("\n".join(lines))
        logs.append({"rank": rank, "host": host, "local_rank": dev, "dev": dev, "connections": connections,
                     "node": rank // 4})  # fmt: skip
    return logs


NVLINK = {TRAYS[0]: {"0-1": True}, TRAYS[1]: {"0-1": True}}
DOMAINS = {tray: dict.fromkeys(range(4), f"{UUID.hex()}/{CLIQUE}") for tray in TRAYS[:2]}


def test_nccl_over_net_between_trays_of_one_domain_is_a_named_mismatch() -> None:
    logs = _tray_logs(
        "Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0/GDRDMA",
        "Channel 00/0 : 0[0] -> 4[0] [receive] via NET/IB/0/GDRDMA",
    )
    found = transport.record(logs, NVLINK, {}, DOMAINS)
    pairs = transport.judged(found["pairs"])
    assert [(p["src"], p["dst"], p["expected"], p["mismatch"]) for p in pairs] == [(0, 4, "P2P", True)]
    text = transport.summary(pairs, found["settings"])
    assert text == (
        "1 of 1 rank pairs joined by NVLink went another way: gb200-rack1-tray01 GPU 0 -> gb200-rack1-tray02 GPU 0: "
        "NET/IB/0/GDRDMA, expected P2P (one NVLink domain: clique 32766 of fabric 2b19cdc2; no NCCL setting forced "
        "it: NCCL did not enable MNNVL (check the IMEX channel, /dev/nvidia-caps-imex-channels, and nvidia-imex-ctl "
        "-N))"
    )
    forced = transport.record(logs, NVLINK, {"NCCL_MNNVL_ENABLE": "0"}, DOMAINS)
    assert "NCCL_MNNVL_ENABLE=0 set in the environment" in transport.summary(forced["pairs"], forced["settings"])
    # a busbw slowed by it names the setting as its cause, as inside a node
    assert transport.forced(forced).endswith(f"NCCL_MNNVL_ENABLE=0 {transport.FORCED_BY_SETTING}")
    # without fabric info (the two-nodes-on-one-host runs, H100 racks) the same NET pair is recorded, not judged
    plain = transport.record(logs, NVLINK, {})
    assert transport.judged(plain["pairs"]) == [] and transport.mismatches(plain["pairs"]) == []


def test_p2p_over_mnnvl_between_trays_is_the_expected_transport() -> None:
    """The P2P/MNNVL line names a peer on another tray (GPU 0 there, as here): it is taken by its world rank,
    never for this tray's own GPU 0."""
    logs = _tray_logs("Channel 00/0 : 0[0] -> 4[0] via P2P/MNNVL/read", "Channel 00/0 : 4[0] -> 0[0] via P2P/MNNVL")
    found = transport.record(logs, NVLINK, {}, DOMAINS)
    pairs = transport.judged(found["pairs"])
    assert [(p["src"], p["dst"], p["transports"], p["mismatch"]) for p in pairs] == [
        (0, 4, ["P2P/MNNVL/read"], False), (4, 0, ["P2P/MNNVL"], False),
    ]  # fmt: skip
    assert all(p["domain"] == f"{UUID.hex()}/{CLIQUE}" for p in pairs)


def _with_fabric(host: str, *answers: FabricAnswer) -> NodeHealth:
    found = node(host, [h100(i) for i in range(len(answers))])
    answers_of = answered(found["nvml"])
    gpus = copy.deepcopy(answered(answers_of["gpus"]))
    for gpu, answer in zip(gpus, answers, strict=True):
        gpu["fabric"] = answer
    return {**found, "nvml": {**answers_of, "gpus": gpus}}


EXPECT = Expect(gpus_per_node=2)


def test_a_clique_with_a_degraded_fabric_fails_health() -> None:
    healthy = figures([_with_fabric(t, _gb200(), _gb200()) for t in TRAYS[:2]], EXPECT)["health.nvlink_fabric_degraded"]
    assert healthy.skip is None and healthy.value == 0 and healthy.findings == []
    degraded = [
        _with_fabric(TRAYS[0], _gb200(), _gb200(mask=0xA9)),  # degraded bandwidth: true
        _with_fabric(TRAYS[1], _gb200(state=2), _gb200(mask=0xAA | (2 << 14))),  # fabric manager disconnected
    ]
    fig = figures(degraded, EXPECT)["health.nvlink_fabric_degraded"]
    assert fig.value == 3
    assert fig.findings == [
        "gb200-rack1-tray01 GPU 1 (GPU-1f2a...) (clique 32766 of fabric 2b19cdc2): NVLink bandwidth degraded",
        "gb200-rack1-tray02 GPU 0 (GPU-0f2a...) (clique 32766 of fabric 2b19cdc2): fabric state in progress",
        "gb200-rack1-tray02 GPU 1 (GPU-1f2a...) (clique 32766 of fabric 2b19cdc2): fabric manager disconnected",
    ]
    assert passes(healthy) and not passes(fig)


def test_gpus_outside_any_fabric_are_no_finding() -> None:
    """H100/H200: NVML answers NOT_SUPPORTED for fabric info; the figure says why it judges nothing."""
    fig = figures([_with_fabric("h100-1", NOT_SUPPORTED, NOT_SUPPORTED)], EXPECT)["health.nvlink_fabric_degraded"]
    assert fig.skip == "no GPU is of a multi-node NVLink fabric (NVML: fabric info not supported)"


class _FabricNvml(RecordedNvml):
    """NVML answering fabric info with ``answers`` (an int: that NVML error)."""

    def __init__(self, answers: list[FabricAnswer | int]) -> None:
        super().__init__([h100(i) for i in range(len(answers))])
        self.answers = answers

    def nvmlDeviceGetGpuFabricInfoV(self, handle: int, pointer: Any) -> None:
        # NVML's C call takes a pointer to a struct whose version it reads first: given the struct itself, the
        # real library crashes the process (SIGSEGV)
        assert type(pointer).__name__ == "CArgObject", "the struct is passed by pointer (ctypes.byref)"
        info = pointer._obj
        assert info.version == pynvml.nvmlGpuFabricInfo_v2
        found = self.answers[handle]
        if isinstance(found, int):
            raise pynvml.NVMLError(found)
        info.clusterUuid[:] = list(bytes.fromhex(found["cluster_uuid"]))
        info.cliqueId, info.state = found["clique_id"], 3
        info.status, info.healthMask = found["status"], found["health_mask"]


@pytest.mark.parametrize(
    ("answer", "state"),
    [(_gb200(), "completed"), (pynvml.NVML_ERROR_NOT_SUPPORTED, "not supported"),
     (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "not supported")],
)  # fmt: skip
def test_the_adapter_reads_fabric_info_and_bus_ids(answer: FabricAnswer | int, state: str) -> None:
    found = nvml.read_fabric(_FabricNvml([answer]))
    assert isinstance(found, list)
    assert found[0]["pci_bus_id"] == "00000000:18:00.0"
    assert found[0]["fabric"]["state"] == state  # type: ignore[typeddict-item]
    if state == "completed":
        assert nvlink_domain.domain(found[0]["fabric"]) == f"{UUID.hex()}/{CLIQUE}"  # type: ignore[arg-type]
    failed = nvml.read_fabric(_FabricNvml([pynvml.NVML_ERROR_NO_PERMISSION]))
    assert isinstance(failed, list) and "not_measured" in failed[0]["fabric"]


def test_the_imex_channels_are_listed(tmp_path: Any) -> None:
    assert nvlink_domain.imex_channels(tmp_path / "absent") == []
    (tmp_path / "channel0").touch()
    assert nvlink_domain.imex_channels(tmp_path) == ["channel0"]


def test_a_gb200_tray_without_an_imex_channel_fails_preflight() -> None:
    """The tray's GPUs are of a domain and /dev/nvidia-caps-imex-channels offers no channel: NCCL's MNNVL cannot
    work there (its own warning, src/mnnvl.cc); the node's configuration. With channel0, or on an H100 node
    (no domain), nothing is said."""
    base: NodeInventory = {"pci": list(BUS), "nvml": fault_units.nvml(0, 1), "torch": fault_units.cuda(0, 1)}
    key = f"{UUID.hex()}/{CLIQUE}"
    missing = fault_units.judge({**base, "nvlink_domains": [key], "imex_channels": []})
    assert not missing.ok and missing.category == "configuration"
    assert missing.message.startswith(
        "GPUs of NVLink domain clique 32766 of fabric 2b19cdc2 and no IMEX channel in /dev/nvidia-caps-imex-channels"
    )
    assert fault_units.judge({**base, "nvlink_domains": [key], "imex_channels": ["channel0"]}).ok
    assert fault_units.judge({**base, "nvlink_domains": [], "imex_channels": []}).ok


def test_an_nvidia_ml_py_without_the_fabric_query_is_not_measured() -> None:
    old = SimpleNamespace(NVMLError=pynvml.NVMLError)  # a library of before the query
    found = nvml.fabric_info(nvml.Asker(old), old, 0)
    assert found == {"not_measured": "fabric info: this nvidia-ml-py has no nvmlDeviceGetGpuFabricInfoV: upgrade it"}
