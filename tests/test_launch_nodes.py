"""The command lines of multi-node runs: torchrun's c10d rendezvous, and srun in the Slurm controller mode."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from acceptance.run import slurm_task
from acceptance.run.launcher import torchrun_argv
from acceptance.run.placement import Placement
from acceptance.schema.topology import Topology

OUT = Path("/evidence/probes/01-connectivity")
GPU = Topology(gpus_per_node=8)


def argv(topo: Topology, nodes: int, rank: int = 0, env: dict[str, str] | None = None) -> list[str]:
    placement = Placement(nodes, rank, "gpu-01", 29400, "slurm")
    return torchrun_argv("connectivity", OUT, topo, placement, "s1-1-connectivity", 120, env=env)


def option(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")), None)


def test_single_node_is_standalone() -> None:
    args = argv(GPU, 1)
    assert args[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in args
    assert option(args, "--rdzv-endpoint") is None


@pytest.mark.parametrize(("rank", "host"), [(0, "true"), (1, "false"), (3, "false")])
def test_multi_node_meets_through_c10d_and_node_0_hosts_the_store(rank: int, host: str) -> None:
    args = argv(GPU, 4, rank)
    assert option(args, "--nnodes") == "4"
    assert option(args, "--nproc-per-node") == "8"
    assert option(args, "--rdzv-backend") == "c10d"
    assert option(args, "--rdzv-endpoint") == "gpu-01:29400"
    assert option(args, "--rdzv-id") == "s1-1-connectivity"
    assert option(args, "--rdzv-conf") == f"join_timeout=120,is_host={host}"
    assert "--standalone" not in args
    assert args[-6:] == ["-m", "acceptance.probes.connectivity", "--spec", str(OUT / "spec.json"), "--out", str(OUT)]


def test_srun_controller_starts_one_torchrun_per_node() -> None:
    topo = Topology(gpus_per_node=8, launcher="srun", srun_args=["--gpus-per-node=8", "--container-image=img.sqsh"])
    args = argv(topo, 4, env={"SLURM_CPUS_ON_NODE": "96"})
    split = args.index(sys.executable)
    assert args[:split] == [
        "srun",
        "--nodes=4",
        "--ntasks=4",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--job-name=acceptance-connectivity",
        "--cpus-per-task=96",
        "--gpus-per-node=8",
        "--container-image=img.sqsh",
    ]
    task = args[split:]
    assert task[1:3] == ["-m", "acceptance.run.slurm_task"]
    # the task adds the store role itself, from SLURM_NODEID on its node
    assert option(task, "--rdzv-conf") == "join_timeout=120"
    assert option(task, "--rdzv-endpoint") == "gpu-01:29400"


def test_srun_without_cpu_count_leaves_cpus_to_slurm() -> None:
    args = argv(Topology(gpus_per_node=8, launcher="srun"), 2, env={})
    assert not any(a.startswith("--cpus-per-task") for a in args)


def test_srun_on_one_node_still_goes_through_srun() -> None:
    args = argv(Topology(gpus_per_node=8, launcher="srun"), 1)
    assert args[0] == "srun" and "--standalone" in args


@pytest.mark.parametrize(
    ("args", "node", "expected"),
    [
        (
            ["--nnodes=2", "--rdzv-conf=join_timeout=5", "-m", "p", "--rdzv-conf=x"],
            0,
            ["--nnodes=2", "--rdzv-conf=join_timeout=5,is_host=true", "-m", "p", "--rdzv-conf=x"],
        ),
        (["--nnodes=2", "-m", "p"], 1, ["--nnodes=2", "--rdzv-conf=is_host=false", "-m", "p"]),
        (["--rdzv-conf=", "script.py", "-a"], 2, ["--rdzv-conf=is_host=false", "script.py", "-a"]),
    ],
)
def test_slurm_task_sets_the_store_role_from_the_node_id(args: list[str], node: int, expected: list[str]) -> None:
    assert slurm_task.torchrun_args(args, node) == expected


def test_slurm_task_becomes_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(os, "execv", lambda path, full: calls.append((path, full)))
    monkeypatch.setenv("SLURM_NODEID", "0")
    slurm_task.main(["--nnodes=2", "-m", "acceptance.probes.connectivity"])
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    expected = [*torchrun, "--nnodes=2", "--rdzv-conf=is_host=true", "-m", "acceptance.probes.connectivity"]
    assert calls == [(sys.executable, expected)]


def test_slurm_task_outside_srun_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_NODEID", raising=False)
    with pytest.raises(SystemExit, match="run me under srun"):
        slurm_task.main(["-m", "x"])
