"""Start a probe under torchrun, bound it in time, and turn what the ranks left behind into a result.

No shell is ever involved. torchrun starts through ``acceptance.run.watchdog`` and starts each rank
through it, so that none of them outlives its parent (pytest, then torchrun), even after SIGKILL. On
timeout or interrupt ``acceptance.run.reaper`` ends torchrun and every rank within seconds, and
``acceptance.run.diagnose`` names the rank that stopped, from the heartbeats read before the kill.

A job can also be started ahead of its turn (``stage``): its ranks import what they need while another
probe still has the node, and wait at a gate (``acceptance.families.staging``) that ``run`` opens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import acceptance
from acceptance.atomic_file import write_atomic
from acceptance.families import staging
from acceptance.families.gpu_users import RUN_PID_ENV
from acceptance.families.heartbeat import RankState
from acceptance.run import diagnose, reaper
from acceptance.run.placement import Placement
from acceptance.schema.topology import Topology

CANCEL_GRACE_S = 10.0  # for a cancelled staged job's ranks to leave the gate (a file read away)


class ProbeError(Exception):
    """A probe that crashed, hung or produced no result; the message says which rank and why.
    ``out_dir``: the probe's folder (logs, heartbeats); ``shown_in``: the test that reported it in full;
    ``timed_out``: it was killed at its time limit (one the operator gave is the run's setting, not the node's
    fault: ``acceptance.plugin.drain_hooks.categorize``)."""

    def __init__(self, message: str, out_dir: Path | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.out_dir = out_dir
        self.timed_out = timed_out
        self.shown_in: str | None = None

    def name_limit(self, origin: str) -> None:
        """A timeout's message with where its limit was set, after "timed out after N s": whose setting it
        is, so the operator finds the line or the option to change."""
        head, sep, rest = str(self).partition(" and was killed")
        if self.timed_out and sep:
            self.args = (f"{head} ({origin}){sep}{rest}",)


@dataclass
class ProbeRun:
    probe: str
    argv: list[str]
    out_dir: Path
    returncode: int | None = None
    wall_s: float = 0.0
    timed_out: bool = False
    result: dict[str, Any] | None = None
    error: str | None = None
    ranks: list[RankState] = field(default_factory=list)


def torchrun_argv(
    probe: str,
    out_dir: Path,
    topo: Topology,
    placement: Placement,
    run_id: str,
    join_timeout_s: float,
    env: Mapping[str, str] | None = None,
    program: list[str] | None = None,
) -> list[str]:
    """The command that runs ``probe`` on every node: torchrun on this node, or ``srun`` starting one
    torchrun on each node of the Slurm allocation (``topology.launcher: srun``). ``program``: what each rank
    runs instead of the probe's module (``-m acceptance.probes.worker ...``); the logs go to ``out_dir``."""
    srun = topo.launcher == "srun"
    # under srun, acceptance.run.slurm_task adds the node rank from SLURM_NODEID and then becomes torchrun
    runner = "acceptance.run.slurm_task" if srun else "torch.distributed.run"
    argv = [
        sys.executable,
        "-m",
        runner,
        f"--nproc-per-node={topo.nproc_per_node}",
        "--max-restarts=0",
        f"--log-dir={out_dir / 'logs'}",
        "--redirects=3",
        "--tee=3",
    ]
    if placement.nodes == 1:
        argv.append("--standalone")
    else:
        argv += [
            f"--nnodes={placement.nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={placement.endpoint}",
            f"--rdzv-id={run_id}",
            f"--rdzv-conf={_rdzv_conf(topo, placement, join_timeout_s)}",
        ]
    # each rank dies with torchrun (see acceptance.run.watchdog)
    argv += ["-m", "acceptance.run.watchdog", "--agent", "--", sys.executable]
    argv += program or ["-m", f"acceptance.probes.{probe}", "--spec", str(out_dir / "spec.json"), "--out", str(out_dir)]
    return [*srun_prefix(topo, placement, probe, env or {}), *argv] if srun else argv


def _rdzv_conf(topo: Topology, placement: Placement, join_timeout_s: float) -> str:
    conf = f"join_timeout={int(join_timeout_s)}"
    if topo.launcher == "torchrun":
        # torchrun guesses whether it hosts the rendezvous store by matching the endpoint against this
        # machine's names and addresses; a Kubernetes service name or a loopback head shared by several
        # "nodes" on one machine defeats the guess, and we know the answer: node 0 hosts it.
        conf += f",is_host={'true' if placement.node_rank == 0 else 'false'}"
    return conf


