"""What went wrong in a probe, in one headline a person can act on, then the log lines that show it.

A crash names the first rank whose error torchrun recorded (the others fail because of it). A timeout
names the rank that stopped first, from the heartbeats the ranks write (``acceptance.probes.rank``) and,
on this node, the process table: a rank that is stopped, wedged in the kernel or gone comes first; then
the rank that got least far (a rank short of a collective counts less progress than the peers waiting in
it); then the one whose progress is oldest. A torchrun that failed by itself (a busy rendezvous port)
is named by the first exception line of its log, wherever the traceback put it.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptance.families.heartbeat import RankState
from acceptance.run import reaper

TAIL_LINES = 30
# a heartbeat older than this (ranks beat every second) means the process is not running; only for ranks on
# other nodes, whose process table we cannot read, and with room for a loaded node's scheduling
STALE_BEAT_S = 10.0
# the last line of a Python traceback: the exception and its message (the first one in a log is the cause)
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)\b:? ?.*")
HINTS = {
    "EADDRINUSE": "the rendezvous port is taken on this host (another run, or a process left over): "
    "free it or pick another with --cluster-head HOST:PORT or MASTER_PORT",
}


@dataclass
class Stall:
    """A rank that had not finished when the probe ran out of time, as its heartbeat and this node saw it."""

    state: Mapping[str, Any]  # a heartbeat (RankState), or what torchrun's error file says of a rank without one
    idle_s: float  # since its last progress
    frozen: str | None  # why it cannot be making progress at all: stopped, wedged, gone, no heartbeat

    @property
    def rank(self) -> int:
        return int(self.state["rank"])


def rank_states(out_dir: Path) -> list[RankState]:
    """Every rank's last heartbeat, in rank order."""
    states: list[RankState] = []
    for path in sorted(out_dir.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        try:
            states.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return states


def stalls(out_dir: Path, now: float | None = None) -> list[Stall]:
    """The unfinished ranks, the most likely culprit first. Read before anything is killed."""
    now = time.time() if now is None else now
    here = socket.gethostname()
    found = []
    for state in rank_states(out_dir):
        if state.get("status") == "done":
            continue
        beat_age = now - float(state.get("beat_at", now))
        if state.get("host") == here:
            frozen = reaper.state(int(state.get("pid", 0)))
        elif beat_age > STALE_BEAT_S:
            frozen = f"no heartbeat for {beat_age:.0f} s"
        else:
            frozen = None
        found.append(Stall(state, now - float(state.get("progress_at", now)), frozen))
    found.sort(key=lambda s: (s.frozen is None, int(s.state.get("progress", 0)), -s.idle_s, s.rank))
    return found


def rank_label(state: Mapping[str, Any]) -> str:
    gpu = f", {state['gpu_uuid']}" if state.get("gpu_uuid") else ""
    return f"rank {state['rank']} (host {state.get('host')}, local rank {state.get('local_rank')}{gpu})"


def hang(probe: str, timeout_s: float, stalled: list[Stall], out_dir: Path, starting: int = 0) -> str:
    """``starting``: rank processes torchrun had started on this node (some may not have beaten yet)."""
    head = f"probe {probe} timed out after {timeout_s:g} s and was killed: "
    if not stalled:
        why = (
            f"{starting} rank process(es) had started but none got as far as its first heartbeat "
            "(still importing torch and the probe: an overloaded node, or a slow shared filesystem)"
            if starting
            else "torchrun had started no rank (still in its rendezvous, or waiting for the other nodes)"
        )
        return head + f"{why}\n--- torchrun.log (last {TAIL_LINES} lines) ---\n{tail_file(out_dir / 'torchrun.log')}"
    first, others = stalled[0], stalled[1:]
    tied = [s for s in others if (s.frozen is None) == (first.frozen is None) and _progress(s) == _progress(first)]
    if tied and first.frozen is None:
        # nothing tells them apart: say so rather than pick one
        every = "; ".join(_where(s) for s in stalled)
        return head + f"no rank stands out; all stopped progressing at the same point: {every}\n{tail(out_dir, first)}"
    why = f"; process {first.frozen}" if first.frozen else ""
    # the pid, so that a person on that host can look at the process (py-spy dump, gdb, /proc) at once
    pid = f"; pid {first.state['pid']}" if first.state.get("pid") else ""
    text = (
        f"{rank_label(first.state)} stopped progressing {first.idle_s:.0f} s ago in phase {first.state.get('phase')!r}"
    )
    text += f" (progress {_progress(first)}{pid}{why})"
    if others:
        text += "; the others wait for it: " + "; ".join(_where(s) for s in others)
    return head + f"{text}\n{tail(out_dir, first)}"


def _progress(stall: Stall) -> int:
    return int(stall.state.get("progress", 0))


def _where(stall: Stall) -> str:
    frozen = f", process {stall.frozen}" if stall.frozen else ""
    return (
        f"{rank_label(stall.state)} in phase {stall.state.get('phase')!r}, "
        f"progress {_progress(stall)}, last {stall.idle_s:.0f} s ago{frozen}"
    )


def crash(probe: str, out_dir: Path) -> str | None:
    """The first rank error torchrun recorded, or None when no rank recorded one."""
    errors = error_files(out_dir)
    if not errors:
        return None
    local_rank, message = errors[0]
    here = socket.gethostname()
    mine = [s for s in rank_states(out_dir) if s.get("host") == here and s.get("local_rank") == local_rank]
    state = mine[0] if mine else {"rank": local_rank, "local_rank": local_rank, "host": here}
    return f"probe {probe} failed: {rank_label(state)} raised {message}\n{tail(out_dir, Stall(state, 0, None))}"


def exited(probe: str, returncode: int | None, out_dir: Path) -> str:
    return (
        f"probe {probe} exited with status {returncode} and left no result; {cause_and_tail(out_dir / 'torchrun.log')}"
    )


def error_files(out_dir: Path) -> list[tuple[int, str]]:
    """torchrun's per-rank error.json (written by ``@record``): (local rank, last line of the error), the
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
        found.append((local_rank, text.strip().splitlines()[-1] if text.strip() else "an error"))
    return found


def tail(out_dir: Path, stall: Stall) -> str:
    local_rank = stall.state.get("local_rank", stall.rank)
    logs = sorted((out_dir / "logs").glob(f"*/attempt_*/{local_rank}/std*.log"))
    text = "\n".join(f"--- {p.relative_to(out_dir)} (last {TAIL_LINES} lines) ---\n{tail_file(p)}" for p in logs)
    return (text or tail_file(out_dir / "torchrun.log")) + nccl_warnings(out_dir.parent / "nccl")


def nccl_warnings(folder: Path) -> str:
    """NCCL's own warnings (``NCCL WARN``, an InfiniBand completion error, a socket that closed) from the ranks'
    debug files (``probes.nccl_log`` points NCCL's report there, away from the ranks' logs), the last few:
    the cause of a failed collective is often only there. "" where there are none."""
    found: list[str] = []
    for path in sorted(folder.glob("nccl-*.log")):
        try:
            found += [line.strip() for line in path.read_text(errors="replace").splitlines() if " NCCL WARN " in line]
        except OSError:
            continue
    if not found:
        return ""
    return f"\n--- NCCL's warnings ({folder}, last {TAIL_LINES}) ---\n" + "\n".join(found[-TAIL_LINES:])


def cause_and_tail(log: Path) -> str:
    """The log's first exception line (the root cause of a chained traceback), with a hint where one is
    known, then the log's tail: the cause is often further up than the tail reaches."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"({log} is missing)"
    cause = next((line.strip() for line in lines if EXCEPTION_LINE.match(line.strip())), None)
    hint = next((h for key, h in HINTS.items() if cause and key in cause), None)
    head = f"{log.name} says: {cause}" + (f"\n  hint: {hint}" if hint else "") if cause else f"see {log.name}"
    return f"{head}\n--- {log.name} (last {TAIL_LINES} lines) ---\n" + "\n".join(lines[-TAIL_LINES:])


def tail_file(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} is missing)"
    return "\n".join(lines[-TAIL_LINES:])
