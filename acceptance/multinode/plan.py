"""The nodes of a multi-node run meet before any probe and agree on what they are about to do.

Each node runs its own pytest. If one node had another profile, another selection of tests or another
version of the package, the probes' rendezvous would pair up runs that measure different things, or
hang. So after collection node 0 hosts a ``torch.distributed.TCPStore`` at HEAD:PORT+1 (PORT being
the probes' rendezvous port) for the whole session; every node publishes its plan there, and every
node compares every plan with node 0's, so all nodes fail together with the same message naming the
node that differs and how. The same store then serves as a barrier before each probe (a node that
never arrives is named instead of ending in a bare rendezvous timeout) and carries each node's
verdict to node 0 at the end, so node 0's evidence speaks for the whole cluster.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import acceptance
from acceptance.run.placement import Placement

if TYPE_CHECKING:
    from acceptance.run.cluster_run import ClusterRun

STORE_PORT_OFFSET = 1
POLL_S = 0.2
SHOWN = 5  # differing tests or keys listed in a message; the rest are counted


class PlanError(Exception):
    """The nodes disagree on the plan, or a node did not arrive; the message names which and why."""


@dataclass(frozen=True)
class Plan:
    node_rank: int
    host: str
    nodes: int
    head: str
    profile_sha256: str
    profile: dict[str, Any]
    tests: list[str]
    versions: dict[str, str]

    @property
    def digest(self) -> str:
        keyed = [self.nodes, self.head, self.profile_sha256, self.tests, sorted(self.versions.items())]
        return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        return cls(**json.loads(text))


def versions() -> dict[str, str]:
    import torch

    return {"cluster-acceptance": acceptance.__version__, "torch": str(torch.__version__)}


def differences(reference: Plan, other: Plan) -> list[str]:
    """What ``other`` does differently from ``reference`` (node 0), in words."""
    found = []
    if other.nodes != reference.nodes:
        found.append(f"expects {other.nodes} nodes, node 0 expects {reference.nodes}")
    if other.head != reference.head:
        found.append(f"meets at {other.head}, node 0 at {reference.head}")
    if other.profile_sha256 != reference.profile_sha256:
        keys = _changed_keys(_flat(reference.profile), _flat(other.profile))
        found.append(f"profile sha256 {other.profile_sha256[:12]} vs {reference.profile_sha256[:12]} ({keys})")
    if other.tests != reference.tests:
        found.append(_test_difference(reference.tests, other.tests))
    for name in sorted(set(reference.versions) | set(other.versions)):
        mine, theirs = other.versions.get(name), reference.versions.get(name)
        if mine != theirs:
            found.append(f"{name} {mine}, node 0 has {theirs}")
    return found


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict) or not data:  # an empty section is a value of its own
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _changed_keys(reference: dict[str, Any], other: dict[str, Any]) -> str:
    changed = [
        f"{k}: {other.get(k, '(absent)')!r} vs {reference.get(k, '(absent)')!r}"
        for k in sorted(set(reference) | set(other))
        if reference.get(k) != other.get(k)
    ]
    more = f"; and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
    return "; ".join(changed[:SHOWN]) + more if changed else "same keys, other source file"


def _test_difference(reference: list[str], other: list[str]) -> str:
    extra = [t for t in other if t not in set(reference)]
    missing = [t for t in reference if t not in set(other)]
    parts = []
    for label, tests in (("selects", extra), ("lacks", missing)):
        if tests:
            more = f" and {len(tests) - SHOWN} more" if len(tests) > SHOWN else ""
            parts.append(
                f"{label} {len(tests)} test(s) node 0 {'does not' if label == 'selects' else 'has'}: "
                f"{', '.join(tests[:SHOWN])}{more}"
            )
    return "; ".join(parts) or "selects the same tests in another order"


def disagreement(plans: list[Plan]) -> str | None:
    """One message naming every node whose plan differs from node 0's, or None when all agree."""
    reference = plans[0]
    lines = [
        f"node {p.node_rank} ({p.host}): " + "; ".join(diff) for p in plans[1:] if (diff := differences(reference, p))
    ]
    if not lines:
        return None
    return (
        f"the nodes disagree on the plan (node 0 is {reference.host}, plan {reference.digest[:12]}); "
        "every node stops here:\n  " + "\n  ".join(lines)
    )


