"""Five and eight CPU "nodes" (sixteen with ``ISOLATION_NETNS_16=1``: minutes on two cores), each a pytest
in its own network namespace, one node's link throttled by tc: the rails across nodes fail their bound,
and the isolation rounds, with local-cpu's own settings, name the throttled node and no other.

Needs root, iproute2 and unshare (CI has them); skips with the reason elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import netns
from tests.test_multinode import base_env

SLOW_NODE = 3
# a rail's floor as for any working loopback link (local-cpu's connectivity.p2p_min_gbps); local-cpu itself
# bounds no rail, since its own run has one node and would leave the bound unchecked
FLOOR = 0.02
# 30 Mbit/s = 0.00375 GB/s: a fifth of that floor, and under a tenth of the slowest healthy pair seen on a
# loaded 2-core machine (0.05 GB/s; local-cpu's slow_pair_fraction is 0.05); the rate at which the
# isolation once named a healthy node beside the throttled one
RATE = "30mbit"


def suite(nodes: int) -> list[str]:
    return [
        "--cluster-profile",
        "local-cpu",
        "tests_cluster/test_internode.py",
        "-k",
        "rail",
        "--cluster-set",
        f"topology.nodes={nodes}",
        "--cluster-set",
        "topology.ranks_per_node=1",
        "--cluster-set",
        f"thresholds.internode.rail_min_gbps.min={FLOOR}",
    ]


pytestmark = [
    pytest.mark.e2e,  # every node is a pytest that starts torchrun
    pytest.mark.skipif(netns.missing() is not None, reason=f"no network namespaces: {netns.missing()}"),
]


SIXTEEN = pytest.param(
    16, marks=pytest.mark.skipif(os.environ.get("ISOLATION_NETNS_16") != "1", reason="16 nodes: ISOLATION_NETNS_16=1")
)


@pytest.fixture(params=[5, 8, SIXTEEN], ids=lambda n: f"{n}nodes")
def bed(request: pytest.FixtureRequest) -> Iterator[netns.TestBed]:
    made = netns.TestBed(int(request.param))
    try:
        yield made.start()
    finally:
        made.close()


def evidence(folder: Path, node: int) -> dict[str, Any]:
    (found,) = folder.glob(f"node{node}-*/evidence.json")
    return dict(json.loads(found.read_text()))


def test_the_throttled_node_alone_is_named_and_the_verdict_is_fail(bed: netns.TestBed, tmp_path: Path) -> None:
    bed.throttle(SLOW_NODE, RATE)
    runs = netns.run_suite(bed, suite(bed.nodes), tmp_path, base_env())
    culprit = f"node {SLOW_NODE} (host {bed.host(SLOW_NODE)}): "
    for run in runs:
        assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.output[-6000:]
        line = next((ln for ln in run.output.splitlines() if culprit in ln), "")
        assert "pairs with cleared partners" in line and "rail GPU 0 <-> GPU 0 at" in line, run.output[-6000:]
        assert "the only rail" in line and f"{bed.host(SLOW_NODE)} GPU 0" in line
        assert evidence(tmp_path, run.node)["verdict"] == "FAIL"
    checks = {c["metric"]: c for t in evidence(tmp_path, 0)["tests"] for c in t["checks"]}
    assert checks["internode.rail_min_gbps"]["verdict"] == "fail"
    assert checks["internode.isolation_culprits"]["value"] == 1
    (found,) = [
        t["measurements"]["isolation"] for t in evidence(tmp_path, 0)["tests"] if "isolation" in t["measurements"]
    ]
    print(
        f"{bed.nodes} nodes: named {found['culprits']}; noise per round "
        + " -> ".join(f"{x:.0%}" for x in found["noise_by_round"])
        + f"; {found['message']}"
    )
    assert found["culprits"] == [SLOW_NODE], found["message"]
    assert len(found["rounds"]) <= 4 and found["repeats"] == 5
    assert found["pair_matrix"]["labels"][SLOW_NODE] == f"node {SLOW_NODE} (host {bed.host(SLOW_NODE)})"


def test_the_test_bed_leaves_nothing_behind() -> None:
    made = netns.TestBed(2)
    names = [made.switch, made.ns(0), made.ns(1)]
    try:
        made.start()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(name in listed for name in names)
    finally:
        made.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)
    assert not any((netns.NETNS_ETC / name).exists() for name in names)
