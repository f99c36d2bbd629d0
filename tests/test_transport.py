"""The transport NCCL used, from recorded NCCL INFO logs (NCCL 2.2x's wording, src/transport/*.cc) and
recorded NVML answers: the parser, each transport, the expectation from NVLink, the mismatch message."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from acceptance.families import transport
from acceptance.families.transport import RankLog
from acceptance.plugin.checker import Checker
from acceptance.probes import nvml
from acceptance.profile.loader import load
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.placement import Placement
from acceptance.schema.sizes import parse_size
from tests.harness import categorized

HOST = "gpu-node-1"


def _line(rank: int, dev: int, text: str) -> str:
    return f"{HOST}:{4100 + rank}:{4200 + rank} [{dev}] NCCL INFO {text}"


def _init(rank: int, dev: int, nranks: int = 2) -> str:
    return _line(
        rank,
        dev,
        f"ncclCommInitRankConfig comm 0x55d0c8a0 rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
        f"busId {18 + dev}000 commId 0x5f1c2e9d0a7b3c41 - Init START",
    )


# two ranks of one node, GPUs 0 and 1 joined by NVLink: NCCL's own report of each setting
P2P = {
    0: [
        _init(0, 0),
        _line(0, 0, "NCCL_DEBUG_SUBSYS set by environment to INIT,P2P,NET."),
        _line(0, 0, "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"),
        _line(0, 0, "Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read"),
        _line(0, 0, "Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read"),
        _line(0, 0, "Connected all rings, use ring PXN 0 GDR 1"),
    ],
    1: [
        _init(1, 1),
        _line(1, 1, "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read"),
        _line(1, 1, "Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read"),
    ],
}
SHM = {  # NCCL_P2P_DISABLE=1
    0: [_init(0, 0), _line(0, 0, "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct")],
    1: [_init(1, 1), _line(1, 1, "Channel 00 : 1[1] -> 0[0] via SHM/direct/direct")],
}
SOCKET = {  # NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1: the network, even inside the node
    0: [
        _init(0, 0),
        _line(0, 0, "Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0"),
        _line(0, 0, "Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0"),
    ],
    1: [
        _init(1, 1),
        _line(1, 1, "Channel 00/0 : 0[0] -> 1[1] [receive] via NET/Socket/0"),
        _line(1, 1, "Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0"),
    ],
}
IB = {  # NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 on a node with InfiniBand: GPUDirect RDMA through the NIC
    0: [
        "[2026-05-05 06:16:47] " + _init(0, 0),  # a timestamp where NCCL_DEBUG_TIMESTAMP_LEVELS asks for one
        _line(0, 0, "Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA"),
        _line(0, 0, "Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0(1)/GDRDMA/Shared"),
    ],
    1: [_init(1, 1), _line(1, 1, "Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/1/GDRDMA")],
}


def _logs(recorded: dict[int, list[str]], host: str = HOST) -> list[RankLog]:
    out: list[RankLog] = []
    for rank, lines in recorded.items():
        dev, connections = transport.parse("\n".join(lines))
        out.append({"rank": rank, "host": host, "local_rank": rank, "dev": dev, "connections": connections})
    return out


NVLINK = {HOST: {"0-1": True}}
PCIE_ONLY = {HOST: {"0-1": False}}


def test_the_parser_reads_each_transport_and_the_rank_s_own_gpu() -> None:
    dev, found = transport.parse("\n".join(IB[0]))
    assert dev == 0
    assert found == [
        {"src": 1, "src_dev": 1, "dst": 0, "dst_dev": 0, "transport": "NET/IB/0/GDRDMA", "kind": "NET",
         "receive": True},
        {"src": 0, "src_dev": 0, "dst": 1, "dst_dev": 1, "transport": "NET/IB/0(1)/GDRDMA/Shared", "kind": "NET",
         "receive": False},
    ]  # fmt: skip
    assert [c["transport"] for c in transport.parse("\n".join(SHM[1]))[1]] == ["SHM/direct/direct"]
    assert transport.parse("\n".join(P2P[0]))[1][0]["kind"] == "P2P"
    assert transport.parse("no NCCL here\nNCCL INFO Connected all rings") == (None, [])
    # without the init line, the rank's side of its first connection names its GPU
    assert transport.parse(_line(1, 3, "Channel 00/0 : 1[3] -> 0[2] via P2P/IPC"))[0] == 3


@pytest.mark.parametrize(
    ("recorded", "used"),
    [
        (P2P, ["P2P/CUMEM/read"]),
        (SHM, ["SHM/direct/direct"]),
        (SOCKET, ["NET/Socket/0"]),
        (IB, ["NET/IB/0(1)/GDRDMA/Shared", "NET/IB/0/GDRDMA", "NET/IB/1/GDRDMA"]),
    ],
)
def test_each_pair_is_named_with_the_transports_it_used(recorded: dict[int, list[str]], used: list[str]) -> None:
    pairs, unresolved = transport.resolve(_logs(recorded), NVLINK)
    assert unresolved == []
    assert [(p["src"], p["dst"]) for p in pairs] == [(0, 1), (1, 0)]
    assert sorted({t for p in pairs for t in p["transports"]}) == sorted(used)
    assert all(p["nvlink"] is True and p["expected"] == "P2P" for p in pairs)
    assert all(p["mismatch"] is (used != ["P2P/CUMEM/read"]) for p in pairs)


def test_without_nvlink_nothing_is_expected() -> None:
    """PCIe between the GPUs (NVML: no NVLink): SHM is NCCL's own choice, recorded, never a mismatch."""
    pairs, _ = transport.resolve(_logs(SHM), PCIE_ONLY)
    assert all(p["nvlink"] is False and p["expected"] is None and not p["mismatch"] for p in pairs)
    found = transport.record(_logs(SHM), PCIE_ONLY, {})
    assert transport.unjudged(transport.inside_nodes(found["pairs"]), found) == (
        "NVML says no NVLink joins any of the 2 rank pairs: nothing to assert (transports recorded)"
    )


