"""Which strategies the selected training tests need, and when their job starts.

The training job runs as a job of its own, whose start costs seconds before its first step: torchrun and
``import torch`` (10-18 s on a fresh 2x or 4x H200, beside the session's own probe worker starting the same
way), then transformers, DeepSpeed and TorchInductor (14-16 s). On a GPU node it is started ahead of its turn
(``training_jobs.stage_first``) where the modules right before the training tests include one timed on the
GPU's own clock (CUDA events around launched work in compute), which imports on the host cannot move: at the
session's start its ranks start and wait at their gate; in compute, once its host links are measured (DMA
to and from host memory read 22-25% slower beside the imports on 4x H200), they import what they need, then
wait again, touching no GPU, until the node is free. A probe with a figure the host's activity moves (the
sweeps' loops, timed by the host as nccl-tests times them, and their spread pass; the host links) starts
only once no staged rank is importing (``ClusterRun``). Elsewhere (the CPU, where every probe is timed by
the host, or a storage probe just before training) the job starts at its turn, through the same gate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from acceptance.profile.registry import family_of_module
from acceptance.run import training_jobs
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.training_jobs import Baseline, Selected, stage_first
from acceptance.schema.family import Family


def needed(cluster: ClusterRun, items: list[pytest.Item]) -> list[str]:
    """The strategies the selected tests of the staged family read, in the profile's order."""
    return training_jobs.strategies_needed(cluster, _selected(items))


def baseline(cluster: ClusterRun, items: list[pytest.Item]) -> Baseline | str | None:
    """The scaling baseline when its test is selected (it may share the strategies' job)."""
    return training_jobs.baseline_needed(cluster, _selected(items))


def _selected(items: list[pytest.Item]) -> list[Selected]:
    found = []
    for item in items:
        params = getattr(item, "callspec", None)
        found.append(Selected(item.path.stem, item.name, params.params if params is not None else {}))
    return found


def stage_point(cluster: ClusterRun, items: list[pytest.Item]) -> str | None:
    """The test at whose setup the training job's imports are arranged: in the stretch of GPU-timed modules
    right before the training tests (a module that skips on this cluster, such as the sweeps across nodes on
    one node, measures nothing and does not end the stretch), the first whose probe lets them start itself
    once what they move is measured (``Family.lets_import``: compute, after its host links); None to start
    the job at its turn. The stretch's other modules wait for the imports to end."""
    first = next((i for i, item in enumerate(items) if _family_is(item, lambda f: f.staged)), None)
    if first is None or cluster.topology.device != "cuda":
        return None
    start = first
    while start > 0 and _family_is(items[start - 1], lambda f: f.gpu_timed):
        start -= 1
    at = next((i for i in range(start, first) if _family_is(items[i], lambda f: f.lets_import)), None)
    return items[at].nodeid if at is not None else None


def _family_is(item: pytest.Item, test: Callable[[Family[Any]], bool]) -> bool:
    family = family_of_module(item.path.stem)
    return family is not None and test(family)


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
            family = family_of_module(item.path.stem)
            if self.staged and family is not None:  # its probe tells the job once it measured the host links
                self.session.run.let_import_within(training_jobs.FIRST_KEY, family.probes[0])
