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

The node's name comes from the scheduler that drains (``node_name``): under Slurm ``SLURMD_NODENAME``
(slurmd sets it for a prolog, an epilog and every job step: slurm.conf(5) "Prolog and Epilog Scripts",
srun(1) "OUTPUT ENVIRONMENT VARIABLES"), else what Slurm answers for this host (``scontrol show aliases
HOST``: the NodeName values of a NodeHostname, scontrol(1)); under Kubernetes ``NODE_NAME``, which the
shipped manifests (deploy/k8s) set from the downward API's ``spec.nodeName``. Another system's variable
(a CI agent's ``NODE_NAME`` under Slurm) is never taken: a run that cannot name itself for its scheduler
drains nothing and says which name it needed. The name is checked to be one host
name as both define it (RFC 1123: labels of letters, digits and '-', joined by '.', none starting or ending
with '-', 253 characters at most) before any command runs: ``--all`` would taint every node of a cluster,
``gpu[001-100]`` and ``a,b,c`` are host lists that scontrol expands to many nodes. kubectl takes the name
after ``--`` (no name is read as an option); scontrol takes ``nodename=NAME`` as one argument, which only
the check keeps to one node.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from acceptance.evidence.drain import Command, DrainList, DrainNode, to_drain

KEY = "cluster-acceptance/verdict"
REASON_KEY = "cluster-acceptance/reason"
COMMAND_TIMEOUT_S = 30.0  # scontrol and kubectl answer in a second; a hung controller must not hang the run
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]
_Handler = Callable[[int, FrameType | None], object] | int | None  # signal.getsignal's answer


SLURM_NAME = "SLURMD_NODENAME"
KUBERNETES_NAME = "NODE_NAME"  # deploy/k8s/*.yaml: valueFrom.fieldRef.fieldPath spec.nodeName


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _deferring(pending: list[int]) -> dict[int, _Handler] | None:
    """SIGINT and SIGTERM noted in ``pending`` instead of handled, until ``_replay``: one that comes while
    ``subprocess.Popen`` starts the child would raise inside it, before the caller holds a process to kill.
    None where handlers cannot be set (only the main thread may)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {sig: signal.signal(sig, lambda signum, _frame: pending.append(signum)) for sig in _STOPS}


def _replay(previous: dict[int, _Handler] | None, pending: list[int]) -> None:
    """The handlers back, then each noted signal handled as they would have (a KeyboardInterrupt, mostly)."""
    previous = previous or {}
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    for signum in pending:
        handler = previous.get(signum)
        if callable(handler):
            handler(signum, None)
        elif handler != signal.SIG_IGN:
            signal.raise_signal(signum)


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` in a process group of its own, killed whole when the run is interrupted or the command
    hangs: no command (nor a child it started) outlives the run, also when the signal came while it
    started."""
    pending: list[int] = []
    previous = _deferring(pending)
    try:
        process = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except BaseException:
        _replay(previous, pending)
        raise
    with process:
        try:
            _replay(previous, pending)
            out, err = process.communicate(timeout=COMMAND_TIMEOUT_S)
        except BaseException:  # a timeout, or SIGTERM / Ctrl-C (KeyboardInterrupt) while it runs or started
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def node_name(way: str, host: str, env: Mapping[str, str] = os.environ, run: Runner = _run) -> tuple[str | None, str]:
    """The name ``way``'s scheduler knows this node by, and where it came from; (None, why) where this run
    cannot tell it: no command may then run, and ``why`` names what was needed. Without a scheduler
    (``off``) only Slurm's own variable is taken: no other system sets it."""
    if env.get(SLURM_NAME) and way in ("slurm", "off"):
        return env[SLURM_NAME], SLURM_NAME
    if way == "kubernetes":
        if env.get(KUBERNETES_NAME):
            return env[KUBERNETES_NAME], KUBERNETES_NAME
        return None, (
            f"kubernetes: not applied: this run cannot name its node for Kubernetes: {KUBERNETES_NAME} is not "
            "set (the pod's spec.nodeName through the downward API, as deploy/k8s sets it); no command run"
        )
    if way != "slurm":
        return None, "no scheduler: the host name stands for the node"
    argv = ["scontrol", "show", "aliases", host]
    try:
        done = run(argv)
    except (OSError, subprocess.TimeoutExpired) as exc:
        answer = f"could not run: {exc}"
    else:
        names = done.stdout.split() if done.returncode == 0 else []
        if len(names) == 1 and name_problem(names[0]) is None:
            return names[0], f"`{' '.join(argv)}`"
        said = _last_line(done.stderr) or _last_line(done.stdout)
        answer = (f"answered {said!r}" if said else "answered nothing") + (
            f" (exit {done.returncode})" if done.returncode else ""
        )
    return None, (
        f"slurm: not applied: this run cannot name its node for Slurm: {SLURM_NAME} is not set (slurmd sets it "
        f"for job steps, prologs and epilogs) and `{' '.join(argv)}` {answer}; no command run"
    )


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


def _nothing() -> None:
    pass


def interrupted_by(exc: KeyboardInterrupt) -> str:
    """The signal behind a KeyboardInterrupt: SIGTERM where the session's handler raised it, else SIGINT."""
    return next((str(a).removeprefix("signal ") for a in exc.args if str(a).startswith("signal ")), "SIGINT")


def apply(drain: DrainList, way: str, run: Runner = _run, record: Callable[[], None] = _nothing) -> list[str]:
    """Run the commands of ``way`` for every node to drain; one line per command in ``drain["applied"]``:
    what ran and how it ended, and each command in ``drain["commands"]`` (argv, status, exit status, the
    last line it wrote), ``record`` called before each command runs and after it ends (the session writes
    drain.json each time). A command that cannot run (not installed, no permission, a timeout) is a line
    too, never an exception; so is a node name that is not one host name, for which nothing runs. A signal
    while a command runs (KeyboardInterrupt) kills it, is recorded (``interrupted``) and raised again.
    Returns the lines it added."""
    lines = drain["applied"]
    first = len(lines)
    for node in to_drain(drain):
        problem = name_problem(node["scheduler_name"])
        if problem is not None:
            lines.append(f"{way}: refused: {problem}")
            record()
            continue
        for argv in COMMANDS[way](node):
            shown = " ".join(argv)
            command: Command = {"argv": argv, "status": "running", "exit": None, "stderr": ""}
            drain["commands"].append(command)
            record()
            try:
                done = run(argv)
            except (OSError, subprocess.TimeoutExpired) as exc:
                command["status"], command["stderr"] = "could not run", _last_line(str(exc))
                lines.append(f"{shown}: could not run: {exc}")
                record()
                continue
            except KeyboardInterrupt as exc:
                drain["interrupted"] = interrupted_by(exc)
                command["status"] = "interrupted"
                lines.append(f"{shown}: interrupted by {drain['interrupted']}: stopped, its effect unknown; "
                             "no further command run")  # fmt: skip
                raise
            said = _last_line(done.stderr) or _last_line(done.stdout)
            command["status"], command["exit"], command["stderr"] = "done", done.returncode, said
            end = "ok" if done.returncode == 0 else f"exit {done.returncode}"
            lines.append(f"{shown}: {end}" + (f": {said}" if said else ""))
            record()
    return lines[first:]
