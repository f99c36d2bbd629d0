"""The session-long store the nodes of one run share (node 0 hosts it): plans, barriers, verdicts.

Pure data in, data out: the meeting never reaches into a ClusterRun; the plugin applies what it returns.
"""

from __future__ import annotations

import datetime
import json
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from acceptance.json_types import JSONObject
from acceptance.multinode.plan import Plan, disagreement

STORE_PORT_OFFSET = 1
POLL_S = 0.2


class Placement(Protocol):
    """Where this node stands, as the meeting needs it (``acceptance.run.placement.Placement`` fits)."""

    @property
    def nodes(self) -> int: ...
    @property
    def node_rank(self) -> int: ...
    @property
    def head(self) -> str: ...
    @property
    def port(self) -> int: ...


class PlanError(Exception):
    """The nodes disagree on the plan, or a node did not arrive; the message names which and why."""


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
        self.gather(topic, "1", timeout_s)

    def gather(self, topic: str, value: str, timeout_s: float) -> list[str]:
        """A barrier that also tells every node what each one published, in node rank order."""
        self.publish(topic, value)
        self.wait(topic, timeout_s)
        return self.read(topic)

    def agree(self, plan: Plan) -> tuple[str, list[Plan]]:
        """Compare plans; return the session id node 0 chose (the probes' rendezvous ids start with it) and
        every node's plan."""
        if self.rank == 0:
            self.store.set("session", uuid.uuid4().hex[:12])
        self.publish("plan", plan.to_json())
        self.wait("plan")
        plans = [Plan.from_json(text) for text in self.read("plan")]
        problem = disagreement(plans)
        session = self.store.get("session").decode()
        # node 0 keeps the store up until every node has read the plans, so all fail with the same message
        self.publish("plan-read")
        if self.rank == 0:
            self.wait("plan-read")
        if problem:
            raise PlanError(problem)
        return session, plans


@dataclass(frozen=True)
class Agreement:
    """What the nodes agreed on: the meeting to keep for the probes, and its record for the evidence."""

    meeting: Meeting
    session: str
    record: JSONObject
    plans: list[Plan]


def meet(placement: Placement, timeout_s: float, plan: Plan) -> Agreement:
    """Agree with the other nodes on ``plan``; raise PlanError naming the node that differs or is missing."""
    try:
        meeting = Meeting(placement, timeout_s)
    except RuntimeError as exc:  # the store's own errors (DistNetworkError, DistStoreError)
        where = f"{placement.head}:{placement.port + STORE_PORT_OFFSET}"
        raise PlanError(f"cannot reach the nodes' store at {where}: {exc}") from None
    try:
        session, plans = meeting.agree(plan)
    except RuntimeError as exc:
        raise PlanError(f"lost the nodes' store at {meeting.where} while comparing plans: {exc}") from None
    record: JSONObject = {"digest": plan.digest, "session": session, "store": meeting.where, "tests": len(plan.tests)}
    return Agreement(meeting, session, record, plans)


@dataclass(frozen=True)
class NodeVerdicts:
    """Node 0's view of every node's verdict at the end; other nodes get an empty one."""

    nodes: list[JSONObject]  # as each node sent it (json): another node may run another version
    problems: list[str]


def exchange_verdicts(meeting: Meeting, mine: JSONObject) -> NodeVerdicts:
    """Every node tells node 0 its verdict; node 0 waits for all and returns them with what is wrong."""
    try:
        meeting.publish("verdict", json.dumps(mine))
        if meeting.rank != 0:
            return NodeVerdicts([], [])
        meeting.wait("verdict")
        problems: list[str] = []
    except PlanError as exc:
        problems = [str(exc)]
    except RuntimeError as exc:  # the store itself is gone: node 0 ended first
        return NodeVerdicts([], [f"could not report this node's verdict to node 0: {exc}"])
    if meeting.rank != 0:
        return NodeVerdicts([], problems)
    present = [r for r in range(meeting.nodes) if meeting.store.check([f"verdict/{r}"])]
    nodes = [json.loads(meeting.store.get(f"verdict/{r}")) for r in present]
    # PARTIAL and INCOMPLETE nodes reach node 0's verdict through the verdict rule; a failure is named here
    failing = [f"node {n['node_rank']} ({n['host']}) FAIL" for n in nodes if n["verdict"] == "FAIL"]
    missing = sorted(set(range(meeting.nodes)) - set(present))
    if missing:
        failing.append(f"node rank(s) {missing} reported no verdict")
    if failing:
        problems.append("not every node passed: " + "; ".join(failing))
    return NodeVerdicts(nodes, problems)