def test_nvlink_not_known_is_said_not_passed() -> None:
    found = transport.record(_logs(SHM), {HOST: "NVML: pynvml is not installed"}, {})
    assert found["recorded"] and not found["nvlink_known"]
    reason = transport.unjudged(found["pairs"], found)
    assert reason is not None and "NVLink not known on gpu-node-1 (gpu-node-1: NVML: pynvml is not installed)" in reason


def test_the_mismatch_names_the_pair_the_transport_and_the_setting_that_forced_it() -> None:
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_ALGO": "Ring", "PATH": "/bin"}
    found = transport.record(_logs(SHM), NVLINK, env)
    assert found["settings"] == {"NCCL_P2P_DISABLE": "1"}
    pairs = transport.inside_nodes(found["pairs"])
    assert transport.unjudged(pairs, found) is None
    assert transport.summary(pairs, found["settings"]) == (
        "2 of 2 rank pairs joined by NVLink went another way: "
        "gpu-node-1 GPU 0 -> GPU 1: SHM/direct/direct, expected P2P "
        "(NVLink joins the GPUs; NCCL_P2P_DISABLE=1 set in the environment); "
        "gpu-node-1 GPU 1 -> GPU 0: SHM/direct/direct, expected P2P "
        "(NVLink joins the GPUs; NCCL_P2P_DISABLE=1 set in the environment)"
    )
    both = transport.record(_logs(SOCKET), NVLINK, {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1"})
    assert "NET/Socket/0, expected P2P (NVLink joins the GPUs; NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1 set" in (
        transport.summary(both["pairs"], both["settings"])
    )
    unforced = transport.record(_logs(SHM), NVLINK, {})
    assert "no NCCL setting forced it" in transport.summary(unforced["pairs"], unforced["settings"])


def test_a_figure_slowed_by_a_forced_transport_names_the_setting_as_its_cause() -> None:
    """A p2p or busbw under its floor because the run's environment turned NVLink off: the cause line names
    the setting (its failure is then the setting's, ``plugin.drain_hooks.categorize``); none where nothing
    forced it, or nothing went another way."""
    forced = transport.record(_logs(SHM), NVLINK, {"NCCL_P2P_DISABLE": "1"})
    assert transport.forced(forced) == (
        "NCCL's transport: 2 rank pair(s) joined by NVLink went another way, NCCL_P2P_DISABLE=1 "
        f"{transport.FORCED_BY_SETTING}"
    )
    assert transport.forced(transport.record(_logs(SHM), NVLINK, {})) == ""
    assert transport.forced(transport.record(_logs(P2P), NVLINK, {"NCCL_P2P_DISABLE": "1"})) == ""
    assert transport.forced(None) == ""
    # a call of 64 B over host memory is as fast as over NVLink: not the setting's; a larger one (unmeasured), or
    # one sent over the network, is
    assert transport.forced(forced, 64) == ""
    assert transport.forced(forced, 128) == transport.forced(forced)
    sockets = transport.record(_logs(SOCKET), NVLINK, SOCKETS_SET)
    assert transport.forced(sockets, 64) == transport.forced(sockets) != ""


def _shipped_module(name: str) -> Any:
    """A module of ``tests_cluster/`` loaded under a name of its own: importing the package itself would clash
    with the copies of it that the pytester runs of this session load as theirs."""
    path = Path(__file__).parents[1] / "tests_cluster" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"shipped_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOCKETS_SET = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
HOST_MEMORY_SET = {"NCCL_P2P_DISABLE": "1"}


@pytest.mark.parametrize(
    ("test", "case", "value", "logs", "settings", "category"),
    [
        # a 64 B call over sockets: the setting's; within its bound: no cause at all
        ("test_latency", ("all_reduce", "64"), 25.8, SOCKET, SOCKETS_SET, "environment"),
        ("test_latency", ("all_reduce", "64"), 9.6, SOCKET, SOCKETS_SET, "passed"),
        # over host memory a 64 B call is as fast as over NVLink: a slow one is not the setting's
        ("test_latency", ("all_reduce", "64"), 25.8, SHM, HOST_MEMORY_SET, None),
        # a 1 MiB call's time and a 1 GiB call's busbw over host memory are
        ("test_time_per_call", ("all_reduce", "1M"), 456.5, SHM, HOST_MEMORY_SET, "environment"),
        ("test_busbw", ("all_reduce", "1G"), 28.7, SHM, HOST_MEMORY_SET, "environment"),
    ],
)  # fmt: skip
def test_a_collective_slowed_by_a_forced_transport_is_the_setting_s(
    tmp_path: Path,
    test: str,
    case: tuple[str, str],
    value: float,
    logs: dict[int, list[str]],
    settings: dict[str, str],
    category: str | None,
) -> None:
    """A collective's figure past its bound (h200-x2's) where a setting sent the NVLink pairs another way that
    slows it names the setting, and its failure is then the setting's (environment), not the node's: NCCL over
    sockets for a 64 B call's latency, over host memory for a 1 MiB call's time and a 1 GiB call's busbw. Host
    memory is no cause of a slow 64 B call (as fast as NVLink there); a figure within its bound names none."""
    op, size = case
    row = {"op": op, "size": size, "bytes": parse_size(size), "time_us": value, "time_us_max": value}
    row |= {"latency_us": value, "busbw_gbps": value, "algbw_gbps": value / 2, "timing": "nccl", "wrong": 0}
    sweep = {"rows": [row], "transport": transport.record(_logs(logs), NVLINK, settings)}
    run = ClusterRun(load("h200-x2"), Placement(1, 0, "127.0.0.1", 29400, "default"), tmp_path / "ev", worker=False)
    item = SimpleNamespace(nodeid=f"tests_cluster/test_collectives.py::{test}", user_properties=[])
    try:
        with pytest.raises(pytest.fail.Exception) if category != "passed" else contextlib.nullcontext() as failed:
            module = _shipped_module("test_collectives")
            figures = module.figures.__wrapped__(run, sweep)  # the module's fixture, called as the rules give them
            getattr(module, test)(run, sweep, figures, case, Checker(run, cast(Any, item)))
        message = str(failed.value) if failed is not None else ""
        categories = categorized(run, item.nodeid, message)
    finally:
        run.close()
    assert ("set in the environment" in message) is (category == "environment")
    assert categories.get(item.nodeid) == (None if category == "passed" else category)


def test_a_healthy_node_reads_every_pair_over_p2p() -> None:
    found = transport.record(_logs(P2P), NVLINK, {})
    assert transport.mismatches(found["pairs"]) == []
    assert transport.summary(found["pairs"], {}) == "2 rank pairs joined by NVLink, each over P2P"
    assert transport.pair_map(found["pairs"]) == {
        "gpu-node-1 GPU 0 -> gpu-node-1 GPU 1": "P2P/CUMEM/read",
        "gpu-node-1 GPU 1 -> gpu-node-1 GPU 0": "P2P/CUMEM/read",
    }


def test_two_nodes_net_peers_by_world_rank_and_one_node_s_p2p_off() -> None:
    """Two nodes of two GPUs (ranks 0-1 on a, 2-3 on b), node b started with NCCL_P2P_DISABLE=1: b's
    pair went SHM (a mismatch), a's P2P; the rails went over the network, named by their world ranks."""
    a = {
        0: [_init(0, 0, 4), _line(0, 0, "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"),
            _line(0, 0, "Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA")],
        1: [_init(1, 1, 4), _line(1, 1, "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read"),
            _line(1, 1, "Channel 00/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA")],
    }  # fmt: skip
    b = {
        2: [_init(2, 0, 4), _line(2, 0, "Channel 00 : 2[0] -> 3[1] via SHM/direct/direct"),
            _line(2, 0, "Channel 00/0 : 0[0] -> 2[0] [receive] via NET/IB/0/GDRDMA")],
        3: [_init(3, 1, 4), _line(3, 1, "Channel 00 : 3[1] -> 2[0] via SHM/direct/direct"),
            _line(3, 1, "Channel 00/0 : 3[1] -> 1[1] [send] via NET/IB/1/GDRDMA"),
            _line(3, 1, "Channel 00/1 : 1[1] -> 0[1] [send] via NET/IB/1/GDRDMA")],  # a subgroup's ranks
    }  # fmt: skip
    logs = [*_logs(a, "node-a"), *_logs(b, "node-b")]
    found = transport.record(logs, {"node-a": {"0-1": True}, "node-b": {"0-1": True}}, {})
    used = {(p["src"], p["dst"]): p["transports"] for p in found["pairs"]}
    assert used == {
        (0, 1): ["P2P/CUMEM/read"], (1, 0): ["P2P/CUMEM/read"],
        (2, 3): ["SHM/direct/direct"], (3, 2): ["SHM/direct/direct"],
        (0, 2): ["NET/IB/0/GDRDMA"], (3, 1): ["NET/IB/1/GDRDMA"],
    }  # fmt: skip
    assert [(p["src"], p["dst"]) for p in transport.mismatches(found["pairs"])] == [(2, 3), (3, 2)]
    rails = [p for p in found["pairs"] if p["src_host"] != p["dst_host"]]
    assert all(p["nvlink"] is None and not p["mismatch"] for p in rails)  # across nodes: recorded only
    # rank 3 as rank 1 of a subgroup, its peer that group's rank 0 on GPU 1: world rank 0's GPU is 0, so
    # the peer is not guessed but kept apart
    assert found["unresolved"] == [{"rank": 3, "peer_comm_rank": 0, "peer_dev": 1, "transport": "NET/IB/1/GDRDMA"}]


def test_two_nodes_of_one_host_each_with_its_own_environment() -> None:
    """Two nodes sharing a host name (two jobs' shares of a 4-GPU machine, NCCL told apart by NCCL_HOSTID):
    node 1 (NVML GPUs 2 and 3) started with NCCL_P2P_DISABLE=1, node 0 not. Pairs across the two nodes
    went over the network and are not asserted, though NVLink joins every GPU of the host; node 1's pair
    went SHM and names node 1's own setting, which the run's (node 0's) environment lacks."""
    node0 = {
        0: [_init(0, 0, 4), _line(0, 0, "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"),
            _line(0, 0, "Channel 00/0 : 0[0] -> 2[2] [send] via NET/Socket/0")],
        1: [_init(1, 1, 4), _line(1, 1, "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read")],
    }  # fmt: skip
    node1 = {
        2: [_init(2, 2, 4), _line(2, 2, "Channel 00 : 2[2] -> 3[3] via SHM/direct/direct"),
            _line(2, 2, "Channel 00/0 : 0[0] -> 2[2] [receive] via NET/Socket/0")],
        3: [_init(3, 3, 4), _line(3, 3, "Channel 00 : 3[3] -> 2[2] via SHM/direct/direct")],
    }  # fmt: skip
    logs = _logs(node0) + _logs(node1)
    for log in logs:
        log["local_rank"] = log["rank"] % 2
        log["node"] = log["rank"] // 2
        log["settings"] = {"NCCL_P2P_DISABLE": "1"} if log["node"] == 1 else {}
    every_pair = {f"{a}-{b}": True for a in range(4) for b in range(a + 1, 4)}
    found = transport.record(logs, {HOST: every_pair}, {})  # node 0's environment: nothing forced
    inside = transport.inside_nodes(found["pairs"])
    assert sorted((p["src"], p["dst"]) for p in inside) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    assert [(p["src"], p["dst"]) for p in transport.mismatches(found["pairs"])] == [(2, 3), (3, 2)]
    across = [p for p in found["pairs"] if p not in inside]
    assert across and all(p["expected"] is None and not p["mismatch"] for p in across)
    text = transport.summary(inside, found["settings"])
    assert text.startswith("2 of 4 rank pairs joined by NVLink went another way")
    assert "NCCL_P2P_DISABLE=1 set in the environment" in text and "no NCCL setting forced it" not in text
    assert found["settings"] == {"NCCL_P2P_DISABLE": "1"}
    assert transport.forced(found).startswith("NCCL's transport: 2 rank pair(s) joined by NVLink went another way")


class _Nvml:
    """A recorded NVML: ``links`` holds the GPU pairs NVLink joins."""

    NVML_P2P_CAPS_INDEX_NVLINK = 3
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_NOT_SUPPORTED = 5

    class NVMLError(Exception):
        pass

    def __init__(self, count: int, links: set[tuple[int, int]], fail: bool = False) -> None:
        self.count, self.links, self.fail = count, links, fail

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return SimpleNamespace(index=index)

    def nvmlDeviceGetP2PStatus(self, a: Any, b: Any, capability: int) -> int:
        if self.fail:
            raise self.NVMLError("Not Supported")
        assert capability == self.NVML_P2P_CAPS_INDEX_NVLINK
        return self.NVML_P2P_STATUS_OK if (a.index, b.index) in self.links else self.NVML_P2P_STATUS_NOT_SUPPORTED


def test_nvlink_pairs_from_recorded_nvml_answers() -> None:
    """Four GPUs, NVLink between every pair but 1-3 (a link down there, or a PCIe-only pair)."""
    links = {(0, 1), (0, 2), (0, 3), (1, 2), (2, 3)}
    assert nvml.read_nvlink_pairs(_Nvml(4, links)) == {
        "0-1": True, "0-2": True, "0-3": True, "1-2": True, "1-3": False, "2-3": True,
    }  # fmt: skip
    assert nvml.read_nvlink_pairs(_Nvml(2, set(), fail=True)) == {"not_measured": "P2P status: Not Supported"}
