"""Where and how a probe's ranks run on this node: as a request to the node's probe worker, as a job started
ahead of its turn (staged), or as a torchrun job of its own; each probe's folder numbered in the session.

On several nodes a probe starts only once every node is ready for it (``meet_before``): a node still inside
the previous probe would otherwise find the previous rendezvous, and a node that is gone is named, not
waited for. Kept free of the evidence: ``ClusterRun`` caches the results and the recorder writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.json_types import JSONObject
from acceptance.multinode.meeting import Meeting, PlanError
from acceptance.run import launcher as launch
from acceptance.run.placement import Placement
from acceptance.run.progress import Watch
from acceptance.run.staged_jobs import StagedJob, StagedJobs
from acceptance.run.worker_pool import Workers
from acceptance.schema.topology import Topology

# the longest a probe waits for a staged job's start or imports (torchrun and torch 10-18 s, transformers,
# DeepSpeed and TorchInductor 14-16 s on a fresh H200 node); past it the job is cancelled and starts again at
# its turn
IMPORTS_WAIT_S = 120.0


@dataclass(frozen=True)
class Where:
    """Where a probe runs: its number in the session, its world, its folder, and the job staged for it
    (None: none was)."""

    seq: int
    topo: Topology
    placement: Placement
    out_dir: Path
    staged: StagedJob | None


@dataclass
class Executor:
    """This node's probe jobs. ``topology`` and ``placement`` are the run's whole world; ``env`` the profile's
    variables; ``tag`` names the rendezvous (node 0's session id on several nodes)."""

    evidence_dir: Path
    topology: Topology
    placement: Placement
    env: Mapping[str, str]
    rendezvous_s: float
    workers: Workers
    say: Callable[[str], None]
    tag: str
    on_row: Callable[[JSONObject], None] | None = None
    meeting: Meeting | None = None
    _staged: StagedJobs = field(default_factory=StagedJobs)
    _seq: int = 0  # probes' folders numbered so far, staged jobs included

    def is_staged(self, key: str) -> bool:
        return key in self._staged

    def stage(self, name: str, spec: Mapping[str, object], key: str, timeout_s: float) -> bool:
        """Start ``name``'s job for ``key`` now, ahead of its turn (``staged_jobs``), where it can be: one
        node under torchrun. ``launch`` with the same key and spec later takes it."""
        if self.placement.nodes != 1 or self.topology.launcher != "torchrun":
            return False
        seq = self._seq + 1
        where = Where(seq, self.topology, self.placement, self._folder(seq, key), None)
        try:
            job = self._start(name, spec, key, where, timeout_s, launch.child_env(self.env, {}), gated=True)
        except OSError as exc:  # the probe then starts at its turn, and fails there with its own error if it must
            self.say(f"{key}: not staged: {exc}")
            return False
        self._seq = seq
        self._staged.add(key, seq, spec, job)
        self.say(f"{key}: staged (its job starts now, imports what it needs when told, then waits for the node)")
        return True

    def _start(
        self,
        name: str,
        spec: Mapping[str, object],
        key: str,
        where: Where,
        timeout_s: float,
        env: Mapping[str, str],
        gated: bool,
    ) -> launch.Staged:
        """``name``'s job for ``key`` in ``where``: ahead of its turn (``gated``), or at it."""
        return launch.stage(
            name,
            spec,
            out_dir=where.out_dir,
            topo=where.topo,
            placement=where.placement,
            run_id=f"{self.tag}-{where.seq}-{key}",
            timeout_s=timeout_s,
            env=env,
            gated=gated,
        )

    def gate(self, key: str) -> Path | None:
        """The gate of the job staged for ``key``, else None."""
        return self._staged.gate(key)

    def quiet_host(self, key: str) -> None:
        """Before ``key``'s probe, one with figures the host's activity moves: wait for the staged jobs' start
        and imports to end."""
        if not self._staged.jobs:
            return
        waited = self._staged.wait_for_imports(self.topology.nproc_per_node, IMPORTS_WAIT_S)
        if waited >= IMPORTS_WAIT_S:  # stuck: no probe waits for it again; its probe starts a job at its turn
            self.say(f"{key}: a staged job still starting or importing after {waited:.0f} s is cancelled")
            self._staged.cancel_all()
        elif waited >= 0.1:
            self.say(f"{key}: waited {waited:.1f} s for the staged job's imports (its figures move with the host)")

    def place(
        self, key: str, spec: Mapping[str, object], env: Mapping[str, str], topo: Topology, placement: Placement
    ) -> Where:
        """The probe's number and folder, and the job staged for it: kept when it was started for this spec
        and world, else cancelled."""
        as_staged = topo == self.topology and placement == self.placement and not env
        staged = self._staged.match(key, spec, as_staged)
        if staged is None:
            self._seq += 1
        seq = staged.seq if staged is not None else self._seq
        return Where(seq, topo, placement, self._folder(seq, key), staged)

    def launch(
        self, name: str, spec: Mapping[str, object], key: str, env: dict[str, str], where: Where, timeout_s: float
    ) -> launch.ProbeRun:
        """The probe's job, once every node is ready for it, watched for progress; a torch extension build
        lock that was there before it started is named in its error. Raises ProbeError."""
        self._meet_before(name, where.seq, key, timeout_s)
        staged = where.staged
        in_worker = staged is None and self.workers.takes(name, env, where.topo, where.placement)
        child_env = launch.child_env(self.env, env)
        with Watch(key, where.out_dir, self.say, child_env, self.on_row) as watch:
            try:
                if in_worker:
                    return self.workers.run(name, spec, (self.tag, where.seq, where.out_dir), timeout_s)
                self.workers.close()  # a job of its own has the node to itself, as before (a staged one's gate opens)
                job = (  # from here launch.run ends it
                    self._staged.take(key).job
                    if staged is not None
                    else self._start(name, spec, key, where, timeout_s, child_env, gated=False)
                )
                return launch.run(name, job, timeout_s)
            except launch.ProbeError as exc:
                lines = "\n".join([str(exc), *watch.stale_locks()])
                raise launch.ProbeError(lines, exc.out_dir, timed_out=exc.timed_out) from None
            except Exception as exc:  # an unreadable result: a failure of this probe, kept like any other
                message = f"probe {name} failed in the launcher: {type(exc).__name__}: {exc}"
                raise launch.ProbeError(message, where.out_dir) from None

    def cancel_staged(self) -> None:
        """End the jobs staged for a probe that never ran."""
        self._staged.cancel_all()

    def _folder(self, seq: int, key: str) -> Path:
        return self.evidence_dir / "probes" / f"{seq:02d}-{key}"

    def _meet_before(self, name: str, seq: int, key: str, timeout_s: float) -> None:
        if self.meeting is None:
            return
        try:
            # the other nodes may still be finishing the previous probe, as long as a probe may take
            wait = max(self.rendezvous_s, timeout_s)
            # and every node keeps its worker for it, or none does (acceptance.run.worker_pool.Workers.agree)
            self.workers.agree(self.meeting.gather(f"probe-{seq}-{key}", self.workers.token, wait))
        except PlanError as exc:
            raise launch.ProbeError(f"probe {name} not started: {exc}") from None
