"""Across nodes: GPUDirect RDMA and each GPU's nearest NIC (``families.net_path``), on recorded NCCL logs and a
recorded sysfs PCIe tree. NCCL's wording is that of src/transport/net.cc and net_ib/init.cc; the lines are those
quoted in public NCCL issues, each test names its own."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from acceptance.families import net_path, transport
from acceptance.families.net_path import GpuPlace, NicPlace, NodeNetwork
from acceptance.families.transport import RankLog
from acceptance.plugin.api import transport_figure
from acceptance.plugin.checker import Checker
from acceptance.probes import pcie_places
from acceptance.profile.loader import load
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.placement import Placement
from tests.harness import categorized

# github.com/NVIDIA/nccl/issues/1537: a RoCE node's list of NICs (two HCAs, relaxed ordering on)
USING = (
    "hostname1:25668:27396 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; "
    "OOB primaryip:10.10.10.10<0>"
)


def _gpu(index: int, switch: str) -> GpuPlace:
    """A GPU below PCIe switch ``switch`` of root complex pci0000:00 (its root port, the switch's upstream and
    downstream ports, the GPU)."""
    bus = f"0000:{switch}:00.{index}"
    return {"root": "pci0000:00", "chain": [f"0000:00:{switch}.0", f"0000:{switch}:00.0", f"0000:{switch}:01.0", bus],
            "numa_node": 0, "index": index, "pci_bus_id": bus}  # fmt: skip


def _nic(name: str, switch: str, state: str = "ACTIVE") -> NicPlace:
    return {"root": "pci0000:00", "chain": [f"0000:00:{switch}.0", f"0000:{switch}:00.0", f"0000:{switch}:02.0",
            f"0000:{switch}:00.7"], "numa_node": 0, "name": name, "state": state, "link_layer": "Ethernet"}  # fmt: skip


# two GPUs, each with a NIC of its own under its PCIe switch (the HGX layout: one rail per GPU)
NODE: NodeNetwork = {
    "nics": [_nic("mlx5_0", "1a"), _nic("mlx5_1", "6b")],
    "gpus": [_gpu(0, "1a"), _gpu(1, "6b")],
    "peer_memory": "module/nvidia_peermem/version",
}


def _log(rank: int, dev: int, lines: list[str], host: str = "node-b", **settings: str) -> RankLog:
    text = "\n".join([USING, *(f"{host}:1:1 [{dev}] NCCL INFO {line}" for line in lines)])
    _, connections = transport.parse(text)
    return {"rank": rank, "host": host, "local_rank": dev, "dev": dev, "connections": connections,
            "nics": net_path.nic_names(text), "net_settings": settings}  # fmt: skip


def test_nccl_s_nic_list_and_net_transports_are_read() -> None:
    assert net_path.nic_names(USING) == {0: "mlx5_0", 1: "mlx5_1"}
    assert net_path.net_use("NET/IB/1(0)/GDRDMA/Shared") == net_path.NetUse("IB", 1, 0, True)
    assert net_path.net_use("NET/IB/1") == net_path.NetUse("IB", 1, None, False)
    assert net_path.net_use("P2P/CUMEM/read") is None


def test_the_pcie_distance_is_nccl_s_path_type() -> None:
    gpu, own, other = NODE["gpus"][0], NODE["nics"][0], NODE["nics"][1]
    assert net_path.distance(gpu, own) == "PIX"
    assert net_path.distance(gpu, other) == "PHB"
    far: NicPlace = {**other, "root": "pci0000:80", "numa_node": 1}
    assert net_path.distance(gpu, far) == "SYS"
    assert net_path.nearest(NODE, gpu) == (["mlx5_0"], "PIX")
    # NCCL_NET_GDR_LEVEL by name, or in NCCL's old numbers (src/graph/paths.cc, levelsOldToNew)
    assert net_path.gdr_level({"NCCL_NET_GDR_LEVEL": "PHB"}) == (8, "PHB")
    assert net_path.gdr_level({"NCCL_NET_GDR_LEVEL": "0"}) == (0, "LOC")
    assert net_path.gdr_level({"NCCL_NET_GDR_LEVEL": "2"}) == (5, "PXB")
    assert net_path.gdr_level({}) == (5, "PXB")


# github.com/NVIDIA/nccl/issues/897: "9[1a000] -> 2[6b000] [receive] via NET/IB/1": the receiving node staged
# through host memory, its peer-memory module not loaded (the maintainers' answer there)
STAGED = "Channel 00/0 : 9[1] -> 2[1] [receive] via NET/IB/1"


def test_a_gdr_capable_pair_without_gdrdma_names_the_missing_module() -> None:
    node: NodeNetwork = {**NODE, "peer_memory": None}
    found = net_path.judge([_log(2, 1, [STAGED])], {"node-b": node})
    assert [(f["host"], f["gpu"], f["category"]) for f in found] == [("node-b", 1, "configuration")]
    assert found[0]["text"].startswith(
        "node-b GPU 1 over mlx5_1 (PIX): staged through host memory, expected GDRDMA (NIC and GPU PIX, within "
        "NCCL's PXB); no peer-memory module loaded (/sys/module/nvidia_peermem absent"
    )
    assert net_path.NODE_CONFIGURATION in found[0]["text"]
    # the same line with GDRDMA, or where NCCL's default would not use it either (through the CPU): nothing
    assert net_path.judge([_log(2, 1, [STAGED + "/GDRDMA"])], {"node-b": node}) == []
    far: NodeNetwork = {**node, "gpus": [_gpu(0, "1a"), {**_gpu(1, "6b"), "chain": ["0000:00:03.0", "0000:6b:00.1"]}]}
    assert net_path.judge([_log(2, 1, [STAGED])], {"node-b": far}) == []
    # a host without a reading (no sysfs answer) is not judged
    assert net_path.judge([_log(2, 1, [STAGED])], {}) == []


def test_a_setting_that_turned_gdr_off_is_named_as_the_environment_s() -> None:
    found = net_path.judge([_log(2, 1, [STAGED], NCCL_NET_GDR_LEVEL="LOC")], {"node-b": NODE})
    assert [f["category"] for f in found] == ["environment"]
    assert found[0]["text"].endswith(f"NCCL_NET_GDR_LEVEL=LOC {transport.FORCED_BY_SETTING}")
    # a send without GDR is NCCL's own choice on GPUs before Ampere, unless NCCL_NET_GDR_READ=0 set it
    send = "Channel 00/0 : 2[1] -> 9[1] [send] via NET/IB/1"
    assert net_path.judge([_log(2, 1, [send])], {"node-b": NODE}) == []
    read_off = net_path.judge([_log(2, 1, [send], NCCL_NET_GDR_READ="0")], {"node-b": NODE})
    assert "NCCL_NET_GDR_READ=0 set in the environment" in read_off[0]["text"]
    # the NIC's port down: the hardware's
    down: NodeNetwork = {**NODE, "nics": [_nic("mlx5_0", "1a"), _nic("mlx5_1", "6b", "DOWN")]}
    assert [f["category"] for f in net_path.judge([_log(2, 1, [STAGED])], {"node-b": down})] == ["hardware"]


def test_two_gpus_on_one_nic_while_each_has_its_own_is_named() -> None:
    """GPU 1's channels on GPU 0's NIC (mlx5_0): named, with NCCL_IB_HCA where it narrowed the NICs."""
    logs = [
        _log(0, 0, ["Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA"], NCCL_IB_HCA="mlx5_0"),
        _log(1, 1, ["Channel 00/0 : 1[1] -> 3[1] [send] via NET/IB/0/GDRDMA"], NCCL_IB_HCA="mlx5_0"),
    ]
    found = net_path.judge(logs, {"node-b": NODE})
    assert [f["text"] for f in found] == [
        "node-b GPU 1: channels on mlx5_0 (shared with GPU 0), its nearest NIC is mlx5_1; NCCL_IB_HCA=mlx5_0 "
        f"{transport.FORCED_BY_SETTING}"
    ]
    unset = [_log(r["rank"], r["local_rank"], [], "node-b") | {"connections": r["connections"]} for r in logs]
    assert [f["category"] for f in net_path.judge(unset, {"node-b": NODE})] == ["fabric"]
    # each on its own NIC; or PXN (another GPU's NIC carries it): nothing
    own = [_log(0, 0, ["Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA"]),
           _log(1, 1, ["Channel 00/0 : 1[1] -> 3[1] [send] via NET/IB/1/GDRDMA"])]  # fmt: skip
    assert net_path.judge(own, {"node-b": NODE}) == []
    pxn = [logs[0], _log(1, 1, ["Channel 00/0 : 1[1] -> 3[1] [send] via NET/IB/0(0)/GDRDMA"])]
    assert net_path.judge(pxn, {"node-b": NODE}) == []


def test_sockets_on_a_node_without_rdma_are_no_mismatch() -> None:
    """Two nodes on one host without InfiniBand (the lent GPU machines): NCCL over sockets is all there is."""
    socket = ["Channel 00/0 : 0[0] -> 2[2] [send] via NET/Socket/0"]
    bare: NodeNetwork = {"nics": [], "gpus": [_gpu(0, "1a")], "peer_memory": None}
    assert net_path.judge([_log(0, 0, socket, NCCL_IB_DISABLE="1")], {"node-b": bare}) == []
    found = net_path.judge([_log(0, 0, socket, NCCL_IB_DISABLE="1")], {"node-b": NODE})
    assert [f["category"] for f in found] == ["environment"]
    assert "NET/Socket, expected NET/IB (mlx5_0, mlx5_1 ACTIVE); NCCL_IB_DISABLE=1" in found[0]["text"]


def _link(at: Path, target: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, at.parent), at)


def test_the_reader_places_nics_and_gpus_on_the_pcie_tree(tmp_path: Path) -> None:
    """A recorded /sys: mlx5_0 beside GPU 0 under one switch, mlx5_1 under another root complex; the
    peer-memory module loaded."""
    sys = tmp_path / "sys"
    switch = sys / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:1a:00.0"
    gpu = switch / "0000:1a:01.0" / "0000:1b:00.0"
    nic0 = switch / "0000:1a:02.0" / "0000:1c:00.0"
    nic1 = sys / "devices" / "pci0000:80" / "0000:80:01.0" / "0000:81:00.0"
    for device, numa in ((gpu, "0"), (nic0, "0"), (nic1, "1")):
        device.mkdir(parents=True)
        (device / "numa_node").write_text(numa + "\n")
    for hca, device, state in (("mlx5_0", nic0, "4: ACTIVE"), ("mlx5_1", nic1, "1: DOWN")):
        port = sys / "class" / "infiniband" / hca / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "link_layer").write_text("InfiniBand\n")
        _link(sys / "class" / "infiniband" / hca / "device", device)
    _link(sys / "bus" / "pci" / "devices" / "0000:1b:00.0", gpu)
    (sys / "module" / "nvidia_peermem").mkdir(parents=True)
    (sys / "module" / "nvidia_peermem" / "version").write_text("1.0\n")
    found = pcie_places.read(sys, gpu_bus_ids=["00000000:1B:00.0"])
    assert [(n["name"], n["state"], n["numa_node"]) for n in found["nics"]] == [
        ("mlx5_0", "ACTIVE", 0), ("mlx5_1", "DOWN", 1),
    ]  # fmt: skip
    assert [(g["index"], g["pci_bus_id"], g["root"]) for g in found["gpus"]] == [(0, "0000:1b:00.0", "pci0000:00")]
    assert found["peer_memory"] == "module/nvidia_peermem/version"
    assert net_path.nearest(found, found["gpus"][0]) == (["mlx5_0"], "PIX")
    assert net_path.distance(found["gpus"][0], found["nics"][1]) == "SYS"
    assert pcie_places.read(tmp_path / "none") == {"nics": [], "gpus": [], "peer_memory": None}


@pytest.mark.parametrize(
    ("settings", "category"),
    [({}, "configuration"), ({"NCCL_NET_GDR_LEVEL": "LOC"}, "environment"), (None, "passed")],
)
def test_the_transport_figure_fails_on_a_network_finding_with_its_category(
    tmp_path: Path, settings: dict[str, str] | None, category: str
) -> None:
    """The connectivity figure counts the NET findings beside the NVLink pairs; a staged pair for want of the
    peer-memory module is the node's configuration, one a setting forced is the environment's; a node with
    GDRDMA on every NIC passes, its GPU-to-NIC paths judged (not skipped for want of an NVLink pair)."""
    line = STAGED if settings is not None else STAGED + "/GDRDMA"
    logs = [_log(2, 1, [line], **(settings or {}))]
    found = transport.record(logs, {"node-b": {"0-1": True}}, {})
    networks: dict[str, NodeNetwork] = {"node-b": {**NODE, "peer_memory": None}}
    found["network"], found["network_paths"] = net_path.judge(logs, networks), net_path.paths(logs, networks)
    run = ClusterRun(load("h200-x2"), Placement(1, 0, "127.0.0.1", 29400, "default"), tmp_path / "ev", worker=False)
    item = SimpleNamespace(nodeid="tests_cluster/test_connectivity.py::test_transport", user_properties=[])
    message = ""
    try:
        try:
            transport_figure(Checker(run, cast(Any, item)), "connectivity.transport_mismatches", found)
        except pytest.fail.Exception as failed:
            message = str(failed)
        except pytest.skip.Exception as skipped:
            message = f"skipped: {skipped}"
        categories = categorized(run, item.nodeid, message)
    finally:
        run.close()
    if category == "passed":
        assert message == "" and categories == {}
        assert found["network_paths"] == ["node-b GPU 1 -> mlx5_1 (IB, GDRDMA)"]
        return
    assert "node-b GPU 1 over mlx5_1 (PIX): staged through host memory" in message
    assert categories[item.nodeid] == category
