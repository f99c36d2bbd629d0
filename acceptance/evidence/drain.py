"""The drain list: which nodes (and GPUs) a run that did not PASS found bad, each with a severity and a reason.

Every run whose verdict is not PASS writes ``drain.json`` beside its ``evidence.json``, once, atomically. A
scheduler hook acts on it (``--cluster-drain``, ``acceptance.run.drain``): Slurm drains a node with the
reason, Kubernetes taints and labels it. The list is built from the evidence alone, so ``cluster-acceptance``
commands and a person's script read the same judgement:

- severity ``drain``: the node itself is at fault: its preflight failed (a GPU missing, a foreign process on
  a GPU), a failing figure names it, or the run was this node's alone (a job prolog's quick tier) and a gate
  failed;
- severity ``review``: a gate failed across several nodes and no node is named in it (every node of the run
  is listed for a person to look at), or another node's verdict was FAIL (node 0 of several: that node's
  own list says why); none of these is drained.

The shape (``DrainList``) is documented in docs/evidence.md; ``schema`` says its version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from acceptance.atomic_file import write_atomic
from acceptance.evidence.store import dumps, now
from acceptance.evidence.verdict import FAILED_CHECKS, FAILED_OUTCOMES

DRAIN_SCHEMA = "cluster-acceptance/drain/1"
FILE_NAME = "drain.json"
PREFLIGHT = "preflight: "  # the session's prefix of a failed preflight's line (plugin.preflight_hooks.PREFIX)
REASON_CHARS = 200  # one line a scheduler keeps as the node's reason; the evidence has the rest
Severity = Literal["drain", "review"]
_GPU = re.compile(r"\bGPU (\d+)\b")
_OTHER_PREFLIGHT = re.compile(rf"^{PREFLIGHT}node \d+ \((?P<host>[^)]+)\) failed its preflight")


class DrainNode(TypedDict):
    node: str  # the host name, as the evidence names it
    scheduler_name: str  # the name the scheduler knows it by (SLURMD_NODENAME, the Kubernetes node): else node
    gpus: list[str]  # the GPU indices the reasons name; empty: the node as a whole
    severity: Severity
    reason: str  # one line


class DrainList(TypedDict):
    schema: str
    written: str
    verdict: str
    evidence: str  # the evidence file the list was built from
    tier: str | None
    nodes: list[DrainNode]
    applied: list[str]  # what --cluster-drain did, one line per command; empty when off


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def _reasons(data: Mapping[str, Any]) -> list[str]:
    """Why the run failed, one line each, in the order a person should read them: preflight first."""
    errors = [str(e).splitlines()[0] for e in data.get("errors") or [] if str(e).strip()]
    reasons = [e for e in errors if e.startswith(PREFLIGHT)]
    for test in data.get("tests") or []:
        for check in test.get("checks") or []:
            if check.get("verdict") in FAILED_CHECKS:
                detail = f" ({check['detail']})" if check.get("detail") else ""
                value = check.get("value")
                shown = f"{value:.4g}" if isinstance(value, float) else str(value)
                reasons.append(f"{check.get('metric')} = {shown}, bound {check.get('bound')}{detail}")
        failed = test.get("outcome") in FAILED_OUTCOMES
        if failed and not any(c.get("verdict") in FAILED_CHECKS for c in test.get("checks") or []):
            name = str(test.get("nodeid", "")).rpartition("::")[2]
            first = (str(test.get("message") or "").strip().splitlines() or [str(test.get("outcome"))])[0]
            reasons.append(f"{name}: {first}")  # its first line: a probe's message goes on with its log's tail
    return reasons + [e for e in errors if not e.startswith(PREFLIGHT)]


def _culprits(reason: str, hosts: Sequence[str], host: str, single: bool) -> list[str]:
    """The nodes a reason names; this node for its own preflight line or a run of this node alone."""
    other = _OTHER_PREFLIGHT.match(reason)
    if other:
        return [other.group("host")]  # another node's preflight, as the plan brought it (multinode.plan)
    named = [h for h in hosts if re.search(rf"\b{re.escape(h)}\b", reason)]
    if named:
        return named
    return [host] if reason.startswith(PREFLIGHT) or single else []


def build(data: Mapping[str, Any], evidence: Path, scheduler_names: Mapping[str, str] | None = None) -> DrainList:
    """The drain list of one evidence document (a node's, or node 0's with the other nodes' verdicts)."""
    names = dict(scheduler_names or {})
    host = str(data["topology"]["host"])
    hosts = [str(n.get("host")) for n in (data.get("cluster") or {}).get("nodes") or []] or [host]
    single = int(data["topology"].get("nodes", 1)) == 1
    resolved = (data.get("profile") or {}).get("resolved") or {}
    on_gpus = (resolved.get("topology") or {}).get("device", "cuda") == "cuda"  # a CPU run's "GPU 1" is a rank
    nodes: dict[str, DrainNode] = {}

    def add(node: str, severity: Severity, reason: str) -> None:
        if node in nodes:
            if severity == "drain":
                nodes[node]["severity"] = "drain"
            return
        gpus = sorted(set(_GPU.findall(reason)), key=int) if on_gpus else []
        nodes[node] = {
            "node": node,
            "scheduler_name": names.get(node, node),
            "gpus": gpus,
            "severity": severity,
            "reason": one_line(reason),
        }

    reasons = _reasons(data) if data.get("verdict") == "FAIL" else []
    for reason in reasons:
        for node in _culprits(reason, hosts, host, single):
            add(node, "drain", reason)
    # every node judges the same figures, so a cluster-wide failure is every node's FAIL: another node's
    # verdict alone drains nothing; its own drain list (beside its evidence) names what is its own
    for other in (data.get("cluster") or {}).get("node_verdicts") or []:
        if other.get("verdict") == "FAIL" and other.get("host") != host:
            add(
                str(other.get("host")), "review", f"node verdict FAIL: its drain list is beside {other.get('evidence')}"
            )
    if reasons and not nodes:
        for node in hosts:
            add(node, "review", f"no node named: {reasons[0]}")
    return {
        "schema": DRAIN_SCHEMA,
        "written": now(),
        "verdict": str(data.get("verdict")),
        "evidence": str(evidence),
        "tier": (data.get("tier") or {}).get("name"),
        "nodes": list(nodes.values()),
        "applied": [],
    }


def to_drain(drain: DrainList) -> Sequence[DrainNode]:
    """The entries a scheduler should act on: severity drain."""
    return [n for n in drain["nodes"] if n["severity"] == "drain"]


def write(folder: Path, drain: DrainList) -> Path:
    """``drain.json`` in the evidence folder, atomically; an earlier one is never overwritten."""
    path = folder / FILE_NAME
    if path.exists():
        raise FileExistsError(f"{path}: a drain list is already there; each run writes its own folder")
    write_atomic(path, dumps(drain))
    return path