def srun_prefix(topo: Topology, placement: Placement, probe: str, env: Mapping[str, str]) -> list[str]:
    """One task per node across the whole allocation, so one pytest on the login node (or in the batch
    script) measures every node; each task becomes that node's torchrun agent."""
    prefix = [
        "srun",
        f"--nodes={placement.nodes}",
        f"--ntasks={placement.nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f"--job-name=acceptance-{probe}",
    ]
    # srun no longer inherits the batch script's --cpus-per-task (Slurm 22.05); without it the agent and
    # all its ranks would share one CPU
    if env.get("SLURM_CPUS_ON_NODE", "").isdigit():
        prefix.append(f"--cpus-per-task={env['SLURM_CPUS_ON_NODE']}")
    return [*prefix, *topo.srun_args]


def child_env(profile_env: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(profile_env)
    env.update(extra or {})
    # a source checkout works without installation: the children import the same package we did
    root = str(Path(acceptance.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # the run's own processes are this one's descendants: a process on a rank's GPU that is not is another's
    # (acceptance.probes.gpu_sampler names it beside the figures it slowed)
    env[RUN_PID_ENV] = str(os.getpid())
    # torchrun's grace for the peers of a failed rank (torch/distributed/launcher/api.py reads it; 30 s by
    # default): a stopped peer never takes it, and the verdict should not wait for it
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", reaper.SHUTDOWN_TIMEOUT_S)
    # DeepSpeed compiles its CPU op into TORCH_EXTENSIONS_DIR, by default ~/.cache/torch_extensions, which
    # every environment of the user shares: another environment's torch or DeepSpeed makes the cached op
    # stale, so each switch rebuilds it (a minute or more). One folder per environment, unless the user
    # chose one; an environment we cannot write to (a system Python) keeps DeepSpeed's default.
    if "TORCH_EXTENSIONS_DIR" not in env and os.access(sys.prefix, os.W_OK):
        env["TORCH_EXTENSIONS_DIR"] = str(Path(sys.prefix) / "var" / "cache" / "torch_extensions")
    return env


def prepare(out_dir: Path, spec: Mapping[str, object], topo: Topology, timeout_s: float) -> None:
    """A fresh folder for the probe, holding its ``spec.json``."""
    if out_dir.exists() and any(out_dir.iterdir()):
        # a reused evidence folder: keep the earlier run's files, but never read them as this run's
        out_dir.rename(out_dir.with_name(f"{out_dir.name}.before-{time.strftime('%Y%m%d-%H%M%S')}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    full_spec = {"backend": topo.backend, "device": topo.device, "pg_timeout_s": timeout_s, **spec}
    (out_dir / "spec.json").write_text(json.dumps(full_spec, indent=1, sort_keys=True))


def run(probe: str, job: Staged, timeout_s: float) -> ProbeRun:
    """Run a probe's job (``stage``) to completion or to its timeout; raise :class:`ProbeError` unless it
    produced a result. A gated job (started ahead of its turn with this spec) has its gate opened now, and its
    time counts from here."""
    if job.gated:
        try:
            write_atomic(job.out_dir / staging.GATE, staging.GO)
        except BaseException:
            cancel(job)
            raise
        job.opened = time.monotonic()
    outcome = ProbeRun(probe=probe, argv=job.argv, out_dir=job.out_dir)
    stalled, starting = _supervise(outcome, job, timeout_s)
    return conclude(outcome, outcome.returncode == 0, timeout_s, stalled, starting)


@dataclass
class Staged:
    """A probe's job, started (``stage``): its torchrun, and the log that torchrun writes to."""

    argv: list[str]
    out_dir: Path
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    gated: bool  # its ranks wait at the gate until ``run`` opens it
    started: float = field(default_factory=time.monotonic)
    opened: float | None = None  # when its gate opened (``run``)


def stage(
    probe: str,
    spec: Mapping[str, object],
    *,
    out_dir: Path,
    topo: Topology,
    placement: Placement,
    run_id: str,
    timeout_s: float,
    env: Mapping[str, str],
    gated: bool = True,
) -> Staged:
    """Start the probe's job in a fresh ``out_dir``, for ``run`` to see to its end; ``gated``: ahead of its turn,
    its ranks waiting at the gate (``acceptance.families.staging``) until ``run`` opens it or ``cancel`` ends it."""
    prepare(out_dir, {**spec, "gate": str(out_dir / staging.GATE)} if gated else spec, topo, timeout_s)
    argv = torchrun_argv(probe, out_dir, topo, placement, run_id, join_timeout_s=timeout_s, env=env)
    log = open(out_dir / "torchrun.log", "wb")  # noqa: SIM115  (the job writes to it until it ends)
    try:
        return Staged(argv, out_dir, spawn(argv, env, log), log, gated)
    except BaseException:
        log.close()
        raise


def gate_word(staged: Staged) -> str:
    """The word a staged job's gate holds ("" before the first)."""
    try:
        return (staged.out_dir / staging.GATE).read_text().strip()
    except OSError:
        return ""


def cancel(staged: Staged) -> None:
    """A staged job the run ended without: tell its ranks (those waiting at the gate exit; one still importing
    reads the word only after its imports), give them CANCEL_GRACE_S, then end whatever is left."""
    try:
        write_atomic(staged.out_dir / staging.GATE, staging.CANCEL)
        staged.proc.wait(timeout=CANCEL_GRACE_S)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        if staged.proc.poll() is None:
            reaper.end(staged.proc, lambda: local_ranks(staged.out_dir), hung=False)
        staged.log.close()


def conclude(
    outcome: ProbeRun, finished: bool, timeout_s: float, stalled: list[diagnose.Stall], starting: int
) -> ProbeRun:
    """The probe's result when its ranks ``finished`` and left one; else raise :class:`ProbeError` saying
    which rank failed and how. ``stalled``, ``starting``: what the timeout found (see ``_supervise``)."""
    outcome.ranks = diagnose.rank_states(outcome.out_dir)
    result_path = outcome.out_dir / "result.json"
    if finished and not outcome.timed_out and result_path.is_file():
        outcome.result = json.loads(result_path.read_text())
        return outcome
    outcome.error = _diagnose(outcome, timeout_s, stalled, starting)
    raise ProbeError(outcome.error, outcome.out_dir, timed_out=outcome.timed_out)


def spawn(argv: list[str], env: Mapping[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start torchrun through the watchdog, so that it dies with us, in a session of its own (a Ctrl-C
    at the terminal reaches pytest alone, which ends it), its output to ``log``."""
    guarded = [sys.executable, "-m", "acceptance.run.watchdog", "--parent", str(os.getpid()), "--", *argv]
    return subprocess.Popen(
        guarded, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env), start_new_session=True
    )


def _supervise(outcome: ProbeRun, job: Staged, timeout_s: float) -> tuple[list[diagnose.Stall], int]:
    """Wait for the job (started through the watchdog: it dies with us); on timeout or interrupt end it and
    its ranks. Returns what the heartbeats and the process table showed at the timeout: the unfinished
    ranks, and how many rank processes torchrun had started."""
    out_dir, proc, start = outcome.out_dir, job.proc, time.monotonic()
    stalled: list[diagnose.Stall] = []
    starting = 0
    try:
        outcome.returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        outcome.timed_out = True
        # before the kill: the process table still shows who stopped, and who never started
        stalled, starting = diagnose.stalls(out_dir), len(reaper.children(proc.pid))
        reaper.end(proc, lambda: local_ranks(out_dir), hung=True)
        outcome.returncode = proc.returncode
    except BaseException:
        reaper.end(proc, lambda: local_ranks(out_dir), hung=False)
        raise
    finally:
        outcome.wall_s = time.monotonic() - start
        job.log.close()
    return stalled, starting


def local_ranks(out_dir: Path, argument: str | None = None) -> list[int]:
    """The pids of this node's ranks of the probe in ``out_dir``: a pid on another host means nothing here,
    and a recorded pid that now runs something else (reused) is left alone. ``argument``: what a rank of
    this job has on its command line (default: the probe's folder)."""
    here = socket.gethostname()
    pids = [int(s.get("pid", 0)) for s in diagnose.rank_states(out_dir) if s.get("host") == here]
    return [pid for pid in pids if reaper.runs(pid, argument or str(out_dir))]


def _diagnose(run: ProbeRun, timeout_s: float, stalled: list[diagnose.Stall], starting: int) -> str:
    crashed = diagnose.crash(run.probe, run.out_dir)
    if crashed:
        return crashed
    if run.timed_out:
        return diagnose.hang(run.probe, timeout_s, stalled, run.out_dir, starting)
    return diagnose.exited(run.probe, run.returncode, run.out_dir)
