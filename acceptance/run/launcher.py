"""Start a probe under torchrun, bound it in time, and turn what the ranks left behind into a result.

No shell is ever involved. torchrun runs in a new session; each rank it starts is a session leader of
its own (torch.distributed.elastic starts workers with ``start_new_session``), so on timeout or
interrupt we signal torchrun's group, then every rank's group by the pid each rank recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acceptance
from acceptance.profile.model import Topology
from acceptance.run.placement import Placement

GRACE_S = 35.0  # torchrun gives its workers 30 s to exit after it is signalled (elastic agent default)
TAIL_LINES = 30


class ProbeError(Exception):
    """A probe that crashed, hung or produced no result; the message says which rank and why."""


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
    ranks: list[dict[str, Any]] = field(default_factory=list)


def torchrun_argv(
    probe: str,
    out_dir: Path,
    topo: Topology,
    placement: Placement,
    run_id: str,
    join_timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """The command that runs ``probe`` on every node: torchrun on this node, or ``srun`` starting one
    torchrun on each node of the Slurm allocation (``topology.launcher: srun``)."""
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
    argv += ["-m", f"acceptance.probes.{probe}", "--spec", str(out_dir / "spec.json"), "--out", str(out_dir)]
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
    # DeepSpeed compiles its CPU op into TORCH_EXTENSIONS_DIR, by default ~/.cache/torch_extensions, which
    # every environment of the user shares: another environment's torch or DeepSpeed makes the cached op
    # stale, so each switch rebuilds it (a minute or more). One folder per environment, unless the user
    # chose one; an environment we cannot write to (a system Python) keeps DeepSpeed's default.
    if "TORCH_EXTENSIONS_DIR" not in env and os.access(sys.prefix, os.W_OK):
        env["TORCH_EXTENSIONS_DIR"] = str(Path(sys.prefix) / "var" / "cache" / "torch_extensions")
    return env


def run(
    probe: str,
    spec: dict[str, Any],
    *,
    out_dir: Path,
    topo: Topology,
    placement: Placement,
    run_id: str,
    timeout_s: float,
    env: Mapping[str, str],
) -> ProbeRun:
    """Run one probe to completion or to its timeout; raise :class:`ProbeError` unless it produced a result."""
    if out_dir.exists() and any(out_dir.iterdir()):
        # a reused evidence folder: keep the earlier run's files, but never read them as this run's
        out_dir.rename(out_dir.with_name(f"{out_dir.name}.before-{time.strftime('%Y%m%d-%H%M%S')}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    full_spec = {"backend": topo.backend, "device": topo.device, "pg_timeout_s": timeout_s, **spec}
    (out_dir / "spec.json").write_text(json.dumps(full_spec, indent=1, sort_keys=True))
    argv = torchrun_argv(probe, out_dir, topo, placement, run_id, join_timeout_s=timeout_s, env=env)
    outcome = ProbeRun(probe=probe, argv=argv, out_dir=out_dir)
    start = time.monotonic()
    with open(out_dir / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env), start_new_session=True
        )
        try:
            outcome.returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            outcome.timed_out = True
            outcome.returncode = _kill(proc, out_dir)
        except BaseException:
            _kill(proc, out_dir)
            raise
        finally:
            outcome.wall_s = time.monotonic() - start
    outcome.ranks = _rank_states(out_dir)
    result_path = out_dir / "result.json"
    if outcome.returncode == 0 and not outcome.timed_out and result_path.is_file():
        outcome.result = json.loads(result_path.read_text())
        return outcome
    outcome.error = _diagnose(outcome, timeout_s)
    raise ProbeError(outcome.error)


def _kill(proc: subprocess.Popen[bytes], out_dir: Path) -> int | None:
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    # ranks on other nodes (srun, or a shared evidence folder) are not ours to signal: a pid means
    # nothing on another host, and their own torchrun or srun ends them
    here = socket.gethostname()
    for state in _rank_states(out_dir):
        if state.get("host") == here:
            _signal_group(int(state.get("pid", 0)), signal.SIGKILL)
    return proc.returncode


def _signal_group(pid: int, sig: signal.Signals) -> None:
    if pid <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _rank_states(out_dir: Path) -> list[dict[str, Any]]:
    states = []
    for path in sorted(out_dir.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        try:
            states.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return states


def _diagnose(run: ProbeRun, timeout_s: float) -> str:
    errors = _error_files(run.out_dir)
    if errors:
        rank, message = errors[0]
        where = _rank_label(run.ranks, rank)
        return f"probe {run.probe} failed: {where} raised {message}\n{_tail(run.out_dir, rank)}"
    unfinished = [s for s in run.ranks if s.get("status") != "done"]
    if run.timed_out:
        stuck = "; ".join(f"{_rank_label(run.ranks, int(s['rank']))} in phase {s.get('phase')!r}" for s in unfinished)
        first = int(unfinished[0]["rank"]) if unfinished else 0
        return (
            f"probe {run.probe} timed out after {timeout_s:g} s and was killed; "
            f"unfinished: {stuck or 'no rank started'}\n{_tail(run.out_dir, first)}"
        )
    return (
        f"probe {run.probe} exited with status {run.returncode} and left no result"
        f"\n{_tail_file(run.out_dir / 'torchrun.log')}"
    )


def _rank_label(states: list[dict[str, Any]], rank: int) -> str:
    for state in states:
        if int(state.get("rank", -1)) == rank:
            return f"rank {rank} (host {state.get('host')}, local rank {state.get('local_rank')})"
    return f"rank {rank}"


def _error_files(out_dir: Path) -> list[tuple[int, str]]:
    """torchrun's per-rank error.json (written by ``@record``): (global rank, last line of the error), the
    first written first: a rank that crashes makes its peers fail too, and the first error is the cause."""
    found = []
    paths = sorted((out_dir / "logs").glob("*/attempt_*/*/error.json"), key=lambda p: p.stat().st_mtime_ns)
    for path in paths:
        try:
            data = json.loads(path.read_text())
            message = data["message"]
            text = message["message"] if isinstance(message, dict) else str(message)
            local_rank = int(path.parent.name)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found.append((_global_rank(out_dir, local_rank), text.strip().splitlines()[-1] if text.strip() else "an error"))
    return found


def _global_rank(out_dir: Path, local_rank: int) -> int:
    for state in _rank_states(out_dir):
        if state.get("local_rank") == local_rank:
            return int(state["rank"])
    return local_rank


def _tail(out_dir: Path, rank: int) -> str:
    local_rank = next((int(s["local_rank"]) for s in _rank_states(out_dir) if int(s["rank"]) == rank), rank)
    logs = sorted((out_dir / "logs").glob(f"*/attempt_*/{local_rank}/std*.log"))
    text = "\n".join(f"--- {p.relative_to(out_dir)} (last {TAIL_LINES} lines) ---\n{_tail_file(p)}" for p in logs)
    return text or _tail_file(out_dir / "torchrun.log")


def _tail_file(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} is missing)"
    return "\n".join(lines[-TAIL_LINES:])
