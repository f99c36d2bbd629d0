"""Tie a process's life to its parent's, then become the real program: no probe process outlives pytest.

``python -m acceptance.run.watchdog --parent PID -- PROGRAM ARGS...`` asks the kernel to SIGKILL this
process when its parent dies (``prctl(PR_SET_PDEATHSIG)``), checks that the parent is still PID (it may
have died before the request was made), and replaces itself with PROGRAM. The request survives ``execve``
for programs that are not set-user-ID (prctl(2)), so the launcher starts torchrun through it, and
torchrun starts every rank through it with ``--agent``: then SIGKILL of pytest takes torchrun down, and
torchrun's death takes its ranks, even a stopped one (SIGKILL ends stopped processes too).

The signal fires when the parent *thread* that started the child ends (prctl(2)); pytest and the torchrun
agent both start their children from their main thread.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys

AGENT_ENV = "ACCEPTANCE_AGENT_PID"  # the pid of this node's torchrun agent, the parent of every rank
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when ``parent`` goes; exit now if it has gone already. A no-op off Linux."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        # the parent died between our fork and the request: nobody would ever reap us
        sys.exit(f"acceptance.run.watchdog: parent {parent} is gone; not starting {sys.argv[1:]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acceptance.run.watchdog")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--parent", type=int, help="the pid that must outlive this process (the launcher: pytest)")
    who.add_argument("--agent", action="store_true", help=f"a rank: the parent is torchrun, pid in ${AGENT_ENV}")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program given after --")
    if args.agent:
        die_with_parent(int(os.environ.get(AGENT_ENV) or os.getppid()))
    else:
        die_with_parent(args.parent)
        # this process becomes the agent: its ranks check that they were started by it
        os.environ[AGENT_ENV] = str(os.getpid())
    os.execvp(program[0], program)


if __name__ == "__main__":
    main()
