"""Floors from a node's own links (``acceptance.profile.floors``): the NVLink reader on NVML's own answers
(a recorded NVML), each fact through the survey, each floor's arithmetic, and init's profile on a 4-GPU NV18
H200 node judged against what such a node measured healthy and with NVLink unused (REFERENCE figures)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from acceptance.families.connectivity import CONNECTIVITY
from acceptance.families.health import HEALTH
from acceptance.families.training import TRAINING
from acceptance.probes import nvml
from acceptance.probes.node_survey import Sources, detect
from acceptance.profile import floors, loader
from acceptance.profile.initial import bounds_for
from acceptance.profile.node_facts import GpuLinks, NodeFacts, NvLink, Port
from acceptance.profile.references import table as load_table
from tests.test_health_units import UNSUPPORTED, RecordedNvml, answered, h100
from tests.test_init import H200, bound, nvlinks, nvml_node, run_init, sources

SWITCH, GPU = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH, pynvml.NVML_NVLINK_DEVICE_TYPE_GPU


def on_switch(index: int, links: int = 18, version: int = pynvml.NVML_NVLINK_VERSION_4_0) -> dict[str, Any]:
    gpu = h100(index)
    gpu.update(
        {
            "nvmlDeviceGetNvLinkState": [1] * links,
            "nvmlDeviceGetNvLinkVersion": [version] * links,
            "nvmlDeviceGetNvLinkRemoteDeviceType": [SWITCH] * links,
            "nvmlDeviceGetNvLinkRemotePciInfo": [SimpleNamespace(busId=b"00000000:05:00.0")] * links,
        }
    )
    return gpu


def test_the_reader_answers_each_link_s_state_version_and_far_end() -> None:
    down = on_switch(1)
    down["nvmlDeviceGetNvLinkState"] = [1] * 17 + [0]
    answers = answered(nvml.read_nvlinks(RecordedNvml([on_switch(0), down])))
    first = answered(answers[0]["links"])
    assert len(first) == 18 and answers[0]["bus_id"] == "00000000:18:00.0"
    assert first[0] == {
        "link": 0,
        "up": True,
        "version": 6,
        "remote_type": "switch",
        "remote_bus_id": "00000000:05:00.0",
    }
    last = answered(answers[1]["links"])[17]
    assert not last["up"] and last["remote_bus_id"] == {"not_measured": "NVLink remote PCI info: the link is down"}


def test_a_gpu_without_nvlink_is_not_measured_never_a_link_count() -> None:
    card = h100(0)
    card["nvmlDeviceGetNvLinkState"] = UNSUPPORTED
    answers = answered(nvml.read_nvlinks(RecordedNvml([card])))
    assert answers[0]["links"] == {"not_measured": "NVLink state: Not Supported"}


def test_the_survey_keeps_each_gpu_s_links_and_pcie_maximum(tmp_path: Path) -> None:
    lib = RecordedNvml([on_switch(0), on_switch(1)])
    src = Sources(
        nvml=lambda: nvml.read_node(lib), nvlinks=lambda: nvml.read_nvlinks(lib), torch_names=lambda: [],
        visible=lambda: None, sysfs=tmp_path, env={}, cpus=lambda: 2,
    )  # fmt: skip
    facts = detect(src)
    gpu = facts.links[1]
    assert (gpu.index, gpu.bus_id, gpu.pcie_gen, gpu.pcie_width, gpu.pcie_max_gen, gpu.pcie_max_width) == (
        1, "00000000:19:00.0", 5, 16, 5, 16,
    )  # fmt: skip
    assert len(gpu.nvlinks_up) == 18 and gpu.nvlinks[0] == NvLink(0, True, 6, "switch")
    assert floors.nvlink_rate(gpu) == floors.NVLINK_RATES[6]


def gpu(index: int, links: int = 0, version: int | None = 6, remote: str | None = "switch",
        pcie: tuple[int, int] = (5, 16)) -> GpuLinks:  # fmt: skip
    return GpuLinks(
        index, f"bus{index}", tuple(NvLink(k, True, version, remote) for k in range(links)),
        1, pcie[1], pcie[0], pcie[1],
    )  # fmt: skip


def node(*gpus: GpuLinks, nvswitch: bool = False) -> NodeFacts:
    return NodeFacts(("GPU",) * len(gpus), (), nvswitch, False, (), 8, links=gpus)


def by_metric(found: list[floors.HardwareFloor]) -> dict[str, floors.HardwareFloor]:
    return {f.metric: f for f in found}


def test_nv18_on_a_switch_floors_p2p_busbw_and_host_links() -> None:
    found = by_metric(floors.hardware_floors(node(*(gpu(i, 18) for i in range(4))), 1, ("all_reduce",), ("1M", "1G")))
    # 18 links x 25 GB/s = 450 GB/s per direction
    assert found["connectivity.p2p_min_gbps"].minimum == 112.5  # x 0.25
    assert found["collectives.all_reduce.busbw_gbps@1G"].minimum == 135.0  # x 0.3
    assert "collectives.all_reduce.busbw_gbps@1M" not in found  # launch-bound
    assert found["compute.h2d_gbps_min"].minimum == 25.2  # Gen5 x16: 63.01 x 0.4
    assert found["collectives.all_reduce.busbw_gbps@1G"].source.startswith(
        "hardware floor: NVLink4 18 links x 25 GB/s = 450 GB/s (NVIDIA H100 datasheet: 18 links, 900 GB/s both "
        "ways) x 0.3"
    )


def test_a_direct_mesh_floors_p2p_by_the_links_between_the_pair() -> None:
    # 4x A100 joined directly: 12 NVLink3 links each (NVML version 4 is NVLink 3.0), 4 to each peer
    peers = {i: [p for p in range(4) if p != i] for i in range(4)}
    mesh = [
        GpuLinks(i, f"bus{i}", tuple(NvLink(k, True, 4, f"bus{peers[i][k % 3]}") for k in range(12))) for i in range(4)
    ]
    found = by_metric(floors.hardware_floors(node(*mesh), 1, ("all_reduce", "sendrecv"), ("1G",)))
    assert found["connectivity.p2p_min_gbps"].minimum == 25.0  # 4 links x 25 = 100 GB/s x 0.25
    assert found["collectives.all_reduce.busbw_gbps@1G"].minimum == 90.0  # 12 x 25 = 300 x 0.3
    # sendrecv goes to one peer: the pair's 4 links bound it, not the GPU's 12
    assert found["collectives.sendrecv.busbw_gbps@1G"].minimum == 30.0  # 4 x 25 = 100 x 0.3
    assert "NVLink3 4 links" in found["connectivity.p2p_min_gbps"].fact
    assert "compute.h2d_gbps_min" not in found  # NVML told no PCIe link


def test_links_whose_far_end_is_unknown_are_shared_between_the_peers() -> None:
    found = by_metric(floors.hardware_floors(node(*(gpu(i, 18, remote=None) for i in range(4))), 1, (), ()))
    assert found["connectivity.p2p_min_gbps"].minimum == 37.5  # 18 / 3 peers = 6 links = 150 GB/s x 0.25
    on_switch = node(*(gpu(i, 18, remote=None) for i in range(4)), nvswitch=True)
    assert by_metric(floors.hardware_floors(on_switch, 1, (), ()))["connectivity.p2p_min_gbps"].minimum == 112.5


def test_a_pcie_node_and_an_unknown_nvlink_version_are_floored_by_pcie() -> None:
    for facts in (
        node(gpu(0, pcie=(4, 16)), gpu(1, pcie=(4, 16))),
        node(*(gpu(i, 18, 9, pcie=(4, 16)) for i in range(2))),
    ):
        found = by_metric(floors.hardware_floors(facts, 1, ("broadcast",), ("256M",)))
        assert found["connectivity.p2p_min_gbps"].minimum == 7.9  # Gen4 x16: 31.5 x 0.25
        assert found["collectives.broadcast.busbw_gbps@256M"].minimum == 6.3  # x 0.2
        assert found["compute.d2h_gbps_min"].minimum == 12.6  # x 0.4


def test_the_slowest_gpu_sets_the_floor_and_several_nodes_only_their_own_links() -> None:
    facts = node(gpu(0, 18, pcie=(5, 16)), gpu(1, 12, pcie=(5, 8)))
    found = by_metric(floors.hardware_floors(facts, 1, ("all_reduce",), ("4G",)))
    assert found["collectives.all_reduce.busbw_gbps@4G"].minimum == 90.0  # 12 links x 25 x 0.3
    assert found["compute.h2d_gbps_min"].minimum == 12.6  # Gen5 x8: 31.5 x 0.4
    # across nodes the world's collectives run over the network; each node's pairs and host links are its own
    several = by_metric(floors.hardware_floors(facts, 2, ("all_reduce",), ("4G",)))
    assert set(several) == {"compute.h2d_gbps_min", "compute.d2h_gbps_min", "connectivity.p2p_min_gbps"}
    assert several["connectivity.p2p_min_gbps"].minimum == found["connectivity.p2p_min_gbps"].minimum


# 4x H200, NV18 between every pair, measured 2026-11-27 (REFERENCE figures): healthy, and with NVLink unused
# (NCCL_P2P_DISABLE=1). The 2x H200 p2p and reduce_scatter are the lowest healthy figures at those sizes.
HEALTHY_4X = {
    "collectives.all_reduce.busbw_gbps@256M": 339.3, "collectives.all_reduce.busbw_gbps@1G": 353.5,
    "collectives.all_reduce.busbw_gbps@4G": 362.6, "collectives.all_gather.busbw_gbps@1G": 324.9,
    "collectives.all_to_all.busbw_gbps@1G": 334.6, "collectives.broadcast.busbw_gbps@1G": 359.5,
    "collectives.reduce_scatter.busbw_gbps@256M": 228.7, "connectivity.p2p_min_gbps": 305.0,
    "compute.h2d_gbps_min": 37.0, "compute.d2h_gbps_min": 31.0, "training.ddp.tokens_per_s_per_gpu": 65146,
    "training.fsdp.tokens_per_s_per_gpu": 71808, "training.ddp.mfu": 0.477, "training.fsdp.mfu": 0.525,
    "training.scaling_efficiency": 0.926,
}  # fmt: skip
NVLINK_UNUSED = {"connectivity.p2p_min_gbps": 27.0, "collectives.all_reduce.busbw_gbps@1G": 24.0}


def test_init_on_4_h200_nv18_gates_every_collective_and_fails_nvlink_unused(tmp_path: Path) -> None:
    src = sources(tmp_path, nvml_node(H200, 4, 18), links=nvlinks(4, 18))
    profile, _ = run_init(tmp_path, src)
    ops = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv")
    for op in ops:
        for size in ("256M", "1G", "4G"):
            low, source = bound(profile, f"collectives.{op}.busbw_gbps@{size}")
            assert low == 135.0 and source.startswith("hardware floor: NVLink4 18 links"), (op, size)
    assert CONNECTIVITY.section_of(profile.model).p2p_size == "256M"
    assert HEALTH.section_of(profile.model).nvlink_links == 18
    assert bound(profile, "connectivity.p2p_min_gbps")[0] == 112.5
    low, source = bound(profile, "compute.h2d_gbps_min")  # the reference row (45% of Gen5 x16) is tighter
    assert low == pytest.approx(28.4) and source.startswith("reference: 45% of peak of PCIe Gen5 x16")
    training = TRAINING.section_of(profile.model)
    assert training.model == "llama-1b" and training.micro_batch == 8
    assert bound(profile, "training.ddp.tokens_per_s_per_gpu")[0] == pytest.approx(56685.7)  # 85% of 66,689
    for metric, value in HEALTHY_4X.items():
        ok, words = loader.evaluate(profile.threshold(metric), value)  # type: ignore[arg-type]
        assert ok, f"healthy {metric} = {value} fails {words}"
    for metric, value in NVLINK_UNUSED.items():
        assert not loader.evaluate(profile.threshold(metric), value)[0], metric  # type: ignore[arg-type]


# Three healthy 4x H200 machines (docs/measurements.md, "A node judged out of the box (H200 x4)"): the two cold
# runs h200-x4's bounds come from (2026-11-28) and the first healthy run on another machine (2026-11-27).
RUNS_4X = [
    {"connectivity.p2p_min_gbps": 286.6, "collectives.all_reduce.busbw_gbps@1G": 354.7,
     "collectives.reduce_scatter.busbw_gbps@256M": 298.8, "collectives.sendrecv.busbw_gbps@256M": 301.4,
     "compute.matmul_tflops_min": 651.3, "compute.h2d_gbps_min": 37.72, "compute.d2h_gbps_min": 33.32,
     "training.ddp.tokens_per_s_per_gpu": 64202, "training.zero3.tokens_per_s_per_gpu": 50006,
     "training.scaling_efficiency": 0.9143},
    {"connectivity.p2p_min_gbps": 302.6, "collectives.all_reduce.busbw_gbps@1G": 352.2,
     "collectives.reduce_scatter.busbw_gbps@256M": 294.9, "collectives.sendrecv.busbw_gbps@256M": 299.9,
     "compute.matmul_tflops_min": 665.3, "compute.h2d_gbps_min": 38.74, "compute.d2h_gbps_min": 32.34,
     "training.ddp.tokens_per_s_per_gpu": 66143, "training.zero3.tokens_per_s_per_gpu": 50854,
     "training.scaling_efficiency": 0.921},
    {"connectivity.p2p_min_gbps": 287.1, "collectives.all_reduce.busbw_gbps@1G": 353.7,
     "collectives.all_gather.busbw_gbps@1G": 325.1, "collectives.reduce_scatter.busbw_gbps@1G": 321.4,
     "collectives.all_to_all.busbw_gbps@1G": 336.2, "collectives.broadcast.busbw_gbps@1G": 359.8,
     "collectives.sendrecv.busbw_gbps@1G": 360.4, "compute.h2d_gbps_min": 44.5, "compute.d2h_gbps_min": 34.4,
     "training.ddp.tokens_per_s_per_gpu": 66066, "training.fsdp.tokens_per_s_per_gpu": 72640,
     "training.zero1.tokens_per_s_per_gpu": 72442, "training.zero2.tokens_per_s_per_gpu": 72298,
     "training.scaling_efficiency": 0.922},
]  # fmt: skip


def test_the_shipped_4x_h200_profile_holds_every_recorded_healthy_run_and_fails_nvlink_unused() -> None:
    profile = loader.load("h200-x4")
    for run in RUNS_4X:
        for metric, value in run.items():
            ok, words = loader.evaluate(profile.threshold(metric), value)  # type: ignore[arg-type]
            assert ok, f"healthy {metric} = {value} fails {words}"
    for metric, value in NVLINK_UNUSED.items():
        assert not loader.evaluate(profile.threshold(metric), value)[0], metric  # type: ignore[arg-type]


def test_a_link_down_at_init_is_gated_by_every_link_nvml_knows(tmp_path: Path) -> None:
    src = sources(tmp_path, nvml_node(H200, 2, 17), links=nvlinks(2, 18, down=1))
    profile, _ = run_init(tmp_path, src)
    # the first run fails health.nvlink_links_min, naming the GPU
    assert HEALTH.section_of(profile.model).nvlink_links == 18


def ports(*rates: float, layer: str = "InfiniBand", active: bool = True) -> tuple[Port, ...]:
    return tuple(Port(f"mlx5_{i}", "1", layer, rate, active) for i, rate in enumerate(rates))


def test_each_family_writes_its_own_floors_from_the_node_s_paths() -> None:
    """The floors are the families' (``Behaviour.floors``), each under its own prefix, from the paths the node
    has; a family with no figure of the links writes none, and init lists them pair, collective, rail, host."""
    from acceptance.profile.registry import FAMILIES

    facts = with_ports(node(*(gpu(i, 18) for i in range(4))), ports(400, 400, 400, 400))
    paths = floors.node_paths(facts, 1, ("all_reduce", "sendrecv"), ("1G",))
    own = {f.name: [x.metric for x in f.behaviour.floors(paths)] for f in FAMILIES if f.behaviour.floors}
    assert set(own) == {"connectivity", "compute", "collectives", "internode"}
    assert all(m.startswith(f"{name}.") for name, metrics in own.items() for m in metrics)
    assert own["internode"] == []  # one node: no rail
    written = [f.metric for f in floors.hardware_floors(facts, 1, ("all_reduce", "sendrecv"), ("1G",))]
    assert written == [*own["connectivity"], *own["collectives"], *own["compute"]]
    across = floors.node_paths(facts, 2, ("all_reduce",), ("1G",))
    assert across.collective is None and across.rail is not None and not across.rail.nvlink


def with_ports(facts: NodeFacts, found: tuple[Port, ...]) -> NodeFacts:
    return dataclasses.replace(facts, ports=found)


def test_each_rail_is_floored_by_the_slowest_rdma_port_shared_by_the_gpus() -> None:
    eight = node(*(gpu(i, 18) for i in range(8)))
    rail = by_metric(floors.hardware_floors(with_ports(eight, ports(*[400] * 8)), 2, (), ()))["internode.rail_min_gbps"]
    assert rail.minimum == 37.5  # 400 Gb/s = 50 GB/s per rail, x 0.75
    assert "InfiniBand port at 400 Gb/s (mlx5_0/1, sysfs rate) per rail: 50 GB/s" in rail.source
    # a port trained at 200 Gb/s sets every rail's floor; four ports for eight GPUs share theirs
    slow = with_ports(eight, ports(*[400] * 7, 200))
    assert by_metric(floors.hardware_floors(slow, 2, (), ()))["internode.rail_min_gbps"].minimum == 18.8
    shared = floors.hardware_floors(with_ports(eight, ports(400, 400, 400, 400, layer="Ethernet")), 2, (), ())
    assert by_metric(shared)["internode.rail_min_gbps"].minimum == 18.8  # 50 x 4/8 x 0.75
    assert "4 RDMA ports for 8 GPUs" in by_metric(shared)["internode.rail_min_gbps"].fact


def test_no_rail_floor_on_one_node_or_without_an_active_rdma_port() -> None:
    eight = node(*(gpu(i, 18) for i in range(8)))
    assert "internode.rail_min_gbps" not in by_metric(floors.hardware_floors(with_ports(eight, ports(400)), 1, (), ()))
    down = with_ports(eight, ports(400, 400, active=False))
    assert "internode.rail_min_gbps" not in by_metric(floors.hardware_floors(down, 2, (), ()))
    odd = with_ports(eight, ports(400, layer="Unknown"))
    assert "internode.rail_min_gbps" not in by_metric(floors.hardware_floors(odd, 2, (), ()))


def test_a_nic_the_table_knows_is_bounded_by_its_row_and_one_it_does_not_by_the_port_rate() -> None:
    table = load_table()
    h200 = dataclasses.replace(node(*(gpu(i, 18) for i in range(8)), nvswitch=True), gpu_names=("NVIDIA H200",) * 8)
    known = {b.metric: b for b in bounds_for(with_ports(h200, ports(*[400] * 8)), 2, table)}
    assert known["internode.rail_min_gbps"].value == pytest.approx(38.4)  # the NDR row: 48 x 0.8
    edr = {b.metric: b for b in bounds_for(with_ports(h200, ports(*[100] * 8)), 2, table)}
    assert edr["internode.rail_min_gbps"].value == pytest.approx(9.4)  # 100 Gb/s = 12.5 GB/s, x 0.75
    assert edr["internode.rail_min_gbps"].source.startswith("hardware floor: an InfiniBand port at 100 Gb/s")
