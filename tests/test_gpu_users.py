"""Foreign processes on a node's GPUs: NVML's answers through the real adapter (a recorded NVML), the rule
that names each foreign pid and command, and the preflight that fails on them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from acceptance.families import compute, gpu_users
from acceptance.families.gpu_users import IDLE_USED_MAX_BYTES, GpuUse, foreign_use
from acceptance.probes import inventory, nvml
from acceptance.profile.model import ProfileModel
from acceptance.run import preflight
from tests.test_fault_units import BUS, cuda, model
from tests.test_fault_units import nvml as nvml_listed
from tests.test_health_units import RecordedNvml, h100

GIB = 2**30


def gpu(index: int, *processes: tuple[int, int | None], used: int = 0) -> dict[str, Any]:
    answers = h100(index)
    answers["nvmlDeviceGetComputeRunningProcesses"] = [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in processes]
    answers["nvmlDeviceGetMemoryInfo"] = {(pynvml.nvmlMemory_v2,): SimpleNamespace(used=used)}
    return answers


def test_the_adapter_reads_each_gpu_s_processes_and_memory() -> None:
    found = nvml.read_gpu_users(RecordedNvml([gpu(0), gpu(1, (4242, 12 * GIB), (4243, None), used=13 * GIB)]))
    assert isinstance(found, list)
    assert [(g["index"], g["pci_bus_id"], g["memory_used_bytes"]) for g in found] == [
        (0, "00000000:18:00.0", 0),
        (1, "00000000:19:00.0", 13 * GIB),
    ]
    assert found[1]["processes"] == [
        {"pid": 4242, "used_memory_bytes": 12 * GIB, "command": None},
        {"pid": 4243, "used_memory_bytes": None, "command": None},
    ]


def test_a_gpu_whose_process_query_fails_lists_none() -> None:
    answers = gpu(0)
    answers["nvmlDeviceGetComputeRunningProcesses"] = {"error": pynvml.NVML_ERROR_NO_PERMISSION}
    found = nvml.read_gpu_users(RecordedNvml([answers]))
    assert isinstance(found, list) and found[0]["processes"] == []
    assert nvml.read_gpu_users(RecordedNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)) == {
        "not_measured": "NVML init: Driver Not Loaded"
    }


def use(index: int, *pids: int, used: int | None = 0, command: str | None = "python train.py") -> GpuUse:
    processes = [{"pid": p, "used_memory_bytes": 3 * GIB, "command": command} for p in pids]
    return {"index": index, "uuid": f"GPU-{index}", "pci_bus_id": BUS[index], "memory_used_bytes": used,
            "processes": processes}  # type: ignore[typeddict-item]  # fmt: skip


def test_a_foreign_process_is_named_by_pid_and_executable_and_the_run_s_own_are_not() -> None:
    ours = {100, 101}.__contains__
    assert foreign_use([use(0, 100), use(1, 101)], ours) == []
    assert foreign_use([use(0, 100), use(1, 4242, used=3 * GIB)], ours) == [
        "GPU 1 (0000:2a:00.0, GPU-1) is in use by another process: pid 4242 `python` (3.00 GiB)"
    ]
    secret = use(0, 9, command="/opt/conda/bin/python train.py --hf-token hf_abc")
    [line] = foreign_use([secret], ours)
    assert line.endswith("pid 9 `python` (3.00 GiB)") and "hf_abc" not in line and "train.py" not in line
    assert foreign_use([use(0, 77, command=None)], ours) == [
        "GPU 0 (0000:18:00.0, GPU-0) is in use by another process: pid 77 `command not visible from here` (3.00 GiB)"
    ]


def test_memory_in_use_without_a_process_nvml_shows_is_named() -> None:
    assert foreign_use([use(0, used=IDLE_USED_MAX_BYTES)], lambda pid: False) == []
    assert foreign_use([use(0, used=None)], lambda pid: False) == []  # no nvmlMemory_v2: not judged
    [line] = foreign_use([use(0, used=5 * GIB)], lambda pid: False)
    assert line == (
        "GPU 0 (0000:18:00.0, GPU-0) has 5.00 GiB in use before the run and no process NVML can show "
        "(another container or pid namespace)"
    )


def test_the_preflight_fails_naming_the_process() -> None:
    answers = {"pci": list(BUS), "nvml": nvml_listed(0, 1), "torch": cuda(0, 1), "users": [use(0), use(1, 4242)]}
    result = preflight.check(model(), {}, lambda env: answers, ours=lambda pid: False)  # type: ignore[arg-type,return-value]
    assert not result.ok
    # another process is foreign load whenever it is seen, from the start as mid-run: named first, not drained
    assert result.category == "foreign load"
    assert result.message == (
        "foreign load: GPU 1 (0000:2a:00.0, GPU-1) is in use by another process: pid 4242 `python` (3.00 GiB)"
    )
    assert result.foreign == [{"pid": 4242, "used_memory_bytes": 3 * GIB, "command": "python train.py"}]
    clean = {**answers, "users": [use(0), use(1)]}
    assert preflight.check(model(), {}, lambda env: clean).ok  # type: ignore[arg-type,return-value]


def test_a_site_that_drains_for_a_leftover_process_says_so_in_its_profile() -> None:
    """``health.leftover_process: drain``: a process there before the run is the node's configuration, and its
    GPU is drained; the line still names the cause first. The default is review (foreign load, rerun)."""
    answers = {"pci": list(BUS), "nvml": nvml_listed(0, 1), "torch": cuda(0, 1), "users": [use(0), use(1, 4242)]}
    topology = {"gpus_per_node": 2, "gpu_model": "NVIDIA H200"}
    strict = ProfileModel.model_validate(
        {"name": "site", "topology": topology, "health": {"leftover_process": "drain"}}
    )
    result = preflight.check(strict, {}, lambda env: answers, ours=lambda pid: False)  # type: ignore[arg-type,return-value]
    assert (result.ok, result.category) == (False, "configuration")
    assert result.message.startswith("foreign load: GPU 1 (0000:2a:00.0, GPU-1) is in use by another process")
    assert preflight.check(model(), {}, lambda env: answers, ours=lambda pid: False).category == "foreign load"  # type: ignore[arg-type,return-value]


def test_the_users_read_before_the_worker_started_are_the_ones_judged() -> None:
    # the inventory ran beside the worker and saw its rank 5555 by a host pid /proc does not show here; the
    # reading taken before the worker started is the one judged
    answers = {"pci": list(BUS), "nvml": nvml_listed(0, 1), "torch": cuda(0, 1), "users": [use(0), use(1, 5555)]}
    early = [use(0), use(1)]
    detect = lambda env: answers  # noqa: E731
    assert not preflight.check(model(), {}, detect, ours=lambda pid: False).ok  # type: ignore[arg-type]
    assert preflight.check(model(), {}, detect, ours=lambda pid: False, users=early).ok  # type: ignore[arg-type]
    busy = [use(0), use(1, 4242)]
    assert not preflight.check(model(), {}, detect, ours=lambda pid: False, users=busy).ok  # type: ignore[arg-type]


@pytest.mark.e2e  # starts the inventory probe
def test_the_users_probe_answers_without_nvml() -> None:
    # this machine has no NVML: no answer, and the preflight falls back to the inventory's reading
    assert preflight.detect_users(dict(os.environ)) is None


def write_proc(root: Path, pid: int, parent: int, argv: list[str]) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "stat").write_text(f"{pid} (py thon) S {parent} 1 1 0 -1\n")
    (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_the_run_s_own_processes_are_its_descendants(tmp_path: Path) -> None:
    write_proc(tmp_path, 10, 1, ["pytest"])
    write_proc(tmp_path, 11, 10, ["torchrun"])
    write_proc(tmp_path, 12, 11, ["python", "-m", "acceptance.probes.worker"])
    write_proc(tmp_path, 20, 1, ["python", "train.py", "--steps", "9"])
    ours = gpu_users.descends_from(10, tmp_path)
    assert [ours(p) for p in (10, 12, 20, 99)] == [True, True, False, False]
    assert inventory.command_of(20, tmp_path) == "python train.py --steps 9"
    assert inventory.command_of(99, tmp_path) is None
    write_proc(tmp_path, 21, 1, ["python", "train.py", "--api-token", "s3cr3t", "HF_TOKEN=hf_abc"])
    assert inventory.command_of(21, tmp_path) == "python train.py --api-token *** HF_TOKEN=***"  # masked when read
    [named] = [inventory.with_commands(use(0, 20, command=None), tmp_path)]
    assert named["processes"][0]["command"] == "python train.py --steps 9"
    assert gpu_users.descends_from(os.getpid())(os.getpid())


def test_on_a_shared_node_only_the_run_s_gpus_are_judged() -> None:
    """Slurm gives a job GPU 0 (CUDA sees it alone); another job computes on GPU 1: not this node's fault.
    The same process on the run's own GPU fails it; a reading that names no GPU is judged, never passed."""
    answers = {"pci": list(BUS), "nvml": nvml_listed(0, 1), "torch": cuda(0), "users": [use(0), use(1, 4242)]}
    one = model(gpus_per_node=1)
    assert preflight.check(one, {}, lambda env: answers, ours=lambda pid: False).ok  # type: ignore[arg-type,return-value]
    mine = {**answers, "users": [use(0, 4242), use(1)]}
    result = preflight.check(one, {}, lambda env: mine, ours=lambda pid: False)  # type: ignore[arg-type,return-value]
    assert result.message.startswith("foreign load: GPU 0 (0000:18:00.0, GPU-0) is in use by another process: pid 4242")
    unplaced = use(1, 4242)
    unplaced["pci_bus_id"] = unplaced["uuid"] = None
    nowhere = {**answers, "users": [use(0), unplaced]}
    assert not preflight.check(one, {}, lambda env: nowhere, ours=lambda pid: False).ok  # type: ignore[arg-type,return-value]


