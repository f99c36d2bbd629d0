"""The drain list: which nodes (and GPUs) a run that did not PASS found bad, each with a severity and a reason.

Every run whose verdict is not PASS writes ``drain.json`` beside its ``evidence.json``, atomically, before
any scheduler command runs and again as each runs and ends (``update``; another run's list is never
overwritten). A scheduler hook acts on it (``--cluster-drain``, ``acceptance.run.drain``): Slurm drains a node with the
reason, Kubernetes taints and labels it. The list is built from the evidence alone, so ``cluster-acceptance``
commands and a person's script read the same judgement:

- severity ``drain``: the node itself is blamed: its preflight failed (a GPU missing, a foreign process on
  a GPU), a failing figure of its own hardware names it (a GPU's, a port's: ``local`` in the evidence, from
  the family registry's ``Metric.local``), an
  isolation named it culprit (its structured evidence, never its words), or the run was this node's alone
  (a job prolog's quick tier) and a gate failed;
- severity ``review``: a host a failing figure across nodes merely mentions (a slow path's two ends, the
  pair of a two-node run, an isolation's unresolved suspects, a collective's slowest link), every node of
  the run when a gate failed across several nodes and names none, or, on node 0 of several, another node
  whose verdict was FAIL (that node's own list says why); none of these is drained.

The shape (``DrainList``) is documented in docs/evidence.md; ``schema`` says its version.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from typing_extensions import TypedDict

from acceptance.atomic_file import write_atomic
from acceptance.evidence.causes import Action, action, category_of, cause_first, node_fault
from acceptance.evidence.model import Case, Check, EvidenceDoc
from acceptance.evidence.store import dumps, now
from acceptance.evidence.verdict import verdict_of
from acceptance.json_types import JSONObject, JSONValue
from acceptance.verdicts import ACROSS_NODES, FAILED_OUTCOMES, Category
from acceptance.verdicts import FAILED_FIGURES as FAILED_CHECKS

DRAIN_SCHEMA = "cluster-acceptance/drain/1"
FILE_NAME = "drain.json"
PREFLIGHT = "preflight: "  # the session's prefix of a failed preflight's line (plugin.preflight_hooks.PREFIX)
REASON_CHARS = 200  # one line a scheduler keeps as the node's reason; the evidence has the rest
Severity = Literal["drain", "review"]
_GPU = re.compile(r"\bGPU (\d+)\b")
_OTHER_PREFLIGHT = re.compile(rf"^{PREFLIGHT}node \d+ \((?P<host>[^)]+)\) failed its preflight")


class DrainReason(TypedDict):
    text: str  # one line, shortened
    category: Category  # whose fault (acceptance.evidence.causes)
    action: Action


class DrainNode(TypedDict):
    node: str  # the host name, as the evidence names it
    scheduler_name: str  # the name the scheduler knows it by (SLURMD_NODENAME, the Kubernetes node): else node
    gpus: list[str]  # the GPU indices the reasons name (CUDA's, within the job); empty: the node as a whole
    # the same GPUs by UUID, where the run recorded the node's devices: on a node shared between jobs the job's
    # GPU 0 is another physical GPU than the node's GPU 0, and the UUID is the one name both agree on
    gpu_uuids: list[str]
    severity: Severity  # drain exactly when node_fault
    reason: str  # one line: every failure that lists the node, each shortened, its own faults first
    node_fault: bool  # a failure of its own (hardware, fabric, configuration) blames it: a scheduler drains it
    category: Category  # of its first reason: a fault of its own when node_fault
    action: Action  # what to do: drain node, drain GPU, fix the install, fix a setting, review
    reasons: list[DrainReason]  # every failure that lists it, in the order of ``reason``


class Command(TypedDict):
    """One scheduler command of --cluster-drain, as far as it got."""

    argv: list[str]
    status: Literal["running", "done", "could not run", "interrupted"]
    exit: int | None  # its exit status once done
    stderr: str  # the last line it wrote (stderr, else stdout), or why it could not run


class DrainList(TypedDict):
    schema: str
    written: str
    verdict: str
    evidence: str  # the evidence file the list was built from
    tier: str | None
    nodes: list[DrainNode]
    applied: list[str]  # what --cluster-drain did, one line per command; empty when off
    commands: list[Command]  # the same commands, each recorded before it runs and again when it ends
    interrupted: str | None  # the signal that cut the commands short (SIGTERM, SIGINT), else None


def one_line(text: str, chars: int = REASON_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= chars else line[: chars - 3] + "..."


SHORTEST_CHARS = 40  # a failure shortened below this says nothing


def every_reason(texts: Sequence[str]) -> str:
    """One line naming every failure, each shortened to its share of ``REASON_CHARS`` (a scheduler's reason
    holds one line; the drain list holds each in full): ``2 failures: a...; b``."""
    if len(texts) <= 1:
        return one_line(texts[0] if texts else "")
    head = f"{len(texts)} failures: "
    share = max(SHORTEST_CHARS, (REASON_CHARS - len(head)) // len(texts) - 2)
    return one_line(head + "; ".join(one_line(t, share) for t in texts))


@dataclass(frozen=True)
class Reason:
    """Why the run failed, one reason: its text and what blames a node for it."""

    text: str
    local: bool  # the node's own failure: its preflight, or a figure of its own hardware
    culprits: tuple[str, ...] = ()  # the hosts an isolation of the reason's test named culprit
    category: Category = "hardware"  # whose fault: only the node's own (hardware, fabric, configuration) drain


def _local(test: Case, check: Check | None = None) -> bool:
    """Whether ``check``, else its test, is of a node's own hardware, as the run recorded it (the registry's
    ``Metric.local`` and ``Family.local``); not recorded: not local (review, never drain)."""
    return bool(check.local if check is not None else test.local)


def _category(test: Case, local: bool) -> Category:
    """The category the run recorded for the test (another job's process named as the cause: foreign load; a
    setting that forced a transport or a time limit the operator gave: environment), else the guess by its
    figures: a node's own hardware, else the fabric across nodes."""
    return category_of(test.category, "hardware" if local else ACROSS_NODES)


