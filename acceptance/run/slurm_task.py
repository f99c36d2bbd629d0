"""One ``srun`` task of the Slurm controller mode: become this node's torchrun agent.

``python -m acceptance.run.slurm_task TORCHRUN-ARGS...`` reads the node's index in the step from
SLURM_NODEID and tells torchrun whether it hosts the c10d rendezvous store: node 0, the head the
controller named, does. torchrun's own guess compares the endpoint with this machine's names, which a
Slurm node name need not match. (The node ranks inside the probes come from the rendezvous itself;
torchrun ignores ``--node-rank`` with c10d.) Then it replaces itself with torchrun, so srun's signals
reach the agent directly, and its ranks know their agent's pid (``acceptance.run.watchdog``).
"""

from __future__ import annotations

import os
import sys

from acceptance.run.watchdog import AGENT_ENV


def torchrun_args(args: list[str], node_id: int) -> list[str]:
    """``args`` with this node's store role in torchrun's ``--rdzv-conf`` (added when absent); the
    program after ``-m`` (or the script) and its arguments are left alone."""
    split = next((i for i, a in enumerate(args) if a == "-m" or not a.startswith("-")), len(args))
    options, program = args[:split], args[split:]
    role = f"is_host={'true' if node_id == 0 else 'false'}"
    for i, arg in enumerate(options):
        if arg.startswith("--rdzv-conf="):
            options[i] = f"{arg},{role}" if arg != "--rdzv-conf=" else f"{arg}{role}"
            return [*options, *program]
    return [*options, f"--rdzv-conf={role}", *program]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    node_id = os.environ.get("SLURM_NODEID", "")
    if not node_id.isdigit():
        sys.exit(f"acceptance.run.slurm_task: SLURM_NODEID={node_id!r}; run me under srun, one task per node")
    full = [sys.executable, "-m", "torch.distributed.run", *torchrun_args(args, int(node_id))]
    os.environ[AGENT_ENV] = str(os.getpid())  # this process becomes the agent; the launcher's pid is remote
    os.execv(sys.executable, full)


if __name__ == "__main__":
    main()
