"""Three CPU "nodes", each a pytest in its own network namespace, one node's processes given 5% of a core
by a CPU-bandwidth cgroup: a genuinely slow "GPU" on another node. Every node's per-GPU check names it by
host and rank against the cluster's median, and the verdict is FAIL everywhere.

Needs root, iproute2, unshare and CPU-bandwidth cgroups (CI has them); skips with the reason elsewhere.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests import netns
from tests.test_multinode import base_env

NODES, SLOW_NODE = 3, 2
# the two healthy nodes share this machine's two cores (half of one or more each, beside another test
# worker) and the median of three is a healthy node's; the slow one gets a twentieth of one core once its
# compute probe is launched, before its ranks start (not earlier: its pytest's start-up at that speed would
# outlast the meeting), so every figure falls about 90% under the median, far past local-cpu's 50%
CORES = 0.05
SUITE = [
    "--cluster-profile",
    "local-cpu",
    "tests_cluster/test_compute.py",
    "-k",
    "within_tolerance",
    "--cluster-set",
    f"topology.nodes={NODES}",
    "--cluster-set",
    "topology.ranks_per_node=1",
    "--cluster-set",
    "timeouts.compute=600",  # the slow node's probe takes minutes on a loaded machine; not what is tested here
    # A CPU quota comes in bursts (5 ms of every 100 ms period at 5%): local-cpu's 512^3 matmul takes about
    # 1.5 ms of CPU a call, so a timed window of a few calls could land inside one burst at full speed, and the
    # slow node once read only 42% under the median. A 1024^3 call takes about 12 ms of CPU, more than a burst:
    # every window spans several periods (400-600 ms against 24 ms unthrottled, two calls a window).
    "--cluster-set",
    "compute.matmul_size=1024",
]

pytestmark = [
    pytest.mark.e2e,  # every node is a pytest that starts torchrun
    pytest.mark.skipif(netns.missing() is not None, reason=f"no network namespaces: {netns.missing()}"),
    pytest.mark.skipif(netns.cpu_cgroups() is None, reason="no CPU-bandwidth cgroups (cgroup v1 cpu, or v2)"),
]


def checks(folder: Path, node: int) -> dict[str, dict[str, Any]]:
    (found,) = folder.glob(f"node{node}-*/evidence.json")
    data = json.loads(found.read_text())
    assert data["verdict"] == "FAIL", data["errors"]
    return {c["metric"]: c for t in data["tests"] for c in t["checks"]}


def test_a_slow_gpu_on_another_node_is_named_by_every_node(tmp_path: Path) -> None:
    bed, ended = netns.TestBed(NODES), threading.Event()

    def slow_down_at_the_probe() -> None:  # the probe's folder is made before its ranks start: all is slow
        while not ended.wait(0.2):
            if list(tmp_path.glob(f"node{SLOW_NODE}-*/probes/*-compute")):
                bed.slow_cpu(SLOW_NODE, CORES)
                return

    watcher = threading.Thread(target=slow_down_at_the_probe, daemon=True)
    try:
        bed.start()
        bed.cpu_group(SLOW_NODE)
        groups = list(bed.cgroups.values())
        watcher.start()
        runs = netns.run_suite(bed, SUITE, tmp_path, base_env())
    finally:
        ended.set()
        watcher.join()
        bed.close()
    slow = f"{bed.host(SLOW_NODE)} rank {SLOW_NODE} (cpu) matmul"
    for run in runs:
        assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.output[-6000:]
        line = next((ln for ln in run.output.splitlines() if slow in ln), "")
        assert "under the median" in line, run.output[-6000:]
        matmul = checks(tmp_path, run.node)["compute.matmul_tflops_below_median"]
        assert matmul["verdict"] == "fail" and matmul["value"] > 0.5
        healthy = [f"{bed.host(n)} rank {n} (cpu) matmul" for n in range(NODES) if n != SLOW_NODE]
        assert not any(name in matmul["detail"] for name in healthy), matmul["detail"]
    assert groups and not any(group.exists() for group in groups), "the test bed leaves no cgroup behind"