def cause_of(test: Case) -> tuple[Category, Action]:
    """A failed test's category and action, as the drain list takes them (``_category`` of its first failed
    figure, else of the test); the action drains a GPU where the test's lines name GPUs."""
    failed = next((c for c in test.checks if c.verdict in FAILED_CHECKS), None)
    category = _category(test, _local(test, failed))
    return category, action(category, gpus=bool(_GPU.search(test.message or "")))


def _object(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _rank(value: JSONValue) -> int | None:
    """A node rank as JSON holds it: a number, or a key's text."""
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    return None


def _isolated(test: Case, by_rank: Mapping[int, str]) -> tuple[str, ...]:
    """The hosts of the culprits an isolation of this test named (``IsolationEvidence``: ``culprits`` are
    node ranks, ``hosts`` their hosts; an isolation recorded without it: the cluster's node ranks)."""
    found = test.measurements.get("isolation")
    if not isinstance(found, dict):
        return ()
    named = {_rank(n): str(h) for n, h in _object(found.get("hosts")).items()}
    hosts = {**by_rank, **{n: h for n, h in named.items() if n is not None}}
    culprits = found.get("culprits")
    return tuple(hosts[n] for n in map(_rank, culprits if isinstance(culprits, list) else []) if n in hosts)


def preflight_causes(doc: EvidenceDoc) -> dict[str, Category]:
    """Each failed preflight line of the run (``preflight: ...``, its first line) with whose fault it is, as the
    session recorded it (a CPU-only torch: software); a line recorded without one is the node's hardware."""
    recorded = _object(_object(doc.cluster.preflight).get("categories"))
    return {line.splitlines()[0]: category_of(raw, "hardware") for line, raw in recorded.items() if line.strip()}


def _shown(check: Check) -> str:
    """A failed figure in one line (a value that is not a number reads None, as in the evidence file)."""
    value = check.value
    shown = f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else str(_finite(value))
    detail = f" ({check.detail})" if check.detail else ""
    return f"{check.metric} = {shown}, bound {check.bound}{detail}"


def _finite(value: float | None) -> float | None:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _reasons(doc: EvidenceDoc) -> list[Reason]:
    """Why the run failed, one reason each, in the order a person should read them: preflight first."""
    errors = [e.splitlines()[0] for e in doc.errors if e.strip()]
    by_rank = {n.node_rank: n.host for n in doc.cluster.nodes if n.node_rank is not None}
    preflight = preflight_causes(doc)
    reasons = [Reason(e, True, (), preflight.get(e, "hardware")) for e in errors if e.startswith(PREFLIGHT)]
    for test in doc.tests:
        culprits = _isolated(test, by_rank)
        for check in test.checks:
            if check.verdict in FAILED_CHECKS:
                local = _local(test, check)
                category = _category(test, local)
                reasons.append(Reason(cause_first(_shown(check), category), local, culprits, category))
        failed = test.outcome in FAILED_OUTCOMES
        if failed and not any(c.verdict in FAILED_CHECKS for c in test.checks):
            name = test.nodeid.rpartition("::")[2]
            first = ((test.message or "").strip().splitlines() or [test.outcome])[0]
            # its first line: a probe's message goes on with its log's tail
            if first in preflight or first in errors:
                continue  # the preflight's gate, failed with its line: that line is a reason already
            local = _local(test)
            category = _category(test, local)
            reasons.append(Reason(cause_first(f"{name}: {first}", category), local, culprits, category))
    # the run's own errors (its profile's unchecked thresholds, its evidence folder, the nodes' meeting)
    # name no fault of a node
    return reasons + [Reason(e, False, (), "suite") for e in errors if not e.startswith(PREFLIGHT)]


def names(host: str, text: str) -> bool:
    """Whether ``text`` names ``host`` as a whole name: gpu-1 is not in gpu-1-b, nor in gpu-1.rack2."""
    return re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])", text) is not None


