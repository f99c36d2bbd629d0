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

The node's name comes from the environment (SLURMD_NODENAME, NODE_NAME), so it is checked to be one host
name as both define it (RFC 1123: labels of letters, digits and '-', joined by '.', none starting or ending
with '-', 253 characters at most) before any command runs: ``--all`` would taint every node of a cluster,
``gpu[001-100]`` and ``a,b,c`` are host lists that scontrol expands to many nodes. kubectl takes the name
after ``--`` (no name is read as an option); scontrol takes ``nodename=NAME`` as one argument, which only
the check keeps to one node.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence

from acceptance.evidence.drain import DrainList, DrainNode, to_drain

KEY = "cluster-acceptance/verdict"
REASON_KEY = "cluster-acceptance/reason"
COMMAND_TIMEOUT_S = 30.0  # scontrol and kubectl answer in a second; a hung controller must not hang the run
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
HOST_NAME_CHARS = 253


def name_problem(name: str) -> str | None:
    """Why ``name`` is not one host name (None when it is)."""
    if len(name) <= HOST_NAME_CHARS and HOST_NAME.fullmatch(name):
        return None
    return (
        f"node name {name!r} is not one host name (RFC 1123: letters, digits, '-' and '.', no leading or "
        "trailing '-', no ',', '[', ']' or space): no command run"
    )


def slurm_commands(node: DrainNode) -> list[list[str]]:
    reason = f"cluster-acceptance: {node['reason']}"
    return [["scontrol", "update", f"nodename={node['scheduler_name']}", "state=drain", f"reason={reason}"]]


def kubernetes_commands(node: DrainNode) -> list[list[str]]:
    name = node["scheduler_name"]
    return [
        ["kubectl", "taint", "nodes", "--overwrite", "--", name, f"{KEY}=fail:NoSchedule"],
        ["kubectl", "label", "nodes", "--overwrite", "--", name, f"{KEY}=fail"],
        ["kubectl", "annotate", "nodes", "--overwrite", "--", name, f"{REASON_KEY}={node['reason']}"],
    ]


COMMANDS: dict[str, Callable[[DrainNode], list[list[str]]]] = {
    "slurm": slurm_commands,
    "kubernetes": kubernetes_commands,
}


def apply(drain: DrainList, way: str, run: Runner = _run) -> list[str]:
    """Run the commands of ``way`` for every node to drain; one line per command: what ran and how it ended.
    A command that cannot run (not installed, no permission, a timeout) is a line too, never an exception;
    so is a node name that is not one host name, for which nothing runs."""
    lines: list[str] = []
    for node in to_drain(drain):
        problem = name_problem(node["scheduler_name"])
        if problem is not None:
            lines.append(f"{way}: refused: {problem}")
            continue
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
