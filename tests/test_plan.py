"""The plan the nodes compare: what counts as a difference, the message, and the store on loopback."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import pytest

from acceptance.multinode.meeting import Meeting, PlanError
from acceptance.multinode.plan import Plan, differences, disagreement, failed_preflights, shared_host_names
from acceptance.run.placement import Placement
from tests.harness import free_port


def plan(rank: int = 0, **changes: Any) -> Plan:
    base = Plan(
        node_rank=rank,
        host=f"node-{rank}",
        nodes=2,
        head="head:29400",
        profile_sha256="a" * 64,
        profile={"name": "p", "topology": {"nodes": 2, "ranks_per_node": 8}, "thresholds": {}},
        tests=["t.py::a", "t.py::b"],
        versions={"cluster-acceptance": "0.1.0", "torch": "2.6.0"},
    )
    return dataclasses.replace(base, **changes)


def test_same_plan_on_another_node_agrees() -> None:
    assert differences(plan(0), plan(1)) == []
    assert disagreement([plan(0), plan(1)]) is None
    assert plan(0).digest == plan(1).digest


def test_profile_difference_names_the_keys() -> None:
    other = plan(1, profile_sha256="b" * 64, profile={"name": "p", "topology": {"nodes": 2, "ranks_per_node": 4}})
    (diff,) = differences(plan(0), other)
    assert "profile sha256 bbbbbbbbbbbb vs aaaaaaaaaaaa" in diff
    assert "topology.ranks_per_node: 4 vs 8" in diff
    assert "thresholds: '(absent)' vs {}" in diff


def test_test_selection_difference_lists_tests_both_ways() -> None:
    (diff,) = differences(plan(0), plan(1, tests=["t.py::a", "t.py::c"]))
    assert "selects 1 test(s) node 0 does not: t.py::c" in diff
    assert "lacks 1 test(s) node 0 has: t.py::b" in diff


def test_long_test_lists_are_cut() -> None:
    (diff,) = differences(plan(0), plan(1, tests=[f"x::{i}" for i in range(9)]))
    assert "and 4 more" in diff


def test_order_alone_is_a_difference() -> None:
    assert differences(plan(0), plan(1, tests=["t.py::b", "t.py::a"])) == ["selects the same tests in another order"]


def test_versions_node_count_and_head_are_compared() -> None:
    other = plan(1, nodes=3, head="elsewhere:1", versions={"cluster-acceptance": "0.2.0", "torch": "2.6.0"})
    assert differences(plan(0), other) == [
        "expects 3 nodes, node 0 expects 2",
        "meets at elsewhere:1, node 0 at head:29400",
        "cluster-acceptance 0.2.0, node 0 has 0.1.0",
    ]


def test_disagreement_names_every_differing_node_and_only_those() -> None:
    text = disagreement([plan(0), plan(1), plan(2, nodes=3)])
    assert text is not None
    assert "node 2 (node-2): expects 3 nodes" in text
    assert "node 1" not in text
    assert "every node stops here" in text


def test_nodes_sharing_a_host_name_are_named_and_still_agree() -> None:
    # containers of one host: torchrun's rendezvous could take their agents for one node (same name and pid)
    plans = [plan(0, host="vm"), plan(1, host="vm"), plan(2), plan(3, host="vm")]
    line = shared_host_names(plans)
    assert "nodes 0, 1, 3 are all 'vm'" in line and "--hostname" in line and "node-2" not in line
    assert disagreement(plans) is None  # a line, not a failure: Slurm daemons on one host share a name safely
    assert shared_host_names([plan(0), plan(1)]) == ""


def test_two_host_names_on_one_address_are_one_name_to_the_rendezvous() -> None:
    # torchrun names a node by socket.getfqdn(): two host names mapped to one address read back as the first
    plans = [plan(0, host="c0", rendezvous_name="c0"), plan(1, host="c1", rendezvous_name="c0")]
    assert "nodes 0, 1 are all 'c0'" in shared_host_names(plans)
    # a plan from a package that does not send the name is judged by its host name
    assert shared_host_names([plan(0, rendezvous_name="node-0"), plan(1)]) == ""


def test_plan_round_trips_through_json() -> None:
    assert Plan.from_json(plan(1).to_json()) == plan(1)


def placements(nodes: int) -> list[Placement]:
    port = free_port()
    return [Placement(nodes, r, "127.0.0.1", port, "test") for r in range(nodes)]


def run_nodes(plans: list[Plan], timeout_s: float) -> list[str | BaseException]:
    """Each plan on its own thread as one node; node 0's meeting is opened first (it hosts the store)."""
    places = placements(len(plans))
    outcomes: list[str | BaseException] = [RuntimeError("did not run")] * len(plans)
    meetings = [Meeting(places[0], timeout_s)]

    def node(rank: int) -> None:
        try:
            meeting = meetings[0] if rank == 0 else Meeting(places[rank], timeout_s)
            session, heard = meeting.agree(plans[rank])
            assert [p.node_rank for p in heard] == list(range(len(plans)))  # every node hears every plan
            outcomes[rank] = session
        except PlanError as exc:
            outcomes[rank] = exc

    threads = [threading.Thread(target=node, args=(r,)) for r in range(len(plans))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s * 4)
    return outcomes