def _blame(reason: Reason, hosts: Sequence[str], host: str, single: bool) -> tuple[list[str], list[str]]:
    """The nodes a reason blames (drain) and those it merely mentions (review). Blamed: another node's
    preflight line names it; this node's own preflight line; the hosts of a local figure that names them;
    an isolation's culprits; this node in a run of its own. A failure that is no fault of a node (the
    suite's install, its settings, the run itself) blames none: the node it concerns is for review."""
    other = _OTHER_PREFLIGHT.match(reason.text)
    concerned = [other.group("host")] if other else [host] if reason.text.startswith(PREFLIGHT) else []
    named = [h for h in hosts if names(h, reason.text)]
    if not node_fault(reason.category):
        return [], list(dict.fromkeys(concerned + named + ([host] if single else [])))
    if concerned:
        return concerned, []  # a preflight line: another node's, as the plan brought it (multinode.plan)
    blamed = list(reason.culprits)
    if reason.local:
        blamed += named
    if single and not blamed:
        blamed = [host]
    return list(dict.fromkeys(blamed)), [h for h in named if h not in blamed]


def _gpus(reason: str, node: str, hosts: Sequence[str]) -> list[str]:
    """The GPU indices a reason names for ``node``: every ``GPU n`` when it names no other host, else those
    right after the node's name (``gpu-b GPU 3``)."""
    if any(h != node and names(h, reason) for h in hosts):
        return re.findall(rf"(?<![\w.-]){re.escape(node)} GPU (\d+)\b", reason)
    return _GPU.findall(reason)


@dataclass
class _Listed:
    node: str
    reasons: list[tuple[str, Category, bool, set[str]]] = field(default_factory=list)  # text, category, drain, gpus


