"""Node health: NVML's answers for every GPU of every node, read by one rank per node (local rank 0).

The answers are gathered so every node's pytest judges the whole cluster (``acceptance.families.health`` holds
the rules). An idle GPU drops its PCIe link to a lower generation to save power, so while local rank 0
reads the links every rank keeps pinned host-to-device copies flowing to its own GPU.
"""

from __future__ import annotations

import threading

import torch

from acceptance.families.answers import NotMeasured, unanswered
from acceptance.families.health import HealthConfig, HealthResult, NodeAnswers, NodeHealth, OutsideGpu, allocated
from acceptance.probes import nvml
from acceptance.probes.rank import Ctx, main, section

LOAD_BYTES = 64 * 2**20  # per copy: a few ms on any link, so stopping the load is quick
LOAD_BATCH = 4  # copies between two looks at the stop flag


class LinkLoad:
    """Host-to-device copies on a side stream, from a thread, until stopped."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.src = torch.empty(LOAD_BYTES, dtype=torch.uint8, pin_memory=True)
        self.dst = torch.empty(LOAD_BYTES, dtype=torch.uint8, device=device)
        self.stream = torch.cuda.Stream(device)
        self.done = threading.Event()
        self.copies = 0
        self.thread = threading.Thread(target=self._loop, name="pcie-load", daemon=True)

    def _loop(self) -> None:
        torch.cuda.set_device(self.device)  # the current device is per thread
        with torch.cuda.stream(self.stream):
            while not self.done.is_set():
                for _ in range(LOAD_BATCH):
                    self.dst.copy_(self.src, non_blocking=True)
                self.stream.synchronize()
                self.copies += LOAD_BATCH

    def __enter__(self) -> LinkLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def read_under_load(ctx: Ctx, under_load: bool) -> tuple[NodeAnswers | NotMeasured | None, int]:
    """Local rank 0's NVML answers (None on the other ranks), and how many copies this rank kept going."""
    if not (under_load and ctx.is_cuda):
        ctx.gather(None)
        return (nvml.read_node() if ctx.local_rank == 0 else None), 0
    with LinkLoad(ctx.device) as load:
        ctx.gather(None)  # every rank's copies are running before any link is read
        answers = nvml.read_node() if ctx.local_rank == 0 else None
        ctx.gather(None)  # and keep running until every node has read its links
    return answers, load.copies


def visible_uuids(ctx: Ctx) -> list[str] | None:
    """The GPUs this job was given, as CUDA shows them under the run's environment (CUDA_VISIBLE_DEVICES,
    the device cgroup, the container's devices): NVML's UUID spelling. None off the GPU."""
    if not ctx.is_cuda:
        return None
    return [f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(torch.cuda.device_count())]


def run(ctx: Ctx) -> HealthResult:
    cfg = section(ctx.spec, "health", HealthConfig)
    ctx.phase("nvml")
    answers, copies = read_under_load(ctx, bool(cfg["pcie_under_load"]))
    outside: list[OutsideGpu] = []
    if answers is not None and not unanswered(answers):
        answers, outside = allocated(answers, visible_uuids(ctx))
    ctx.phase("gather")
    mine = {"host": ctx.host, "node_rank": ctx.node_rank, "rank": ctx.rank, "load_copies": copies}
    everyone = ctx.gather({**mine, "nvml": answers, "outside": outside})
    nodes: list[NodeHealth] = [
        {"host": r["host"], "node_rank": r["node_rank"], "nvml": r["nvml"], "outside_allocation": r["outside"]}
        for r in everyone
        if r["nvml"] is not None
    ]
    return {
        "nodes": nodes,
        "pcie_under_load": bool(cfg["pcie_under_load"]) and ctx.is_cuda,
        "load_copies": {r["rank"]: r["load_copies"] for r in everyone},
    }


if __name__ == "__main__":
    main(run)