def test_nodes_that_agree_share_node_0s_session_id() -> None:
    outcomes = run_nodes([plan(0), plan(1)], timeout_s=30)
    assert all(isinstance(o, str) for o in outcomes), outcomes
    assert outcomes[0] == outcomes[1]


def test_a_mismatch_fails_every_node_with_the_same_message() -> None:
    outcomes = run_nodes([plan(0), plan(1, tests=["t.py::a"])], timeout_s=30)
    messages = [str(o) for o in outcomes]
    assert all(isinstance(o, PlanError) for o in outcomes), outcomes
    assert messages[0] == messages[1]
    assert "node 1 (node-1): lacks 1 test(s) node 0 has: t.py::b" in messages[0]


def test_a_missing_node_is_named_by_the_nodes_that_came() -> None:
    meeting = Meeting(placements(3)[0], timeout_s=0.5)
    with pytest.raises(PlanError, match=r"missing node ranks: \[1, 2\]"):
        meeting.agree(plan(0, nodes=3))


def test_a_missing_head_is_named_by_the_others() -> None:
    head = r"node 0 \(the head, 127.0.0.1:\d+\) did not arrive"
    with pytest.raises(PlanError, match=rf"{head}.*missing node ranks: \[0\]"):
        Meeting(placements(2)[1], timeout_s=0.5)


def test_after_a_missing_node_later_barriers_fail_at_once_with_the_same_news() -> None:
    meeting = Meeting(placements(2)[0], timeout_s=0.3)
    with pytest.raises(PlanError) as first:
        meeting.barrier("probe-1-connectivity", 0.3)
    with pytest.raises(PlanError) as second:
        meeting.barrier("probe-2-collectives", 3600)
    assert "missing node ranks: [1]" in str(first.value)
    assert str(second.value) == str(first.value)


def test_a_failed_preflight_is_named_to_the_other_nodes_and_leaves_the_plan_alone() -> None:
    sick = dataclasses.replace(
        plan(1), preflight="profile h200-x2 expects 2 NVIDIA H200 GPU(s) on this node, ... finds 1"
    )
    assert disagreement([plan(0), sick]) is None and sick.digest == plan(1).digest
    assert failed_preflights([plan(0), sick], mine=0) == [
        "node 1 (node-1) failed its preflight: profile h200-x2 expects 2 NVIDIA H200 GPU(s) on this node, ... finds 1"
    ]
    assert failed_preflights([plan(0), sick], mine=1) == []  # its own line is already its own error


def test_a_plan_from_a_newer_package_is_read_and_its_version_compared() -> None:
    """A field this version does not know is left out, so the nodes still compare plans and name the version."""
    newer = json.loads(plan(1).to_json())
    newer["versions"]["cluster-acceptance"] = "9.9.9"
    newer["something_new"] = {"x": 1}
    read = Plan.from_json(json.dumps(newer))
    message = disagreement([plan(0), read])
    assert message is not None and "cluster-acceptance 9.9.9, node 0 has 0.1.0" in message