def _sampler(running: list[list[SimpleNamespace]], ours: set[int]) -> Any:
    """The GPU sampler's process sampling, fed recorded NVML answers: one list of processes per call."""
    from acceptance.probes.gpu_sampler import GpuSampler  # imports torch: the probes' side

    answers = iter(running)
    sampler = GpuSampler(torch_cpu())
    sampler._handle, sampler._ours = object(), ours.__contains__
    sampler._processes_query = lambda handle: next(answers)
    return sampler


def torch_cpu() -> Any:
    import torch

    return torch.device("cpu")


@pytest.mark.e2e
def test_a_process_that_starts_on_the_gpu_while_timed_is_named_as_the_cause() -> None:
    """NVML's running processes sampled through the timed loop: the run's own are left out, another's is
    named with its pid, executable, memory and when it was first seen; the compute figure's cause line says
    so before the clock events."""
    with subprocess.Popen(["sleep", "30"]) as job:  # another job: a process /proc shows, not the run's
        cmdline = Path(f"/proc/{job.pid}/cmdline")
        while not cmdline.read_bytes().startswith(b"sleep"):  # until the child has exec'd sleep
            time.sleep(0.01)
        mine = SimpleNamespace(pid=os.getpid(), usedGpuMemory=2**30)
        other = SimpleNamespace(pid=job.pid, usedGpuMemory=3 * 2**30)
        hidden = SimpleNamespace(pid=2**22 + 7, usedGpuMemory=2**30)  # another pid namespace's: never named
        sampler = _sampler([[mine, hidden], [mine, other], [mine, other]], {os.getpid()})
        for _ in range(3):
            sampler._next_processes = 0.0
            sampler._sample_processes()
        job.kill()
    [seen] = sampler.seen()
    assert (seen["pid"], seen["command"], seen["used_memory_bytes"]) == (job.pid, "sleep", 3 * 2**30)
    assert seen["seen_share"] == 2 / 3
    text = gpu_users.seen_text([seen])
    assert text.startswith(f"{gpu_users.FOREIGN_LOAD}: pid {job.pid} `sleep`") and "(3.00 GiB)" in text
    row = {
        "clocks": {
            "matmul_tflops": {"clock_events": {"sw_power_cap": 1.0}, "clock_events_reason": None, "foreign": [seen]}
        }
    }
    line = compute.clocks(row, "matmul_tflops")  # type: ignore[arg-type]
    assert line.startswith(gpu_users.FOREIGN_LOAD) and line.endswith(
        "clock events while timed: sw_power_cap (power cap) 100%"
    )