class Meeting:
    """The session-long store the nodes share; node 0 hosts it."""

    def __init__(self, placement: Placement, timeout_s: float) -> None:
        self.placement, self.timeout_s = placement, timeout_s
        self.rank, self.nodes = placement.node_rank, placement.nodes
        self.port = placement.port + STORE_PORT_OFFSET
        self.broken: str | None = None
        self.store = self._open()

    @property
    def where(self) -> str:
        return f"{self.placement.head}:{self.port}"

    def _open(self) -> Any:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]  # bound from C++, not re-exported

        timeout = datetime.timedelta(seconds=self.timeout_s)
        if self.rank == 0:
            try:
                return TCPStore(self.placement.head, self.port, None, True, timeout, wait_for_workers=False)
            except RuntimeError as exc:
                raise PlanError(f"node 0 cannot host the nodes' store at port {self.port}: {exc}") from None
        self._wait_for_head()
        return TCPStore(self.placement.head, self.port, None, False, timeout)

    def _wait_for_head(self) -> None:
        # A plain socket first: the store's own client retries with long back-offs and logs every attempt.
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                socket.create_connection((self.placement.head, self.port), timeout=2).close()
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise PlanError(
                        f"node 0 (the head, {self.where}) did not arrive within {self.timeout_s:g} s "
                        f"(rendezvous timeout; last error: {exc}); missing node ranks: [0]"
                    ) from None
                time.sleep(POLL_S * 5)

    def publish(self, topic: str, value: str = "1") -> None:
        self.store.set(f"{topic}/{self.rank}", value)

    def read(self, topic: str) -> list[str]:
        return [self.store.get(f"{topic}/{r}").decode() for r in range(self.nodes)]

    def wait(self, topic: str, timeout_s: float | None = None) -> list[int]:
        """Block until every node published ``topic``; raise naming the node ranks that did not."""
        if self.broken:
            raise PlanError(self.broken)
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline, missing = time.monotonic() + limit, list(range(self.nodes))
        while True:
            try:
                missing = [r for r in missing if not self.store.check([f"{topic}/{r}"])]
            except RuntimeError as exc:
                self.broken = f"lost the nodes' store at {self.where} during {topic!r} (did node 0 stop?): {exc}"
                raise PlanError(self.broken) from None
            if not missing:
                return list(range(self.nodes))
            if time.monotonic() >= deadline:
                self.broken = (
                    f"node rank(s) {missing} did not arrive at {topic!r} within {limit:g} s "
                    f"(store {self.where}); missing node ranks: {missing}"
                )
                raise PlanError(self.broken)
            time.sleep(POLL_S)

    def barrier(self, topic: str, timeout_s: float) -> None:
        self.publish(topic)
        self.wait(topic, timeout_s)

    def agree(self, plan: Plan) -> str:
        """Compare plans; return the session id node 0 chose (the probes' rendezvous ids start with it)."""
        if self.rank == 0:
            self.store.set("session", uuid.uuid4().hex[:12])
        self.publish("plan", plan.to_json())
        self.wait("plan")
        problem = disagreement([Plan.from_json(text) for text in self.read("plan")])
        session = self.store.get("session").decode()
        # node 0 keeps the store up until every node has read the plans, so all fail with the same message
        self.publish("plan-read")
        if self.rank == 0:
            self.wait("plan-read")
        if problem:
            raise PlanError(problem)
        return session


def meet(run: ClusterRun, test_ids: list[str]) -> None:
    """Agree with the other nodes on the plan; on success the run keeps the meeting for its probes."""
    placement, model = run.placement, run.profile.model
    try:
        meeting = Meeting(placement, model.timeouts.rendezvous)
    except RuntimeError as exc:  # the store's own errors (DistNetworkError, DistStoreError)
        raise PlanError(f"cannot reach the nodes' store at {placement.head}:{placement.port + 1}: {exc}") from None
    plan = Plan(
        node_rank=placement.node_rank,
        host=socket.gethostname(),
        nodes=placement.nodes,
        head=placement.endpoint,
        profile_sha256=run.profile.sha256,
        profile=run.profile.resolved,
        tests=test_ids,
        versions=versions(),
    )
    try:
        session = meeting.agree(plan)
    except RuntimeError as exc:
        raise PlanError(f"lost the nodes' store at {meeting.where} while comparing plans: {exc}") from None
    run.meeting = meeting
    run.run_tag = run.run_tag or session
    run.evidence.data["cluster"]["plan"] = {
        "digest": plan.digest,
        "session": session,
        "store": meeting.where,
        "tests": len(test_ids),
    }
    run.evidence.write()


def share_verdict(run: ClusterRun) -> None:
    """Every node tells node 0 its verdict; node 0's evidence lists every node and fails for any of them."""
    meeting, data = run.meeting, run.evidence.data
    if meeting is None:
        return
    mine = {
        "node_rank": meeting.rank,
        "host": data["topology"]["host"],
        "verdict": data["verdict"],
        "complete": data["complete"],
        "evidence": str(run.evidence.path.resolve()),
    }
    try:
        meeting.publish("verdict", json.dumps(mine))
        if meeting.rank != 0:
            return
        meeting.wait("verdict")
    except PlanError as exc:
        data["errors"].append(str(exc))
    except RuntimeError as exc:  # the store itself is gone: node 0 ended first
        data["errors"].append(f"could not report this node's verdict to node 0: {exc}")
        return
    if meeting.rank != 0:
        return
    present = [r for r in range(meeting.nodes) if meeting.store.check([f"verdict/{r}"])]
    nodes = [json.loads(meeting.store.get(f"verdict/{r}")) for r in present]
    data["cluster"]["node_verdicts"] = nodes
    failing = [f"node {n['node_rank']} ({n['host']}) {n['verdict']}" for n in nodes if n["verdict"] != "PASS"]
    missing = sorted(set(range(meeting.nodes)) - set(present))
    if missing:
        failing.append(f"node rank(s) {missing} reported no verdict")
    if failing:
        data["errors"].append("not every node passed: " + "; ".join(failing))
        data["verdict"] = "FAIL"
