"""Two pytest processes as two nodes on loopback, placed only by the variables a cluster sets.

Each run is the real thing: both plugins meet, agree on the plan, and run the connectivity probe
through two torchrun agents that rendezvous over c10d. One rank per node keeps it quick.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import free_port

pytestmark = pytest.mark.e2e  # every test here starts pytest processes that start torchrun

ROOT = Path(__file__).resolve().parent.parent
HARNESS_TIMEOUT_S = 300  # only so that a broken run cannot hang CI; nothing here measures time
PLACEMENT_VARS = ("SLURM_", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "JOB_COMPLETION_INDEX", "CLUSTER_")
# one rank per node has no link inside a node to bound: its rails are the internode family's
QUICK = ["tests_cluster/", "-k", "connectivity", "--cluster-set", "topology.ranks_per_node=1"]
QUICK += ["--cluster-set", "thresholds.connectivity.p2p_min_gbps=null"]
# two ranks per node, so that the intra-node figure and the internode efficiency exist
ACROSS = ["tests_cluster/", "-k", "connectivity or internode"]


@dataclass
class Node:
    rank: int
    returncode: int
    output: str
    evidence_dir: Path

    def evidence(self) -> dict[str, Any]:
        found = list(self.evidence_dir.glob(f"node{self.rank}-*/evidence.json"))
        assert len(found) == 1, f"node {self.rank}: evidence files {found}\n{self.output}"
        return json.loads(found[0].read_text())


def base_env() -> dict[str, str]:
    """This machine's environment without anything that would place it in a cluster already."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLACEMENT_VARS)}
    env.pop("CLUSTER_PROFILE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_nodes(
    tmp_path: Path, envs: list[dict[str, str]], extra: list[list[str]] | None = None, suite: list[str] = QUICK
) -> list[Node]:
    """Start one pytest per environment at once; wait for all of them."""
    procs = []
    for rank, env in enumerate(envs):
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cluster-profile", "local-cpu"]
        argv += ["--cluster-set", "topology.nodes=2"]  # local-cpu is a one-node profile
        argv += [*suite, "--cluster-evidence", str(tmp_path), *(extra[rank] if extra else [])]
        procs.append(
            subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**base_env(), **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    nodes = []
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=HARNESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other in procs:
                os.killpg(other.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"node {rank} did not finish within the harness limit\n{out[-4000:]}")
        nodes.append(Node(rank, proc.returncode, out, tmp_path))
    return nodes


def assert_cluster_passed(nodes: list[Node], source: str) -> None:
    """Every gate held on every node; these runs select part of the suite, so the verdict says PARTIAL."""
    for node in nodes:
        assert node.returncode == 0, node.output[-6000:]
        assert f"(from {source})" in node.output
        # two pytests on one machine: one name to the rendezvous
        assert "one name for several nodes in torchrun's rendezvous (nodes 0, 1 are all " in node.output
        assert node.evidence()["verdict"] == "PARTIAL" and node.evidence()["errors"] == []
        assert list(node.evidence_dir.glob(f"node{node.rank}-*/junit-*.xml"))
    cluster = nodes[0].evidence()["cluster"]
    assert sorted(n["node_rank"] for n in cluster["nodes"]) == [0, 1]
    assert [(v["node_rank"], v["verdict"]) for v in cluster["node_verdicts"]] == [(0, "PARTIAL"), (1, "PARTIAL")]
    assert cluster["plan"]["digest"] == nodes[1].evidence()["cluster"]["plan"]["digest"]


def test_two_slurm_nodes_reach_the_same_verdict_across_nodes(tmp_path: Path) -> None:
    port = str(free_port())
    common = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "127.0.0.[1-2]", "MASTER_PORT": port}
    nodes = run_nodes(tmp_path, [{**common, "SLURM_NODEID": str(r)} for r in range(2)], suite=ACROSS)
    assert_cluster_passed(nodes, "slurm")
    checks = {c["metric"]: c for t in nodes[0].evidence()["tests"] for c in t["checks"]}
    efficiency = checks["internode.all_reduce.efficiency@1M"]
    assert efficiency["value"] > 0 and "inside one node" in efficiency["detail"]
    assert checks["internode.one_gpu_per_node.all_reduce.wrong@1M"]["verdict"] == "pass"
    rails = checks["internode.rail_min_gbps"]
    assert rails["value"] > 0 and "4 rail links, 1M each way in 1 round(s); slowest: " in rails["detail"]
    assert checks["internode.isolation_culprits"]["value"] == 0, "a healthy cluster runs no isolation"
    assert not [p for p in nodes[0].evidence()["probes"] if p["key"].startswith("isolation")]
    # both nodes recorded the same figures: the probe's result is cluster-wide
    other = {c["metric"]: c["value"] for t in nodes[1].evidence()["tests"] for c in t["checks"]}
    assert other == {name: c["value"] for name, c in checks.items()}