def test_no_process_of_another_leaves_the_clock_events_alone() -> None:
    sampler = _sampler([[SimpleNamespace(pid=os.getpid(), usedGpuMemory=None)]], {os.getpid()})
    sampler._sample_processes()
    assert sampler.seen() == [] and gpu_users.seen_text([]) == ""


class _Timeout(Exception):
    """NVML's NVMLError_Timeout: no event waiting."""


def _recorded_link(gens: list[tuple[int, int]], xids: list[int]) -> SimpleNamespace:
    """NVML's answers for one GPU's PCIe link (Gen5 x16 at most; ``gens`` read in turn) and its event set
    (``xids`` waiting, then none)."""
    links, events = iter(gens), iter(xids)
    now: dict[str, tuple[int, int]] = {}

    def wait(events_set: object, timeout_ms: int) -> SimpleNamespace:
        found = next(events, None)
        if found is None:
            raise _Timeout
        return SimpleNamespace(eventData=found)

    def gen(handle: object) -> int:
        now["link"] = next(links)
        return now["link"][0]

    return SimpleNamespace(
        NVMLError_Timeout=_Timeout,
        nvmlDeviceGetCurrPcieLinkGeneration=gen,
        nvmlDeviceGetCurrPcieLinkWidth=lambda handle: now["link"][1],
        nvmlEventSetWait_v2=wait,
    )


