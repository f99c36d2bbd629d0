"""The pieces of fault handling on their own: the preflight on recorded NVML/CUDA/PCI answers, naming the
stalled rank from recorded heartbeats, and the process side (parent-death signal, ending stopped processes)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from acceptance.families.health import NodeInventory, NvmlListed, TorchDevice, TorchView
from acceptance.profile.model import ProfileModel
from acceptance.run import diagnose, preflight, reaper

H200 = "NVIDIA H200"
BUS = ("0000:18:00.0", "0000:2a:00.0")
UUID = ("GPU-8f3a0000-0000-0000-0000-000000000000", "GPU-c41b0000-0000-0000-0000-000000000000")


def model(**topology: Any) -> ProfileModel:
    topo = {"gpus_per_node": 2, "gpu_model": H200, **topology}
    return ProfileModel.model_validate({"name": "h200-x2", "topology": topo})


def cuda(*indices: int) -> TorchView:
    devices: list[TorchDevice] = [
        {"index": n, "name": H200, "uuid": UUID[i], "pci_bus_id": BUS[i]} for n, i in enumerate(indices)
    ]
    return {"version": "2.6.0+cu124", "cuda": "12.4", "nccl": True, "available": bool(indices), "devices": devices}


def nvml(*indices: int) -> list[NvmlListed]:
    # NVML spells the bus id with an 8-digit domain
    return [{"index": n, "name": H200, "uuid": UUID[i], "pci_bus_id": f"0000{BUS[i]}"} for n, i in enumerate(indices)]


def judge(answers: NodeInventory, env: dict[str, str] | None = None, **topology: Any) -> preflight.PreflightResult:
    seen: list[dict[str, str]] = []

    def detect(env: Any) -> NodeInventory:
        seen.append(dict(env))
        return answers

    result = preflight.check(model(**topology), env or {}, detect)
    assert seen == [env or {}], "the answers come from the ranks' environment"
    assert "\n" not in result.message
    return result


def test_every_gpu_present_passes() -> None:
    result = judge({"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda(0, 1)})
    assert result.ok and result.message == ""
    assert [(g["cuda_index"], g["nvml_index"], g["pci_bus_id"]) for g in result.gpus] == [
        (0, 0, BUS[0]),
        (1, 1, BUS[1]),
    ]


def test_a_gpu_fallen_off_nvml_is_named_by_its_bus_id() -> None:
    result = judge({"pci": list(BUS), "nvml": nvml(0), "torch": cuda(0)})
    assert not result.ok and result.category == "hardware"  # the node's own GPU is gone: it drains
    assert result.message == (
        f"profile h200-x2 expects 2 {H200} GPU(s) on this node, torch 2.6.0+cu124 (CUDA 12.4) finds 1: "
        f"present cuda:0 ({BUS[0]}, {UUID[0]}, {H200}); missing the GPU at {BUS[1]} "
        "(on the PCI bus, not answering NVML: fallen off the bus, or no driver bound)"
    )


def test_a_gpu_hidden_by_the_job_s_environment_is_the_environment_s_not_the_node_s() -> None:
    """NVML lists the GPU, the job's CUDA_VISIBLE_DEVICES leaves it out: the GPU is there, the job was not
    given it. The cause (the variable and its value) comes first, then the next step; nothing drains."""
    result = judge({"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda(0)}, {"CUDA_VISIBLE_DEVICES": "0"})
    assert not result.ok and result.category == "environment"
    assert result.message.startswith(
        "the job's environment hides GPUs: CUDA_VISIBLE_DEVICES=0 leaves the job 1 of this node's 2 GPU(s), "
        "profile h200-x2 expects 2: "
    )
    assert f"hidden GPU 1 ({BUS[1]}, {UUID[1]}, {H200})" in result.message
    assert "give the job the node's GPUs (unset CUDA_VISIBLE_DEVICES" in result.message


def test_an_empty_cuda_visible_devices_is_the_job_s_environment() -> None:
    result = judge({"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda()}, {"CUDA_VISIBLE_DEVICES": ""})
    assert not result.ok and result.category == "environment"
    assert result.message.startswith(
        "the job's environment hides GPUs: CUDA_VISIBLE_DEVICES=\"\" leaves the job 0 of this node's 2 GPU(s)"
    )


def test_a_gpu_nvml_lists_and_cuda_cannot_use_without_the_variable_is_the_node_s() -> None:
    result = judge({"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda(0)})
    assert not result.ok and result.category == "hardware"
    assert f"missing GPU 1 ({BUS[1]}, {UUID[1]}, {H200}) (NVML lists it, CUDA does not" in result.message


def test_the_variable_hiding_fewer_gpus_than_are_short_leaves_the_rest_missing() -> None:
    # one GPU hidden, and the node has one fewer than the profile's three: a GPU of its own is gone
    result = judge({"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda(0)}, {"CUDA_VISIBLE_DEVICES": "0"},
                   gpus_per_node=3)  # fmt: skip
    assert not result.ok and result.category == "hardware"


H100 = "NVIDIA H100 80GB HBM3"


def other_model(answers: NodeInventory, name: str) -> NodeInventory:
    """``answers`` with every GPU named ``name`` (CUDA's and NVML's view alike)."""
    torch = answers["torch"]
    devices = [{**d, "name": name} for d in torch.get("devices", [])]
    listed = [{**g, "name": name} for g in answers["nvml"] or []]
    return {**answers, "torch": {**torch, "devices": devices}, "nvml": listed}  # type: ignore[typeddict-item]


@pytest.mark.parametrize("gpus_per_node", [4, 1], ids=["h200-x4-on-1x-h100", "same-count"])
def test_a_profile_for_another_gpu_model_is_the_wrong_profile(gpus_per_node: int) -> None:
    """An h200-x4 profile on a 1x H100 machine: the profile is the wrong one, not the node."""
    answers = other_model({"pci": [BUS[0]], "nvml": nvml(0), "torch": cuda(0)}, H100)
    result = judge(answers, gpus_per_node=gpus_per_node)
    assert not result.ok and result.category == "environment"
    assert result.message.startswith(
        f"wrong profile: h200-x2 is for {gpus_per_node}x {H200} (topology.gpu_model), this node has 1x {H100}: "
    )
    assert "cluster-acceptance init" in result.message


def test_a_gpu_gone_from_every_view_is_counted() -> None:
    result = judge({"pci": [BUS[0]], "nvml": None, "nvml_error": "NVML init: Driver Not Loaded", "torch": cuda(0)})
    assert result.message.endswith(
        "missing 1 GPU(s) that neither the PCI bus, NVML nor CUDA lists; NVML: NVML init: Driver Not Loaded"
    )


def test_more_ranks_than_gpus_counts_the_ranks() -> None:
    result = judge({"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda(0, 1)}, ranks_per_node=4)
    assert not result.ok and "expects 4 NVIDIA H200 GPU(s) on this node" in result.message


@pytest.mark.parametrize(
    ("torch", "expected"),
    [
        ({"version": "2.13.0+cpu", "cuda": None, "nccl": False, "available": False, "devices": []},
         "profile h200-x2 runs on CUDA GPUs (topology.device: cuda), but this torch 2.13.0+cpu is a CPU-only build "
         "(no CUDA in it): install torch's CUDA build for this node's driver (pip install torch==2.13.0 --index-url "
         "https://download.pytorch.org/whl/cuXYZ, a CUDA X.YZ no newer than the one nvidia-smi names), or pick a "
         "CPU profile such as local-cpu"),
        ({**cuda(0, 1), "nccl": False},
         "profile h200-x2 uses NCCL (topology.backend: nccl), but this torch 2.6.0+cu124 has no NCCL"),
        ({"error": "torch cannot be imported: No module named 'torch'"},
         "profile h200-x2 needs CUDA GPUs, but this node could not be inspected: torch cannot be imported: "
         "No module named 'torch'"),
    ],
    ids=["cpu-only-build", "no-nccl", "no-torch"],
)  # fmt: skip
def test_a_torch_that_cannot_run_the_profile_is_one_line(torch: TorchView, expected: str) -> None:
    result = judge({"pci": list(BUS), "nvml": nvml(0, 1), "torch": torch})
    assert not result.ok and result.message == expected


def test_a_cpu_profile_inspects_nothing() -> None:
    def detect(env: Any) -> NodeInventory:
        raise AssertionError("a CPU profile needs no GPU inventory")

    cpu = ProfileModel.model_validate({"name": "local", "topology": {"device": "cpu", "backend": "gloo"}})
    assert preflight.check(cpu, {}, detect).ok


NOW = time.time()  # one clock for writing the heartbeats and reading them: the ages in the messages are exact


def heartbeat(folder: Path, rank: int, progress: int, ago: float, **extra: Any) -> None:
    now = NOW
    state = {"rank": rank, "local_rank": rank, "host": "gpu-node-7", "pid": 1, "phase": "all_reduce 1G",
             "status": "running", "progress": progress, "progress_at": now - ago, "beat_at": now, **extra}  # fmt: skip
    (folder / f"rank-{rank}.json").write_text(json.dumps(state))


def test_the_rank_short_of_the_collective_is_named(tmp_path: Path) -> None:
    heartbeat(tmp_path, 0, progress=12, ago=40)
    heartbeat(tmp_path, 1, progress=11, ago=41, gpu_uuid=UUID[1])
    heartbeat(tmp_path, 2, progress=12, ago=40)
    message = diagnose.hang("collectives", 60, diagnose.stalls(tmp_path, NOW), tmp_path)
    assert message.startswith(
        "probe collectives timed out after 60 s and was killed: rank 1 (host gpu-node-7, local rank 1, "
        f"{UUID[1]}) stopped progressing 41 s ago in phase 'all_reduce 1G' (progress 11; pid 1); the others wait for "
        "it: rank 0 (host gpu-node-7, local rank 0) in phase 'all_reduce 1G', progress 12, last 40 s ago; rank 2 "
    )


def test_a_rank_whose_heartbeat_stopped_comes_first(tmp_path: Path) -> None:
    heartbeat(tmp_path, 0, progress=12, ago=40)
    heartbeat(tmp_path, 1, progress=12, ago=40, beat_at=NOW - 39)  # on another node: no process table
    first = diagnose.stalls(tmp_path, NOW)[0]
    assert first.rank == 1 and first.frozen == "no heartbeat for 39 s"


def test_ranks_nothing_tells_apart_are_all_listed(tmp_path: Path) -> None:
    heartbeat(tmp_path, 0, progress=12, ago=40)
    heartbeat(tmp_path, 1, progress=12, ago=40)
    message = diagnose.hang("collectives", 60, diagnose.stalls(tmp_path, NOW), tmp_path)
    assert "no rank stands out; all stopped progressing at the same point: rank 0 (" in message
    assert "; rank 1 (host gpu-node-7, local rank 1) in phase 'all_reduce 1G'" in message


@pytest.mark.e2e
def test_a_stopped_process_on_this_node_is_named_by_the_process_table(tmp_path: Path) -> None:
    with subprocess.Popen(["sleep", "600"], start_new_session=True) as stopped:
        try:
            os.kill(stopped.pid, signal.SIGSTOP)
            # the signal is delivered asynchronously, and until it is the process table may read any state
            # (a just-started process can be in uninterruptible sleep, paging its program in): wait for the
            # kernel to report the child stopped, as a shell's job control does
            _, status = os.waitpid(stopped.pid, os.WUNTRACED)
            assert os.WIFSTOPPED(status)
            heartbeat(tmp_path, 0, progress=12, ago=40, host=socket.gethostname(), pid=os.getpid())
            heartbeat(tmp_path, 1, progress=12, ago=40, host=socket.gethostname(), pid=stopped.pid)
            first = diagnose.stalls(tmp_path, NOW)[0]
            assert first.rank == 1 and first.frozen == "stopped (SIGSTOP or a debugger)"
        finally:
            stopped.kill()


def test_a_busy_port_is_the_headline_of_a_failed_torchrun(tmp_path: Path) -> None:
    log = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
           "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
           "address. port: 29400, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
           "", "The above exception was the direct cause of the following exception:", "",
           *[f"  frame {n}" for n in range(40)],
           "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store "
           "has failed. See inner exception for details."]  # fmt: skip
    (tmp_path / "torchrun.log").write_text("\n".join(log))
    first, hint = diagnose.exited("connectivity", 1, tmp_path).splitlines()[:2]
    assert first.startswith("probe connectivity exited with status 1 and left no result; torchrun.log says: ")
    assert first.endswith("port: 29400, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    assert hint.startswith("  hint: the rendezvous port is taken on this host")


PARENT = """
import os, subprocess, sys
watchdog = [sys.executable, "-m", "acceptance.run.watchdog", "--parent", str(os.getpid()), "--"]
child = subprocess.Popen([*watchdog, "sleep", "600"])
print(child.pid, flush=True)
child.wait()
"""
HARNESS_LIMIT_S = 60.0  # only so that a broken watchdog fails instead of hanging the run


@pytest.mark.e2e
def test_the_watchdog_child_dies_with_its_parent() -> None:
    with subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True) as parent:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        while Path(f"/proc/{child}/comm").read_text().strip() != "sleep":  # until it has become the program
            time.sleep(0.05)
        parent.kill()
    deadline = time.monotonic() + HARNESS_LIMIT_S
    while reaper.alive(child) and time.monotonic() < deadline:  # the parent-death signal comes as the parent exits
        time.sleep(0.05)
    assert not reaper.alive(child), f"pid {child} outlived its parent"


@pytest.mark.e2e
def test_the_watchdog_refuses_when_its_parent_is_already_gone() -> None:
    # pid 1 is never our parent: as if the launcher had died before the child asked to die with it
    done = subprocess.run([sys.executable, "-m", "acceptance.run.watchdog", "--parent", "1", "--", "true"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1 and "parent 1 is gone; not starting" in done.stderr


@pytest.mark.e2e
def test_ending_a_probe_ends_a_stopped_rank_and_a_torchrun_that_ignores_sigterm() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(600)"
    agent = subprocess.Popen([sys.executable, "-c", stubborn], start_new_session=True, stdout=subprocess.PIPE)
    assert agent.stdout is not None and agent.stdout.readline() == b"\n"  # SIGTERM is ignored from now on
    rank = subprocess.Popen(["sleep", "600"], start_new_session=True)
    os.kill(rank.pid, signal.SIGSTOP)
    _, status = os.waitpid(rank.pid, os.WUNTRACED)  # stopped now: a SIGTERM still pending could not overtake it
    assert os.WIFSTOPPED(status)
    reaper.end(agent, lambda: [rank.pid], hung=True)
    agent.stdout.close()
    assert agent.returncode == -signal.SIGKILL
    assert rank.wait() == -signal.SIGKILL
