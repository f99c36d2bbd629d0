"""What a node is about to do, as data, and how two nodes' plans differ, in words.

The nodes of a multi-node run meet before any probe and agree on what they are about to do.

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

import hashlib
import json
from dataclasses import asdict, dataclass, fields

import acceptance
from acceptance.json_types import JSONObject, JSONValue

SHOWN = 5  # differing tests or keys listed in a message; the rest are counted


@dataclass(frozen=True)
class Plan:
    node_rank: int
    host: str
    nodes: int
    head: str
    profile_sha256: str
    profile: JSONObject
    tests: list[str]
    versions: dict[str, str]
    preflight: str = ""  # why this node failed its preflight; "" when it passed (not part of the digest)
    # whose fault that is (acceptance.evidence.causes: hardware, configuration, software); "" from a package
    # that did not send it: the node's hardware, as before (not part of the digest)
    preflight_category: str = ""
    # the name torchrun's rendezvous gives this node (socket.getfqdn(), read back from the host name's address);
    # "" from a package that did not send it (not part of the digest)
    rendezvous_name: str = ""

    @property
    def digest(self) -> str:
        keyed = [self.nodes, self.head, self.profile_sha256, self.tests, sorted(self.versions.items())]
        return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        """A plan as another node wrote it: a field this version does not know (a newer package) is left out,
        so the nodes get as far as comparing versions and name the difference."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})


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


def _flat(data: JSONValue, prefix: str = "") -> JSONObject:
    if not isinstance(data, dict) or not data:  # an empty section is a value of its own
        return {prefix: data}
    out: JSONObject = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _changed_keys(reference: JSONObject, other: JSONObject) -> str:
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


def failed_preflights(plans: list[Plan], mine: int) -> list[str]:
    """One line for each other node that failed its preflight: without it no probe can start anywhere, and
    a node that went on would wait at the next probe until its timeout."""
    return list(failed_preflight_categories(plans, mine))


def failed_preflight_categories(plans: list[Plan], mine: int) -> dict[str, str]:
    """``failed_preflights``' lines, each with whose fault it is (the category that node sent)."""
    return {f"node {p.node_rank} ({p.host}) failed its preflight: {p.preflight}": p.preflight_category or "hardware"
            for p in plans if p.preflight and p.node_rank != mine}  # fmt: skip


def shared_host_names(plans: list[Plan]) -> str:
    """A line when several nodes go by one name in torchrun's rendezvous, else "". Its c10d rendezvous tells its
    agents apart by ``socket.getfqdn()`` and process id (``_NodeDescGenerator`` in
    torch.distributed.elastic.rendezvous.dynamic_rendezvous): two nodes in containers of one host, each with a
    process-id namespace of its own, can give their agents the same pid, and that rendezvous then never
    completes. The name is read back from the host name's address, so two host names on one address are one
    name here. Nodes sharing one machine's process table (several Slurm daemons on one host) cannot collide,
    hence a line and not a failure."""
    by_host: dict[str, list[int]] = {}
    for plan in plans:
        by_host.setdefault(plan.rendezvous_name or plan.host, []).append(plan.node_rank)
    shared = [f"nodes {', '.join(map(str, r))} are all {host!r}" for host, r in by_host.items() if len(r) > 1]
    if not shared:
        return ""
    return (
        f"one name for several nodes in torchrun's rendezvous ({'; '.join(shared)}): it tells nodes apart by that "
        "name (the host name, read back from its address) and process id, so nodes in containers of one host "
        "need a host name each, on an address of its own (--hostname, --add-host), or a probe's rendezvous can "
        "wait until its timeout; evidence folders and drain lists name nodes by host"
    )
