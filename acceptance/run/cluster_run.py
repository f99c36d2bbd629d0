"""One acceptance run on this node: the profile, where we stand, the evidence, the judge, and each probe's
result once per session (the probe cache). ``Executor`` runs the probes' jobs, ``Recorder`` writes their
records; a figure's verdict is the judge's.

Kept free of pytest so that the console script can drive the same probes; ``plugin`` adapts it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from acceptance.evidence.folder import LOCK_NAME, FolderLock, claim
from acceptance.evidence.model import Check
from acceptance.evidence.store import Evidence
from acceptance.json_types import JSONObject
from acceptance.multinode.meeting import Meeting
from acceptance.profile.judge import BaselineFigures, Judge, Judgement
from acceptance.profile.loader import Profile
from acceptance.profile.metrics import local
from acceptance.profile.registry import WORKER_PROBES, family_of_probe
from acceptance.run import launcher as launch
from acceptance.run.executor import Executor
from acceptance.run.placement import Placement
from acceptance.run.recorder import Recorder
from acceptance.run.worker_pool import Workers
from acceptance.schema.bounds import Threshold
from acceptance.schema.figure import Figure
from acceptance.schema.topology import Topology


class ProbeOptions(TypedDict, total=False):
    """How ``ClusterRun.probe`` runs a probe beside its name and spec: its cache ``key``, the ``env`` it adds,
    a smaller world (``ranks_per_node``, ``nodes``) and the ``parts`` of its time limit."""

    key: str | None
    env: dict[str, str] | None
    ranks_per_node: int | None
    nodes: int | None
    parts: int


@dataclass
class ClusterRun:
    profile: Profile
    placement: Placement
    evidence_dir: Path
    timeout_override: float | None = None
    run_tag: str = ""
    meeting: Meeting | None = None  # multi-node, one pytest per node: the nodes' shared store
    persist: bool = True  # False: --collect-only, nothing is created or written
    progress: Callable[[str], None] | None = None  # one line at a time: a probe starts, finishes, builds
    on_row: Callable[[JSONObject], None] | None = None  # a probe's result rows as measured (the sweep's)
    worker: bool = True  # False: every probe a torchrun job of its own (--cluster-worker off)
    baseline: BaselineFigures | None = None  # --cluster-baseline: the earlier run's figures by metric
    baseline_label: str = "--cluster-baseline"  # how a figure worse than the baseline names it
    evidence: Evidence = field(init=False)
    judge: Judge = field(init=False)  # the run's one judge: the profile and the baseline
    workers: Workers = field(init=False)
    lock: FolderLock | None = field(init=False, default=None)
    checked: set[str] = field(default_factory=set)
    _probes: dict[str, JSONObject | launch.ProbeError] = field(default_factory=dict)
    _partials: dict[str, JSONObject] = field(default_factory=dict)
    _let_import: dict[str, str] = field(default_factory=dict)  # probe -> the gate its next run opens to IMPORT
    _say_lock: threading.Lock = field(default_factory=threading.Lock)
    executor: Executor = field(init=False)
    recorder: Recorder = field(init=False)

    def __post_init__(self) -> None:
        """Claim the evidence folder (raises EvidenceFolderError) and write the first evidence."""
        self.judge = Judge(self.profile, self.baseline, self.baseline_label)
        if self.persist:
            self.lock = claim(self.evidence_dir)
        p = self.profile
        profile: JSONObject = {"name": p.name, "path": str(p.path), "sha256": p.sha256}
        profile |= {"extends": [str(c) for c in p.chain[1:]], "resolved": p.resolved}
        place = self.placement
        topo = {"nodes": place.nodes, "node_rank": place.node_rank, "head": place.endpoint, "source": place.source}
        topo |= {"ranks_per_node": self.topology.nproc_per_node, "world_size": self.world_size}
        topo["host"] = socket.gethostname()
        env = {**os.environ, **self.profile.model.env}
        self.evidence = Evidence(self.evidence_dir, profile, topo, env, persist=self.persist)
        self.evidence.write()
        pg_timeout_s = max(self.timeout(p) for p in WORKER_PROBES)  # the longest probe a worker may run
        folder, model_env = self.evidence_dir / "workers", self.profile.model.env
        self.workers = Workers(self.worker, folder, self.topology, self.placement, model_env, pg_timeout_s)
        rendezvous_s = self.profile.model.timeouts.rendezvous
        where = (self.evidence_dir, self.topology, self.placement)
        self.executor = Executor(
            *where, model_env, rendezvous_s, self.workers, self.say, self.tag, self.on_row, self.meeting
        )
        self.recorder = Recorder(self.evidence, self.say)

    def join(self, meeting: Meeting, session: str, record: JSONObject) -> None:
        """Keep the nodes' meeting for the probes' barriers; node 0's session id names the rendezvous."""
        self.meeting = self.executor.meeting = meeting
        self.run_tag = self.run_tag or session
        self.executor.tag = self.tag
        self.evidence.cluster.plan = record
        self.evidence.write()

    def close(self) -> None:
        """End the jobs staged for nothing and this node's worker; release the evidence folder (the run is
        over; its evidence stays)."""
        with contextlib.ExitStack() as later:  # each step even when one before it raised (a second Ctrl-C)
            if self.lock is not None:
                later.callback(self.lock.release)
            later.callback(self.workers.shut_down)
            self.executor.cancel_staged()

    def discard(self) -> None:
        """The run was refused before it measured anything: remove what claiming the folder created
        (the folder too, when that leaves it empty), and write nothing more."""
        self.close()
        if self.persist:
            for name in ("evidence.json", LOCK_NAME):
                (self.evidence_dir / name).unlink(missing_ok=True)
            shutil.rmtree(self.evidence_dir / "workers", ignore_errors=True)  # one started early, unused
            with contextlib.suppress(OSError):
                self.evidence_dir.rmdir()
        self.evidence.persist = False

    @property
    def tag(self) -> str:
        """What names the run's rendezvous: node 0's session id on several nodes, else the profile's hash."""
        return self.run_tag or self.profile.sha256[:12]

    @property
    def topology(self) -> Topology:
        return self.profile.model.topology

    @property
    def world_size(self) -> int:
        return self.placement.nodes * self.topology.nproc_per_node

    def spec(self, probe: str) -> JSONObject:
        section = self.profile.resolved.get(probe, {})
        return {
            probe: section,
            "expected_world_size": self.world_size,
            "ranks_per_node": self.topology.nproc_per_node,
            "nodes": self.placement.nodes,
        }

    def timeout(self, probe: str, parts: int = 1) -> float:
        """The probe's time limit; a job of ``parts`` parts that each have the limit (the training
        strategies of one job) gets it ``parts`` times."""
        return (self.timeout_override or self.profile.model.timeouts.for_probe(probe)) * parts

    def timeout_origin(self, probe: str, parts: int = 1) -> str:
        """Where the probe's time limit was set: the option, else the profile's key and its line (or the
        option that set it), for a message that says whose setting stopped a probe."""
        if self.timeout_override:
            return f"--cluster-timeout {self.timeout_override:g}"
        timeouts = self.profile.model.timeouts
        key = timeouts.key_for(probe)
        times = f"{parts} parts of " if parts > 1 else ""
        return f"{times}timeouts.{key} = {timeouts.for_probe(probe):g} s, {self.profile.origin('timeouts', key)}"

    def say(self, line: str) -> None:
        """One progress line, from the main thread or a probe's watcher."""
        if self.progress is not None:
            with self._say_lock:
                self.progress(line)

    def probe(
        self,
        name: str,
        spec: Mapping[str, object] | None = None,
        key: str | None = None,
        env: dict[str, str] | None = None,
        ranks_per_node: int | None = None,
        nodes: int | None = None,
        parts: int = 1,
    ) -> JSONObject:
        """Run a probe once per session (per ``key``); later callers get the same result or the same error.

        ``env`` adds variables for this run only (e.g. NCCL_ALGO, read when NCCL creates a communicator).
        ``ranks_per_node`` / ``nodes`` run it on a smaller world (a scaling baseline); ``nodes=1`` on a
        multi-node cluster runs one job per node, each on its own node. ``parts``: the job runs that many
        parts, each within the probe's timeout (see ``timeout``)."""
        key = key or name
        if key not in self._probes:
            where = self._shrink(ranks_per_node, nodes)
            spec = spec if spec is not None else self.spec(name)
            if name in self._let_import:  # its run lets a staged job import (``let_import_within``)
                spec = {**spec, "let_import": self._let_import.pop(name)}
            self._probes[key] = self._run(name, spec, key, env or {}, *where, parts=parts)
        found = self._probes[key]
        if isinstance(found, launch.ProbeError):
            raise found
        return found

    def stage(self, name: str, spec: Mapping[str, object], key: str, parts: int = 1) -> bool:
        """Start ``name``'s job for ``key`` now, ahead of its turn (``Executor.stage``), where it can be: not
        yet run or staged. ``probe`` with the same key and spec later runs it."""
        if key in self._probes or self.executor.is_staged(key) or not self.persist:
            return False
        return self.executor.stage(name, spec, key, self.timeout(name, parts))

    def let_import_within(self, key: str, probe: str) -> bool:
        """Let the job staged for ``key`` import once ``probe``'s next run has measured what host activity
        moves (``let_import`` in its spec: ``Family.lets_import``); False where no job is staged for it."""
        gate = self.executor.gate(key)
        if gate is None:
            return False
        self._let_import[probe] = str(gate)
        return True

    def partial(self, key: str) -> JSONObject:
        """The parts a failed probe finished before it failed (its ``partial.json``: ``{"parts": {...}}``)."""
        return self._partials.get(key, {})

    @staticmethod
    def _beside_imports(probe: str) -> bool:
        """Whether the probe may run while a staged job imports (``Family.beside_imports``): else it waits
        for the imports to end (``plugin.training_stage``); compute too, which lets them start itself."""
        family = family_of_probe(probe)
        return family is not None and family.beside_imports

    def _shrink(self, ranks_per_node: int | None, nodes: int | None) -> tuple[Topology, Placement]:
        topo, place = self.topology, self.placement
        if ranks_per_node is not None:
            topo = topo.model_copy(update={"ranks_per_node": ranks_per_node})
        if nodes is not None and nodes != place.nodes:
            if nodes != 1:
                raise ValueError(f"a probe runs on all {place.nodes} nodes or on one, not on {nodes}")
            place = Placement(1, 0, place.head, place.port, f"{place.source}, one node of {place.nodes}")
        return topo, place

    def _run(
        self,
        name: str,
        spec: Mapping[str, object],
        key: str,
        env: dict[str, str],
        topo: Topology | None = None,
        placement: Placement | None = None,
        parts: int = 1,
    ) -> JSONObject | launch.ProbeError:
        timeout_s = self.timeout(name, parts)
        where = self.executor.place(key, spec, env, topo or self.topology, placement or self.placement)
        if where.staged is None and not self._beside_imports(name):
            self.executor.quiet_host(key)
        record = self.recorder.started(name, key, env, where, timeout_s)
        start = time.monotonic()
        try:
            outcome = self.executor.launch(name, spec, key, env, where, timeout_s)
        except (KeyboardInterrupt, SystemExit):
            self.recorder.interrupted(record)
            raise
        except launch.ProbeError as error:
            error.name_limit(self.timeout_origin(name, parts))
            self._partials[key] = self.recorder.failed(record, error, where, start)
            return error
        self.recorder.finished(record, outcome, where)
        return outcome.result or {}

    def check(
        self, nodeid: str, fig: Figure, default: Threshold | None = None, unmeasured: str | None = None
    ) -> Judgement:
        """The figure's verdict by the run's judge, recorded in the evidence: against its own bound (``bound``),
        else ``default``; ``default`` and ``unmeasured`` as in ``Judge.judge``."""
        self.checked.add(fig.metric)
        judged = self.judge.judge(fig.metric, fig.value, fig.unit, fig.detail, fig.bound or default, unmeasured)
        self.evidence.add_check(nodeid, check_record(judged))
        return judged

    def unchecked(self) -> list[str]:
        return sorted(set(self.profile.model.thresholds) - self.checked)


def check_record(judged: Judgement) -> Check:
    """The evidence's record of a judged figure."""
    found = judged.baseline
    return Check(
        metric=judged.metric,
        value=judged.value,
        unit=judged.unit,
        bound=judged.bound,
        verdict=judged.verdict,
        threshold=judged.threshold.model_dump(exclude_none=True) if judged.threshold else None,
        detail=judged.detail or None,
        baseline=None if found is None else {"value": found.value, "bound": found.bound, "tolerance": found.tolerance},
        local=local(judged.metric),
    )