@dataclass
class _Listing:
    """The drain list's nodes as the reasons add them: a node is listed once with every reason that lists it,
    drained when one blames it (its own fault), its GPUs those of every reason that blames it (none: one of
    them blames the node as a whole)."""

    hosts: Sequence[str]
    names_of: Mapping[str, str]
    on_gpus: bool  # a CPU run's "GPU 1" is a rank
    uuids: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # host -> CUDA index -> UUID
    nodes: dict[str, _Listed] = field(default_factory=dict)

    def add(self, node: str, severity: Severity, reason: str, category: Category = "suite") -> None:
        gpus = set(_gpus(reason, node, self.hosts)) if self.on_gpus else set()
        listed = self.nodes.setdefault(node, _Listed(node))
        if all(text != reason for text, *_ in listed.reasons):
            listed.reasons.append((reason, category, severity == "drain", gpus))

    def entries(self) -> list[DrainNode]:
        return [self._entry(listed) for listed in self.nodes.values()]

    def _entry(self, listed: _Listed) -> DrainNode:
        drains = [r for r in listed.reasons if r[2]]
        ordered = drains + [r for r in listed.reasons if not r[2]]  # its own faults first
        if drains:
            whole = any(not gpus for *_, gpus in drains)
            gpus = set() if whole else set().union(*(g for *_, g in drains))
        else:
            gpus = ordered[0][3]
        category = ordered[0][1]
        return {
            "node": listed.node,
            "scheduler_name": self.names_of.get(listed.node, listed.node),
            "gpus": sorted(gpus, key=int),
            "gpu_uuids": [u for g in sorted(gpus, key=int) if (u := self.uuids.get(listed.node, {}).get(g))],
            "severity": "drain" if drains else "review",
            "reason": every_reason([text for text, *_ in ordered]),
            "node_fault": bool(drains),
            "category": category,
            "action": action(category, bool(gpus)) if drains else _review(category),
            "reasons": [
                {"text": one_line(text), "category": c, "action": action(c, bool(g)) if d else _review(c)}
                for text, c, d, g in ordered
            ],
        }


def _review(category: Category) -> Action:
    """The action of a reason that lists a node without blaming it: a fault of a node that is not this one's
    (a slow path's healthy end) is for review; a fault of the suite says how to fix it."""
    return "review" if node_fault(category) else action(category)


def _uuids(doc: EvidenceDoc) -> dict[str, dict[str, str]]:
    """Per host, each CUDA index's GPU UUID, from the devices the run recorded (the connectivity probe's)."""
    found: dict[str, dict[str, str]] = {}
    for node in doc.cluster.nodes:
        for device in node.devices:
            record = _object(device)
            index, uuid = str(record.get("device", "")).removeprefix("cuda:"), record.get("uuid")
            if index.isdigit() and isinstance(uuid, str):
                found.setdefault(node.host, {})[index] = uuid
    return found


def build(doc: EvidenceDoc, evidence: Path, scheduler_names: Mapping[str, str] | None = None) -> DrainList:
    """The drain list of one evidence document (a node's, or node 0's with the other nodes' verdicts)."""
    host = doc.topology.host
    hosts = [n.host for n in doc.cluster.nodes] or [host]
    single = doc.topology.nodes == 1
    on_gpus = _object(doc.profile.resolved.get("topology")).get("device", "cuda") == "cuda"
    listing = _Listing(hosts, dict(scheduler_names or {}), on_gpus, _uuids(doc))
    verdict = verdict_of(doc)
    reasons = _reasons(doc) if verdict == "FAIL" else []
    for reason in reasons:
        blamed, mentioned = _blame(reason, hosts, host, single)
        for node in blamed:
            listing.add(node, "drain", reason.text, reason.category)
        for node in mentioned:
            # a fault of the suite concerns the node it ran on, and names it for review as it is
            said = reason.text if not node_fault(reason.category) else f"named, not blamed: {reason.text}"
            listing.add(node, "review", said, reason.category)
    # every node judges the same figures, so a cluster-wide failure is every node's FAIL: another node's
    # verdict alone drains nothing; its own drain list (beside its evidence) names what is its own
    for other in doc.cluster.node_verdicts or []:
        if other.get("verdict") == "FAIL" and other.get("host") != host:
            why = f"node verdict FAIL: its drain list is beside {other.get('evidence')}"
            listing.add(str(other.get("host")), "review", why)
    if reasons and not listing.nodes:
        for node in hosts:
            for reason in reasons:
                listing.add(node, "review", f"no node named: {reason.text}", reason.category)
    return {
        "schema": DRAIN_SCHEMA,
        "written": now(),
        "verdict": verdict,
        "evidence": str(evidence),
        "tier": doc.tier.name if doc.tier else None,
        "nodes": listing.entries(),
        "applied": [],
        "commands": [],
        "interrupted": None,
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


def update(path: Path, drain: DrainList) -> None:
    """The list this run wrote (``write``), replaced atomically with what its commands did since."""
    write_atomic(path, dumps(drain))