def test_two_kubernetes_pods_reach_the_same_verdict(tmp_path: Path) -> None:
    port = str(free_port())
    common = {"NNODES": "2", "CLUSTER_HEAD": "localhost", "MASTER_PORT": port}
    nodes = run_nodes(tmp_path, [{**common, "JOB_COMPLETION_INDEX": str(r)} for r in range(2)])
    assert_cluster_passed(nodes, "kubernetes indexed job")


def test_a_plan_mismatch_stops_every_node_naming_the_node_and_the_difference(tmp_path: Path) -> None:
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    envs = [{**common, "NODE_RANK": str(r)} for r in range(2)]
    nodes = run_nodes(tmp_path, envs, extra=[[], ["--cluster-set", "connectivity.p2p_iters=2"]])
    for node in nodes:
        assert node.returncode == pytest.ExitCode.USAGE_ERROR, node.output[-6000:]
        assert "the nodes disagree on the plan" in node.output
        assert "node 1 (" in node.output and "connectivity.p2p_iters: 2 vs 3" in node.output
        evidence = node.evidence()
        assert evidence["verdict"] == "FAIL" and not evidence["complete"]
        assert not evidence["probes"], "no probe may start before the nodes agree"


def test_a_missing_node_is_named_after_the_rendezvous_timeout(tmp_path: Path) -> None:
    env = {"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    (node,) = run_nodes(tmp_path, [env], extra=[["--cluster-set", "timeouts.rendezvous=3"]])
    assert node.returncode == pytest.ExitCode.USAGE_ERROR, node.output[-6000:]
    assert "missing node ranks: [1]" in node.output
    assert "missing node ranks: [1]" in node.evidence()["errors"][0]


def test_two_nodes_whose_rails_miss_their_bound_can_only_blame_their_pair(tmp_path: Path) -> None:
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    suite = ["tests_cluster/test_internode.py", "-k", "rail"]
    suite += ["--cluster-set", "thresholds.internode.rail_min_gbps.min=1e6"]  # no link is that fast
    nodes = run_nodes(tmp_path, [{**common, "NODE_RANK": str(r)} for r in range(2)], suite=suite)
    for node in nodes:
        assert node.returncode == pytest.ExitCode.TESTS_FAILED, node.output[-6000:]
        said = "two nodes can only blame their pair, not one node: which end is slow takes a third node's reading"
        said += "; rail GPU"
        assert said in node.output, node.output[-6000:]
        evidence = node.evidence()
        assert evidence["verdict"] == "FAIL"
        rounds = [p for p in evidence["probes"] if p["key"].startswith("isolation")]
        assert [(p["key"], p["status"]) for p in rounds] == [("isolation-1", "ok"), ("isolation-2", "ok")]
        (found,) = [t["measurements"]["isolation"] for t in evidence["tests"] if "isolation" in t["measurements"]]
        assert found["pair_matrix"]["matrix"][0][1] > 0 and len(found["rails"]) == 4  # 2 rails, both ways


def test_a_node_that_fails_its_preflight_stops_every_node_at_once(tmp_path: Path) -> None:
    """Node 1 fails its preflight (injected: this machine has no GPU to miss). Node 0 hears of it when the
    nodes meet and starts no probe either, instead of waiting for node 1 at the first one."""
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    envs = [{**common, "NODE_RANK": "0"}, {**common, "NODE_RANK": "1", "ACCEPTANCE_TEST_FAULT": "preflight"}]
    suite = [*QUICK[:2], "connectivity or gpu_count", *QUICK[3:]]
    nodes = run_nodes(tmp_path, envs, suite=suite)
    line = "failed its preflight: injected preflight failure (ACCEPTANCE_TEST_FAULT=preflight)"
    for node in nodes:
        assert node.returncode == pytest.ExitCode.TESTS_FAILED, node.output[-6000:]
        evidence = node.evidence()
        assert evidence["verdict"] == "FAIL" and evidence["probes"] == [], node.output[-6000:]
        assert all(t["outcome"] in ("skipped", "error") for t in evidence["tests"]), node.output[-6000:]
    assert "node 1 (" in nodes[0].output and line in nodes[0].output, nodes[0].output[-6000:]
    assert any(line in e and e.startswith("preflight: node 1 (") for e in nodes[0].evidence()["errors"])
    assert nodes[1].evidence()["errors"][0] == "preflight: injected preflight failure (ACCEPTANCE_TEST_FAULT=preflight)"
