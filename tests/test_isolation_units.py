"""Link coverage schedules and the isolation rounds on simulated clusters of 2..64 nodes (no torch)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import cast

import pytest

from acceptance.families import links
from acceptance.families.isolation import Isolation, Round
from acceptance.families.links import Link

FAST, SLOW = 10.0, 0.3  # GB/s of a healthy pair and of one through the slow node
GPUS = 2


def disjoint(pairs: list[tuple[int, int]]) -> bool:
    ends = [n for pair in pairs for n in pair]
    return len(ends) == len(set(ends))


@pytest.mark.parametrize("n", range(1, 18))
def test_circle_rounds_pair_every_gpu_once_in_n_minus_1_rounds(n: int) -> None:
    rounds = links.circle_rounds(n)
    assert len(rounds) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)
    assert all(disjoint(r) for r in rounds)
    flat = [pair for r in rounds for pair in r]
    assert sorted(flat) == list(itertools.combinations(range(n), 2))


@pytest.mark.parametrize("n", range(1, 65))
def test_hypercube_rounds_grow_with_log_n_and_reach_every_node(n: int) -> None:
    rounds = links.hypercube_rounds(n)
    assert len(rounds) == (math.ceil(math.log2(n)) if n > 1 else 0)
    assert all(disjoint(r) for r in rounds)
    flat = [pair for r in rounds for pair in r]
    assert len(flat) == len(set(flat)), "no node pair measured twice"
    assert {node for pair in flat for node in pair} == (set(range(n)) if n > 1 else set())


def test_rails_pair_gpu_i_with_gpu_i_and_nodes_keep_their_own_pairs_inside() -> None:
    nodes = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    rails = links.rail_rounds(nodes)
    assert rails == [
        [(0, 3), (1, 4), (2, 5), (6, 9), (7, 10), (8, 11)],
        [(0, 6), (1, 7), (2, 8), (3, 9), (4, 10), (5, 11)],
    ]
    inside = links.intranode_rounds(nodes)
    assert len(inside) == 3 and all(disjoint(r) for r in inside)
    assert {(a, b) for r in inside for a, b in r if a < 3} == {(0, 1), (0, 2), (1, 2)}


def link(src: int, dst: int, gbps: float, uuid: bool = True) -> Link:
    ends = {"src": src, "dst": dst, "src_node": src, "dst_node": dst, "src_gpu": 0, "dst_gpu": 0}
    names = {"src_host": f"h{src}", "dst_host": f"h{dst}"}
    ids = {"src_uuid": f"GPU-{src}", "dst_uuid": f"GPU-{dst}"} if uuid else {}
    # deliberately incomplete: no bytes or time_us, which the names and the matrices do not read
    return cast(Link, {**ends, **names, **ids, "gbps": gbps, "wrong": 0, "round": 1})


def test_slowest_links_are_named_by_host_gpu_and_uuid_slowest_first() -> None:
    found = [link(0, 1, 5.0), link(1, 0, 0.5), link(2, 3, math.nan, uuid=False)]
    assert links.slowest(found, 2) == "h2 GPU 0 -> h3 GPU 0 nan GB/s; h1 GPU 0 (GPU-1) -> h0 GPU 0 (GPU-0) 0.5 GB/s"
    assert links.wrong([*found, {**link(4, 5, 1.0), "wrong": 7}]) == "h4 GPU 0 (GPU-4) -> h5 GPU 0 (GPU-5): 7 wrong"
    matrix = links.matrices(found[:2], "gpu")["GPU 0"]
    assert matrix["labels"] == ["node 0 (h0)", "node 1 (h1)"]
    assert matrix["matrix"] == [[None, 5.0], [0.5, None]]


Figure = Callable[[int, int], float]


def speed(slow: set[int], noise: float = 0.0, seed: int = 0) -> Figure:
    """A pair runs at the pace of its slower node; ``noise``: relative jitter of every figure."""
    rng = random.Random(seed)
    return lambda a, b: (SLOW if {a, b} & slow else FAST) * (1 + rng.uniform(-noise, noise))


def simulate(n: int, figure: Figure, fraction: float = 0.5, wrong: set[int] = frozenset()) -> Isolation:  # type: ignore[assignment]
    iso = Isolation(n, fraction)
    hosts = {i: f"ns{i}" for i in range(n)}
    while (rnd := iso.next_round()) is not None:
        assert rnd.number == len(iso.rounds) + 1
        for step in rnd.steps:
            assert disjoint(list(step)), f"round {rnd.number} reuses a node within a step: {step}"
        iso.record(rnd, {"hosts": hosts, **measure(rnd, figure, wrong)})
        assert len(iso.rounds) <= 6, "isolation must end"
    return iso


def measure(rnd: Round, figure: Figure, wrong: set[int]) -> dict[str, list[dict[str, object]]]:
    pairs = [pair for step in rnd.steps for pair in step]
    if rnd.kind == "pairs":
        return {"pairs": [{"a": a, "b": b, "gbps": figure(a, b), "wrong": int(bool({a, b} & wrong))} for a, b in pairs]}
    found = []
    for a, b in pairs:
        for gpu in range(GPUS):
            for src, dst in ((a, b), (b, a)):
                # GPU 1 is the slow node's bad rail
                rate = figure(src, dst) if gpu == 1 else FAST
                found.append({**link(src, dst, rate), "src_gpu": gpu, "dst_gpu": gpu})
    return {"links": found}


@pytest.mark.parametrize("n", range(3, 65))
def test_one_slow_node_is_named_in_at_most_3_rounds_wherever_it_sits(n: int) -> None:
    for culprit in range(n):
        iso = simulate(n, speed({culprit}))
        assert iso.culprits == [culprit], iso.message()
        assert len(iso.rounds) <= 3, (culprit, iso.message())
        line = iso.message()
        assert f"node {culprit} (host ns{culprit}): " in line and "rail GPU 1 <-> GPU 1 slowest" in line
        assert "\n" not in line


def test_rounds_do_not_grow_from_8_to_16_to_64_nodes() -> None:
    def worst(n: int) -> int:
        return max(len(simulate(n, speed({c})).rounds) for c in range(n))

    assert worst(16) <= worst(8) <= 3
    assert worst(64) <= worst(8)


def test_the_message_says_how_many_pairs_with_the_culprit_were_slow_against_the_rest() -> None:
    iso = simulate(4, speed({3}))
    assert iso.message() == (
        "isolation (3 rounds): node 3 (host ns3): 2 of 2 pairs with it at 0.3 GB/s against >= 10 elsewhere; "
        "rail GPU 1 <-> GPU 1 slowest (0.3 GB/s, h3 GPU 1 (GPU-3) -> h0 GPU 1 (GPU-0))"
    )
    evidence = iso.evidence()
    assert evidence["culprits"] == [3] and evidence["pair_matrix"]["matrix"][2][3] == SLOW
    assert evidence["pair_matrix"]["labels"][3] == "node 3 (host ns3)"
    assert [r["kind"] for r in evidence["rounds"]] == ["pairs", "pairs", "rails"]


def test_two_nodes_can_only_blame_their_pair() -> None:
    iso = simulate(2, speed({1}))
    assert iso.culprits == [] and len(iso.rounds) == 2
    assert "node 0 (host ns0) and node 1 (host ns1): their pair at 0.3 GB/s; two nodes can only blame" in iso.message()
    assert "rail GPU 1 <-> GPU 1 slowest" in iso.message()


@pytest.mark.parametrize("n", [8, 16, 33])
@pytest.mark.parametrize("slow", [(0, 1), (0, 5), (2, 7)])
def test_two_slow_nodes_are_both_named(n: int, slow: tuple[int, int]) -> None:
    iso = simulate(n, speed(set(slow)))
    assert iso.culprits == sorted(slow), iso.message()
    assert len(iso.rounds) <= 3


@pytest.mark.parametrize("seed", range(20))
def test_noise_of_30_percent_neither_hides_the_culprit_nor_blames_another(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([4, 8, 16, 31])
    culprit = rng.randrange(n)
    iso = simulate(n, speed({culprit}, noise=0.3, seed=seed))
    assert iso.culprits == [culprit], iso.message()


def test_nobody_stands_out_when_every_pair_is_alike_with_two_sets_of_partners() -> None:
    iso = simulate(8, speed(set(), noise=0.1))
    assert iso.culprits == [] and len(iso.rounds) == 2
    assert "no node stands out: 8 pairs at" in iso.message()


def test_a_slow_node_in_every_pair_of_round_1_is_told_from_a_slow_fabric() -> None:
    iso = simulate(4, speed({0, 2}))
    assert iso.culprits == [0, 2] and len(iso.rounds) == 3, iso.message()


def test_a_slow_path_between_two_healthy_nodes_is_not_blamed_on_either() -> None:
    iso = simulate(8, lambda a, b: SLOW if {a, b} == {2, 3} else FAST)
    assert iso.culprits == []
    assert (
        "the path node 2 (host ns2) <-> node 3 (host ns3) at 0.3 GB/s while both are fast with others" in iso.message()
    )


def test_wrong_data_makes_a_pair_slow_however_fast_it_ran() -> None:
    iso = simulate(6, speed(set()), wrong={4})
    assert iso.culprits == [4], iso.message()


def test_a_round_that_fails_is_named_and_ends_the_search() -> None:
    iso = Isolation(4, 0.5)
    first = iso.next_round()
    assert first is not None
    iso.record(first, {"pairs": [{"a": 0, "b": 1, "gbps": FAST}, {"a": 2, "b": 3, "gbps": SLOW}]})
    second = iso.next_round()
    assert second is not None and second.steps == (((2, 0), (3, 1)),)
    iso.fail(second, "probe isolation timed out after 60 s and was killed\nlog tail")
    assert iso.next_round() is None
    assert iso.message().endswith("round 2 failed: probe isolation timed out after 60 s and was killed")
    assert "not resolved in 2 rounds: node 2, node 3" in iso.message()