def test_a_link_below_its_maximum_and_an_xid_while_timed_are_named_as_the_gpu_s_own() -> None:
    """The sampler reads the PCIe link and NVML's critical XIDs once a second: a link that trained down
    (Gen4 instead of Gen5) is named with both values for the host-link figures, an XID with its code for
    every figure; both are the GPU's fault, whatever other process was seen beside them."""
    sampler = _sampler([], set())
    sampler._nvml = _recorded_link([(4, 16), (5, 16), (4, 8)], [79])
    sampler._pcie_max, sampler._xid_events, sampler._started = (5, 16), object(), 0.0
    for t in (1.0, 2.0, 3.0):
        sampler._sample_link(t)
    low, xids = sampler.pcie_low(), sampler.xids
    assert low == {"gen": 4, "width": 8, "max_gen": 5, "max_width": 16, "share": 2 / 3}
    assert xids == [{"xid": 79, "t_s": 1.0}]
    clocks = {"clock_events": {}, "clock_events_reason": None, "pcie_low": low, "xids": xids}
    row = {"clocks": {"h2d_gbps": clocks, "matmul_tflops": clocks}}
    host = compute.clocks(row, "h2d_gbps")  # type: ignore[arg-type]
    assert host.startswith(
        f"{gpu_users.GPU_FAULT}: PCIe link at Gen4 x8, below its maximum Gen5 x16 (in 67% of the samples); "
        "XID 79 at 1.0 s"
    )
    # a GPU-bound figure leaves the PCIe link idle (it may train down to save power): the XID alone
    assert compute.clocks(row, "matmul_tflops").startswith(f"{gpu_users.GPU_FAULT}: XID 79 at 1.0 s;")
    steady = _sampler([], set())
    steady._nvml, steady._pcie_max = _recorded_link([(5, 16)], []), (5, 16)
    steady._sample_link(1.0)
    assert steady.pcie_low() is None and gpu_users.gpu_fault_text(None, []) == ""
