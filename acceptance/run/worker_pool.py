"""This node's probe worker, from the plugin's side: one torchrun job whose ranks run probe after probe.

A probe as a job of its own pays torchrun's start, ``import torch`` in every rank, the rendezvous and the
process group's creation and teardown: 4 to 9 s a probe, often more than the probe itself. The worker pays
them once: its ranks (``acceptance.probes.worker``) keep the process group and run each probe they are
handed, with a fresh heartbeat and result in the probe's own folder, as a job of its own would leave them.

The job starts as every probe's does (``launcher.torchrun_argv`` and ``launcher.spawn``: watchdog, own
session), so it dies with pytest. ``Worker.run`` hands one probe to it and waits for the probe's
``result.json`` and every local rank's ``"status": "done"``, within the probe's timeout, watching that the
job is alive. A crash (the job exits), a timeout (the job is ended: ``reaper``) or an interrupt end the
job and are diagnosed as ``launcher.run`` does, from the same files: the part of the worker's logs the
probe wrote is copied into its folder first (``torchrun.log``, ``logs/.../{stdout,stderr}.log``,
``error.json``). Whatever way a probe fails, the worker is not used again: the next probe starts a fresh one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from acceptance.atomic_file import write_atomic
from acceptance.profile.registry import WORKER_PROBES
from acceptance.run import diagnose, reaper
from acceptance.run import launcher as launch
from acceptance.run.placement import Placement
from acceptance.schema.topology import NODE_ENV, Topology

POLL_S = 0.05  # how often the plugin looks for the probe's end: a few small files, against a probe's seconds
# how long ranks told to exit get before they are ended; on several nodes torchrun's agents leave together
# (its exit barrier), and the nodes close their workers within seconds of each other, after the verdicts
EXIT_GRACE_S = 10.0
EARLY = "00-session-start"  # the folder of the worker started with the session (``Workers.start_early``)
# The worker runs the probes the registry lets it (``Family.in_worker``), on the whole world with the
# session's environment; a run on a smaller world (a scaling baseline) or with variables of its own
# (NCCL_ALGO is read when a communicator is created) keeps a job of its own.


class Worker:
    """One torchrun job on this node (with its peers on the other nodes), in ``folder``: ``spec.json`` (the
    process group's), ``requests/``, ``torchrun.log`` and ``logs/``, all of it kept as evidence."""

    def __init__(
        self,
        folder: Path,
        topo: Topology,
        placement: Placement,
        run_id: str,
        env: Mapping[str, str],
        timeouts: tuple[float, float],
        early: bool = False,
        preload: tuple[str, ...] = (),
    ) -> None:
        """``timeouts``: the process group's and the rendezvous' (the first probe's), in seconds; ``early``:
        started before the session knew its first probe (``Workers.start_early``); ``preload``: the probes
        whose modules its ranks import before they take a request."""
        pg_timeout_s, join_timeout_s = timeouts
        folder.mkdir(parents=True, exist_ok=True)
        spec = folder / "spec.json"
        group = {"backend": topo.backend, "device": topo.device, "pg_timeout_s": pg_timeout_s, "preload": list(preload)}
        spec.write_text(json.dumps(group))
        self.folder, self.spec, self.ranks, self.nodes = folder, str(spec), topo.nproc_per_node, placement.nodes
        program = ["-m", "acceptance.probes.worker", "--spec", self.spec]
        program += ["--requests", str(folder / "requests" / "{number}.json")]
        self.argv = launch.torchrun_argv("worker", folder, topo, placement, run_id, join_timeout_s, env, program)
        self.served = 0
        self.started, self.early = time.monotonic(), early
        self.last_out: Path | None = None  # the folder of the last probe it was handed: its ranks' heartbeats
        with open(folder / "torchrun.log", "wb") as log:  # the job writes to its own copy of the file
            self.proc = launch.spawn(self.argv, env, log)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(
        self, probe: str, spec: Mapping[str, object], out_dir: Path, topo: Topology, timeout_s: float
    ) -> launch.ProbeRun:
        """Run ``probe`` in the worker; raise ``launcher.ProbeError`` (the job has then exited or been ended)
        unless it produced a result. The first probe's time counts from the worker's start, which it waited for;
        a worker started early has started beside the session's own start, and its first probe counts from its
        request, the rest of the start included."""
        launch.prepare(out_dir, spec, topo, timeout_s)
        marks = log_sizes(self.folder)
        start = self.started if self.served == 0 and not self.early else time.monotonic()
        self.served, self.last_out = self.served + 1, out_dir
        self._post({"probe": probe, "spec": str(out_dir / "spec.json"), "out": str(out_dir)})
        outcome = launch.ProbeRun(probe=probe, argv=self.argv, out_dir=out_dir)
        try:
            stalled, starting = self._wait(outcome, start + timeout_s)
        finally:
            outcome.wall_s = time.monotonic() - start
            copy_logs(self.folder, out_dir, marks)
        finished = outcome.returncode is None and not outcome.timed_out
        return launch.conclude(outcome, finished, timeout_s, stalled, starting)

    def _post(self, request: Mapping[str, str | bool]) -> None:
        """A request for the ranks (``acceptance.probes.worker``): a probe's name, spec and folder, or exit."""
        write_atomic(self.folder / "requests" / f"{self.served}.json", json.dumps(request))

    def _wait(self, outcome: launch.ProbeRun, deadline: float) -> tuple[list[diagnose.Stall], int]:
        """Until the probe is done on every local rank, the job exits, or the deadline (the job is then
        ended; returns what the heartbeats and the process table showed before, as ``launcher._supervise``)."""
        out_dir = outcome.out_dir
        try:
            while not self._done(out_dir):
                outcome.returncode = self.proc.poll()
                if outcome.returncode is not None:
                    break
                if time.monotonic() >= deadline:
                    outcome.timed_out = True
                    stalled, starting = diagnose.stalls(out_dir), len(reaper.children(self.proc.pid))
                    self.end(out_dir, hung=True)
                    outcome.returncode = self.proc.returncode
                    return stalled, starting
                time.sleep(POLL_S)
        except BaseException:
            self.end(out_dir)
            raise
        return [], 0

    def _done(self, out_dir: Path) -> bool:
        if not (out_dir / "result.json").is_file():
            return False
        return sum(s.get("status") == "done" for s in diagnose.rank_states(out_dir)) >= self.ranks

    def end(self, out_dir: Path | None = None, hung: bool = False) -> None:
        """End the job and its ranks now (``reaper.end``), found also by the heartbeats in ``out_dir``."""
        reaper.end(self.proc, lambda: launch.local_ranks(out_dir, self.spec) if out_dir else [], hung=hung)

    def close(self) -> None:
        """Tell the ranks to exit and wait until they have, EXIT_GRACE_S at most, then end whatever is left.
        On one node the wait ends with the ranks: their GPUs are free, and torchrun's own exit after them
        (its agent's bookkeeping, about a second) goes on beside the next job, on a port of its own
        (``--standalone``); ``Workers.shut_down`` waits for it. On several nodes it ends with torchrun, whose
        rendezvous store holds the one port the next job meets at. A worker that ran no probe (started early
        for a session that had none for it) is ended at once: its ranks may still be starting."""
        if self.served == 0:
            self.end()
            return
        ranks = self._ranks()
        try:
            if self.alive:
                self.served += 1
                self._post({"exit": True})
                deadline = time.monotonic() + EXIT_GRACE_S
                while self._running(ranks) and time.monotonic() < deadline:
                    time.sleep(POLL_S)
        finally:
            if self._running(ranks):
                self.end()

    def _ranks(self) -> list[int]:
        """This node's ranks by their last heartbeats, when every one is named there and one node has them
        all; else none, and the job's own exit says when they are gone."""
        found = launch.local_ranks(self.last_out, self.spec) if self.last_out is not None else []
        return found if self.nodes == 1 and len(found) == self.ranks else []

    def _running(self, ranks: list[int]) -> bool:
        # a rank that has exited is gone from the process table or a zombie, whose command line is empty;
        # a pid taken since by another program does not have the worker's spec on its command line
        return any(reaper.runs(pid, self.spec) for pid in ranks) if ranks else self.alive


def log_sizes(folder: Path) -> dict[Path, int]:
    """How far each of the worker's log files has been written (torchrun's output and every rank's own)."""
    files = [folder / "torchrun.log", *(p for p in (folder / "logs").rglob("*") if p.is_file())]
    return {p: p.stat().st_size for p in files if p.is_file()}


def copy_logs(folder: Path, out_dir: Path, before: dict[Path, int]) -> None:
    """What the worker's logs gained since ``before`` (log_sizes at the probe's start), into the probe's
    folder under the same names, where ``diagnose`` and a person look for a probe's logs. torchrun copies
    the ranks' lines into its own output a moment after they are written: a line at a probe's very end can
    land in the next probe's ``torchrun.log``; the ranks' own files are exact. Every file is there, empty
    where the probe wrote nothing, as a job of its own leaves them."""
    for path in log_sizes(folder):
        target = out_dir / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as source, open(target, "wb") as copy:
            source.seek(before.get(path, 0))
            shutil.copyfileobj(source, copy)
        # the times too: the first rank's error file to be written names the crash (diagnose.error_files)
        shutil.copystat(path, target)


def node_env(topo: Topology, placement: Placement) -> dict[str, str]:
    """What every probe of this node may be given: one pytest per node hands its own node rank to its ranks
    (``acceptance.probes.links``). Under the srun controller a single pytest starts every node, and the
    probe reads Slurm's node id instead."""
    return {NODE_ENV: str(placement.node_rank)} if topo.launcher == "torchrun" else {}


class Workers:
    """This node's worker: started with the session (``start_early``) or for the first probe it can run,
    handed each such probe, and replaced after any failure. ``topo``, ``placement``, ``profile_env``: the
    session's; ``pg_timeout_s``: the longest probe it may run, so that no collective of a probe gives up
    before the probe's own timeout."""

    def __init__(
        self,
        enabled: bool,
        folder: Path,
        topo: Topology,
        placement: Placement,
        profile_env: Mapping[str, str],
        pg_timeout_s: float,
    ) -> None:
        self.enabled, self.folder, self.topo, self.placement = enabled, folder, topo, placement
        self.session_env = node_env(topo, placement)
        self.env = launch.child_env(profile_env, self.session_env)
        self.pg_timeout_s = pg_timeout_s
        self.current: Worker | None = None
        self.leaving: list[Worker] = []  # closed workers whose torchrun is still exiting
        self.started_at = ""  # the probe the current worker started with: every node's must be the same one

    def takes(self, probe: str, env: Mapping[str, str], topo: Topology, placement: Placement) -> bool:
        """Whether the worker runs this probe. Under srun one pytest drives every node through one srun
        step per job, and the worker's requests, heartbeats and reaping are this node's alone: every probe
        keeps a job of its own there."""
        same_world = topo == self.topo and placement == self.placement
        own_env = env.items() <= self.session_env.items()
        return self.enabled and probe in WORKER_PROBES and topo.launcher == "torchrun" and same_world and own_env

    @property
    def token(self) -> str:
        """What this node tells the others before a probe: which worker it would run it in ('' for none)."""
        return self.started_at if self.current is not None and self.current.alive else ""

    def agree(self, tokens: list[str]) -> None:
        """Keep the worker only while every node keeps the one started with it: a node whose worker failed
        starts a fresh one, and its peers' ranks would wait for it in the old process group."""
        if len(set(tokens)) != 1 or not tokens[0]:
            self.close()

    def run(
        self, probe: str, spec: Mapping[str, object], where: tuple[str, int, Path], timeout_s: float
    ) -> launch.ProbeRun:
        """Run ``probe`` in the worker, starting one if there is none; ``where``: the rendezvous id's prefix,
        the probe's number in the session and its folder."""
        tag, seq, out_dir = where
        if self.current is None or not self.current.alive:
            self.start(out_dir.name, f"{tag}-worker-{seq}", timeout_s)  # NN-key: the same on every node
        worker = self.current
        assert worker is not None
        try:
            return worker.run(probe, spec, out_dir, self.topo, timeout_s)
        except BaseException:
            self.current = None  # never used again: the next probe gets a fresh worker
            if worker.alive:  # a crash or a timeout has ended it; anything else leaves it unusable
                worker.end(out_dir)
            raise

    def start(
        self, name: str, run_id: str, join_timeout_s: float, early: bool = False, preload: tuple[str, ...] = ()
    ) -> None:
        """A fresh worker in ``folder/name`` (the name every node gives it), joining the rendezvous ``run_id``
        within ``join_timeout_s``."""
        self.close()
        self.started_at = name
        timeouts = (self.pg_timeout_s, join_timeout_s)
        self.current = Worker(self.folder / name, self.topo, self.placement, run_id, self.env, timeouts, early, preload)

    def start_early(self, tag: str, join_timeout_s: float, preload: tuple[str, ...] = ()) -> bool:
        """Start the worker with the session, before its first probe is known, when it can be: one node under
        torchrun (several nodes start theirs together at their first probe's barrier). Its start (torchrun,
        ``import torch`` in every rank, the process group) then runs beside the preflight, and so do its
        imports of the ``preload`` probes (the session's: ``torch.distributed.checkpoint`` for storage is
        4.5 s of a cold 2x H200's storage probe), before any probe measures."""
        if not self.enabled or self.placement.nodes != 1 or self.topo.launcher != "torchrun":
            return False
        self.start(EARLY, f"{tag}-worker-0", join_timeout_s, early=True, preload=preload)
        return True

    def close(self) -> None:
        """Tell the worker's ranks to exit and wait for them (before a job of its own, which has the node to
        itself as before: its GPUs free of the worker's CUDA context and NCCL buffers)."""
        worker, self.current = self.current, None
        if worker is not None:
            try:
                worker.close()
            finally:  # also on Ctrl-C: the session's end still waits for its torchrun
                if worker.alive:
                    self.leaving.append(worker)

    def shut_down(self) -> None:
        """The session's end: close the worker, then wait for every closed one's torchrun to exit, ending
        what is left after EXIT_GRACE_S."""
        self.close()
        leaving, self.leaving = self.leaving, []
        for worker in leaving:
            try:
                worker.proc.wait(timeout=EXIT_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            finally:
                if worker.alive:
                    worker.end()
