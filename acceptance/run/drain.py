"""``--cluster-drain``: act on a drain list through the scheduler, with argv lists (never a shell).

- Slurm: ``scontrol update nodename=NODE state=drain reason=REASON`` (scontrol(1), "NODES - SPECIFICATIONS
  FOR UPDATE COMMAND": State=DRAIN requires a Reason). A person resumes the node with
  ``scontrol update nodename=NODE state=resume``.
- Kubernetes: ``kubectl taint nodes NODE cluster-acceptance/verdict=fail:NoSchedule --overwrite`` keeps new
  pods off it (kubectl taint; the value must be a label value, so the reason goes into an annotation),
  ``kubectl label nodes NODE cluster-acceptance/verdict=fail --overwrite`` lets a selector find it, and
  ``kubectl annotate nodes NODE cluster-acceptance/reason=REASON --overwrite`` keeps the one-line reason.
  ``kubectl taint nodes NODE cluster-acceptance/verdict-`` removes the taint.

Only entries of severity ``drain`` are acted on; ``review`` entries are for a person.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

from acceptance.evidence.drain import DrainList, DrainNode, to_drain

KEY = "cluster-acceptance/verdict"
REASON_KEY = "cluster-acceptance/reason"
COMMAND_TIMEOUT_S = 30.0  # scontrol and kubectl answer in a second; a hung controller must not hang the run
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)


def slurm_commands(node: DrainNode) -> list[list[str]]:
    reason = f"cluster-acceptance: {node['reason']}"
    return [["scontrol", "update", f"nodename={node['scheduler_name']}", "state=drain", f"reason={reason}"]]


def kubernetes_commands(node: DrainNode) -> list[list[str]]:
    name = node["scheduler_name"]
    return [
        ["kubectl", "taint", "nodes", name, f"{KEY}=fail:NoSchedule", "--overwrite"],
        ["kubectl", "label", "nodes", name, f"{KEY}=fail", "--overwrite"],
        ["kubectl", "annotate", "nodes", name, f"{REASON_KEY}={node['reason']}", "--overwrite"],
    ]


COMMANDS: dict[str, Callable[[DrainNode], list[list[str]]]] = {
    "slurm": slurm_commands,
    "kubernetes": kubernetes_commands,
}


def apply(drain: DrainList, way: str, run: Runner = _run) -> list[str]:
    """Run the commands of ``way`` for every node to drain; one line per command: what ran and how it ended.
    A command that cannot run (not installed, no permission, a timeout) is a line too, never an exception."""
    lines: list[str] = []
    for node in to_drain(drain):
        for argv in COMMANDS[way](node):
            shown = " ".join(argv)
            try:
                done = run(argv)
            except (OSError, subprocess.TimeoutExpired) as exc:
                lines.append(f"{shown}: could not run: {exc}")
                continue
            said = (done.stderr or done.stdout or "").strip().splitlines()
            end = "ok" if done.returncode == 0 else f"exit {done.returncode}"
            lines.append(f"{shown}: {end}" + (f": {said[0]}" if said else ""))
    return lines
