"""Which strategies the selected training tests need, and when their job starts.

The training job runs as a job of its own, whose start costs seconds before its first step: torchrun and
``import torch`` (10 s on a cold 2x H200, where the session's own probe worker starts the same way), then
transformers, DeepSpeed and TorchInductor (16 s). Where the modules right before the training tests measure
on the GPU's own clock (CUDA events around launched work in compute, CUDA graphs in the sweeps under
``collectives.timing: cuda_graph``), which imports on the host cannot move, the job is started ahead of its
turn (``training_jobs.stage_first``): at the session's start, beside the probe worker's own start, its ranks
start and wait at their gate; at the first of those modules they import what they need (in compute, once
its host links are measured: DMA to and from host memory read 22-25% slower beside the imports on 4x H200),
then wait again, touching no GPU, until the node is free. A probe timed on the host (the sweeps under auto,
nccl or eager: nccl-tests' own clock) starts only once no staged rank is importing (``ClusterRun``), so it
is never where the imports start. Elsewhere (the CPU, where every probe is timed by the host, or a storage probe just
before) the job starts at its turn, through the same gate.
"""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.families import training as plan
from acceptance.families.collectives import COLLECTIVES
from acceptance.families.training import TRAINING
from acceptance.profile.registry import family_of_module
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.training_jobs import stage_first

TRAINING_MODULE = TRAINING.module


def needed(cluster: ClusterRun, items: list[pytest.Item]) -> list[str]:
    """The strategies the selected tests of the training module read, in the profile's order."""
    training = TRAINING.section_of(cluster.profile.model)
    wanted: set[str] = set()
    for item in items:
        if item.path.stem != TRAINING_MODULE:
            continue
        params = getattr(item, "callspec", None)
        found = params.params if params is not None else {}
        wanted |= {v for k, v in found.items() if k in ("train_strategy", "canary_strategy")}
        if "canary_strategy" in found:
            wanted.add(training.strategies[0])  # the reference curve
        if item.name == "test_scaling_efficiency" and training.scaling_baseline != "none":
            wanted.add(training.scaling_strategy)
    return [s for s in training.strategies if s in wanted]


def baseline(cluster: ClusterRun, items: list[pytest.Item]) -> plan.Baseline | str | None:
    """The scaling baseline when its test is selected (it may share the strategies' job)."""
    if not any(item.path.stem == TRAINING_MODULE and item.name == "test_scaling_efficiency" for item in items):
        return None
    training = TRAINING.section_of(cluster.profile.model)
    return plan.baseline(training, cluster.topology.nproc_per_node, cluster.placement.nodes)


def stage_point(cluster: ClusterRun, items: list[pytest.Item]) -> str | None:
    """The test at whose setup the training job starts: the first module timed on the GPU's clock alone in
    the stretch of GPU-timed modules right before the training tests (a module that skips on this cluster,
    such as the sweeps across nodes on one node, measures nothing and does not end the stretch; one whose
    loops the host times waits there for the job's imports); None to start it at its turn."""
    first = next((i for i, item in enumerate(items) if item.path.stem == TRAINING_MODULE), None)
    if first is None or cluster.topology.device != "cuda":
        return None
    start = first
    while start > 0 and _gpu_timed(items[start - 1], None):
        start -= 1
    timing = COLLECTIVES.section_of(cluster.profile.model).timing
    at = next((i for i in range(start, first) if _gpu_timed(items[i], timing)), None)
    return items[at].nodeid if at is not None else None


def _gpu_timed(item: pytest.Item, timing: str | None) -> bool:
    """Whether the item's family is timed on the GPU's clock: as the family declares (``timing`` None), or
    with every figure so under this ``collectives.timing``."""
    family = family_of_module(item.path.stem)
    if family is None:
        return False
    return family.gpu_timed if timing is None else family.timed_on_gpu(timing)


class TrainingStage:
    """Starts the training job at ``stage_point`` (a plugin object beside the session's)."""

    def __init__(self, session: Any) -> None:
        self.session = session  # the ClusterSession: its run, and whether it only collects
        self.at: str | None = None
        self.staged = False  # whether the first training job was started at collection
        self.items: list[pytest.Item] = []

    @pytest.hookimpl(trylast=True)  # after the session's own checks of the selection, which may end the run
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        preflight = self.session.preflight  # a node without its GPUs skips the training tests
        if self.session.collect_only or not self.session.settings.modes.probes or (preflight and not preflight.ok):
            return
        self.items = list(session.items)
        self.at = stage_point(self.session.run, self.items)
        if self.at is not None:  # its ranks start now and wait for their word to import
            run = self.session.run
            self.staged = stage_first(run, needed(run, self.items), baseline(run, self.items))

    @pytest.hookimpl(tryfirst=True)  # before the module's fixtures start its probe
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item.nodeid == self.at:
            self.at = None
            if not self.staged:
                return
            run, family = self.session.run, family_of_module(item.path.stem)
            if family is not None and family.lets_import:  # once its probe has measured the host links
                run.let_import_within(plan.job_key(0), family.probes[0])
            else:
                run.let_import(plan.job_key(0))
