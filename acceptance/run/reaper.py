"""Ending a probe's processes on this node, fast, and reading their state from the process table.

torchrun runs in a session of its own, and each rank it starts is a session leader too
(torch.distributed.elastic's SubprocessHandler starts workers with ``start_new_session``), so signalling
torchrun's group leaves the ranks alone; we signal every group by the pids the ranks recorded and by
the process table (a rank still importing torch has recorded nothing yet).

torchrun's own shutdown is slow on purpose: on SIGTERM/SIGINT it forwards the signal to its workers and
waits ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (30 s by default) before SIGKILL (torch/distributed/elastic/
multiprocessing/api.py, ``_close``). A stopped or wedged rank ignores the forwarded signal, so waiting for
torchrun would cost those 30 s; instead we end the ranks ourselves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

GRACE_S = 5.0  # how long a rank and torchrun get to exit on SIGTERM before SIGKILL
SHUTDOWN_TIMEOUT_S = "3"  # TORCH_ELASTIC_SHUTDOWN_TIMEOUT for torchrun: its grace for a failed rank's peers
PROC = Path("/proc")
# /proc/PID/stat's state letter (proc(5)), as a person reads it
STATES = {
    "T": "stopped (SIGSTOP or a debugger)",
    "t": "stopped by a debugger",
    "D": "in uninterruptible sleep (waiting on a driver or device)",
    "Z": "exited (not yet reaped)",
}


def stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of ``pid``, or None when it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name in parentheses may hold spaces and parentheses: split after the last ')'
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def state(pid: int) -> str | None:
    """What the process table says about ``pid`` when it is not simply running or sleeping."""
    found = stat(pid)
    if found is None:
        return "gone"
    return STATES.get(found[0])


def runs(pid: int, argument: str) -> bool:
    """Whether ``pid`` is a live process with ``argument`` on its command line (a recorded pid may be reused)."""
    try:
        return argument in (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False


def alive(pid: int) -> bool:
    found = stat(pid)
    return found is not None and found[0] != "Z"


def children(pid: int) -> list[int]:
    kids = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            found = stat(int(entry.name))
            if found is not None and found[1] == pid:
                kids.append(int(entry.name))
    return kids


def signal_groups(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        if pid > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)


def end(proc: subprocess.Popen[bytes], find_ranks: Callable[[], Iterable[int]], hung: bool) -> None:
    """End torchrun (``proc``) and its ranks on this node within about GRACE_S, whatever state they are in.

    ``find_ranks``: the pids of the ranks (their groups are signalled too). ``hung``: the probe ran out of
    time (kept for the callers' record; every rank gets SIGTERM, then SIGKILL after GRACE_S). A second interrupt
    cuts the grace short: torchrun is SIGKILLed first thing on the way out, and its ranks die with it
    (``acceptance.run.watchdog``) even if nothing after that runs."""
    groups = {proc.pid}
    try:
        groups |= {*find_ranks(), *children(proc.pid)}
        # SIGTERM first, also for a hung probe: a rank that still runs removes what it wrote (the storage
        # family's checkpoint); a stopped or wedged one gets SIGKILL after GRACE_S, within timeout + 15 s
        signal_groups(groups, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and (proc.poll() is None or any(alive(p) for p in groups - {proc.pid})):
            time.sleep(0.1)
    finally:
        signal_groups([proc.pid], signal.SIGKILL)
        signal_groups(groups | set(children(proc.pid)), signal.SIGKILL)
        proc.wait()
