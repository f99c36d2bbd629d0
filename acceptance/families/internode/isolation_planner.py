"""The isolation rounds' planner: which pairs each round measures, from the status of the test so far
(``acceptance.families.internode.isolation`` says why each round is what it is)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from acceptance.families.internode import isolation_records as records
from acceptance.families.internode.isolation_judge import Judge
from acceptance.families.internode.isolation_records import (
    MAX_STEPS,
    NOBODY_ROUNDS,
    Pair,
    Round,
    Scale,
    Status,
)


def first_round(iso: Judge, number: int) -> Round:
    """Every node in one pair; the hinted paths measured as well, their nodes first paired elsewhere."""
    hinted: list[int] = []
    for a, b in iso.hint:
        hinted += [n for n in (a, b) if n not in hinted and 0 <= n < iso.nodes]
    others = [n for n in range(iso.nodes) if n not in hinted]
    order: list[int] = []
    # each hinted node beside an unhinted partner, so its first pair is not its own slow link
    while hinted or others:
        if hinted:
            order.append(hinted.pop(0))
        if others:
            order.append(others.pop(0))
    step = tuple((order[i], order[i + 1]) for i in range(0, len(order) - 1, 2))
    second: list[Pair] = []
    used: set[int] = set()
    met = {frozenset(p) for p in step}
    for a, b in iso.hint:
        if a != b and {a, b} <= set(range(iso.nodes)) and not {a, b} & used and frozenset((a, b)) not in met:
            second.append((a, b))
            used.update((a, b))
            met.add(frozenset((a, b)))
    if len(order) % 2:
        last = order[-1]
        partner = next((n for n in order[:-1] if n not in used), None)
        if partner is not None and last not in used:
            second.append((last, partner))
    steps = (step, tuple(second)) if second else (step,)
    return Round(number, "pairs", steps, iso.repeats, census=True, hint=iso.hint)


def next_pairs_round(iso: Judge, number: int) -> Round | None:
    st = iso.status()
    met = {frozenset((p.a, p.b)) for p in iso.pairs}
    if len(iso.rounds) == 1 and not st.slow and not st.culprits:
        # nothing slow in round 1: the fabric, a bound set too high, or a slow path not paired yet; a
        # new partner for every node measures other paths, and the level from twice the pairs
        step = _matching(list(range(iso.nodes)), met, prefer=set(st.cleared))
        return Round(number, "pairs", (tuple(step),), iso.repeats, census=True) if step else None
    todo = st.suspects + st.untested + [n for n in st.path_ends if n not in st.suspects]
    strength = dict.fromkeys(todo, 0.0)
    for j in st.judged:
        for n in (j.pair.a, j.pair.b):
            if n in strength:
                strength[n] += j.llr  # the most likely culprits first, to the first cleared partners
    todo.sort(key=lambda n: (-strength[n], n))
    steps: list[tuple[Pair, ...]] = []
    rotate = number * 7919  # a different start in the cleared nodes each round: partners spread
    paths = list(st.open_paths)
    leaning = [n for n in st.undecided if n not in st.suspects]
    # partners whose pairs together clear them by a slow pair's worth and more first: a chance slow pair
    # with a suspect then re-opens no partner in the round's wake
    steady = firm(iso, st)
    partners = [n for n in st.cleared if n in steady] + [n for n in st.cleared if n not in steady]
    for s in range(partners_per_node(iso, st.scale)):
        # cleared partners first; with too few, nodes that lean healthy (not suspects) before suspects
        step = _with_partners(todo, partners + leaning, met, rotate + s * 104729, len(steady) or len(partners))
        for a, b in list(paths):  # a slow path not yet decisive, once, where both its nodes are free
            if not {a, b} & {n for pair in step for n in pair}:
                step.append((a, b))
                paths.remove((a, b))
        if step:
            steps.append(tuple(step))
            met |= {frozenset(p) for p in step}
    steps += _paths_again(paths, steps)
    if not steps and st.suspects:
        return repeat_round(iso, number, st)
    return Round(number, "pairs", tuple(steps), iso.repeats) if steps else None


def repeat_round(iso: Judge, number: int, st: Status) -> Round | None:
    """Nodes left open that have met every node they could (a few nodes): their pairs read again, and
    the census's first step with them (the level's sample, no pair chosen for what it read): more
    readings where no new partner is left, at most ``MAX_STEPS`` steps."""
    first = next((r for r in iso.rounds if r.census), None)
    if first is None or not first.steps[0]:
        return None
    steps: list[tuple[Pair, ...]] = [first.steps[0]]
    done = {frozenset(p) for p in first.steps[0]}
    todo: list[Pair] = []
    for node in st.suspects:
        for p in iso.pairs:
            if p.has(node) and frozenset((p.a, p.b)) not in done:
                todo.append((p.a, p.b))
                done.add(frozenset((p.a, p.b)))
    while todo and len(steps) < MAX_STEPS:
        used: set[int] = set()
        step = []
        for a, b in list(todo):
            if not {a, b} & used:
                step.append((a, b))
                used.update((a, b))
                todo.remove((a, b))
        steps.append(tuple(step))
    return Round(number, "pairs", tuple(steps), iso.repeats, census=True)


def firm(iso: Judge, st: Status) -> set[int]:
    """The cleared nodes whose pairs together stay past ``clear_llr`` however one more pair reads slow."""
    by_node = records.by_node(st.judged)
    return {
        n
        for n in st.cleared
        if iso.weigh([j.pair for j in by_node.get(n, [])], st.scale) <= iso.clear_llr - iso.witness_llr
    }


def partners_per_node(iso: Judge, scale: Scale) -> int:
    """The partners each open node meets in a round: two witnesses, or as many as a healthy node needs
    for its pairs together to clear it (two standard deviations past ``clear_llr``) where one pair says
    little against the noise, at most ``MAX_STEPS``."""
    variance = scale.sigma**2 / iso.repeats + scale.level_var
    per_pair = scale.effect**2 / (2 * variance)  # a healthy pair's expected evidence, -llr
    if not per_pair > 0:
        return 2
    # k pairs give -k I with a standard deviation of sqrt(2 k I): k I >= (sqrt 2 + sqrt(2 + |clear|))^2
    needed = (math.sqrt(2) + math.sqrt(2 - iso.clear_llr)) ** 2 / per_pair
    return max(2, min(MAX_STEPS, math.ceil(needed)))


def rail_pairs(iso: Judge) -> list[Pair]:
    st = iso.status()
    if iso.nodes == 2:
        return [(0, 1)] if iso.pairs else []
    met = {frozenset((p.a, p.b)) for p in iso.pairs}
    used: set[int] = set()
    pairs: list[Pair] = []
    for node in st.culprits:
        spare = [g for g in st.cleared if g not in used]
        # a cleared node it has not met yet: one more partner for the verdict, and the rails' own figure
        fresh = [g for g in spare if frozenset((node, g)) not in met] or spare
        if fresh and node not in used:
            pairs.append((node, fresh[0]))
            used.update((node, fresh[0]))
    for a, b in st.paths:
        if not used & {a, b}:
            pairs.append((a, b))
            used.update((a, b))
    if not pairs and not st.held and not st.untested and not st.too_noisy and len(iso.rounds) < NOBODY_ROUNDS:
        # nobody stands out: every pair alike. One pair of cleared nodes' rails tells a rail slow on every
        # node (that rail's switch or cabling) from a fabric slow as a whole; within the pair rounds' budget
        census = next((r.steps[0] for r in iso.rounds if r.census), ())
        pairs = [p for p in census if set(p) <= set(st.cleared)][:1]
    return pairs


def _matching(nodes: list[int], met: set[frozenset[int]], prefer: set[int]) -> list[Pair]:
    """Disjoint pairs of nodes that have not met, greedily; a node outside ``prefer`` meets one inside
    first."""
    used: set[int] = set()
    pairs: list[Pair] = []
    outside = [n for n in nodes if n not in prefer]
    ranked = [n for n in nodes if n in prefer] + outside
    start = 0
    for node in outside + [n for n in nodes if n in prefer]:
        if node in used:
            continue
        while start < len(ranked) and ranked[start] in used:
            start += 1
        partner = next(
            (p for p in ranked[start:] if p not in used and p != node and frozenset((node, p)) not in met), None
        )
        if partner is not None:
            pairs.append((node, partner))
            used.update((node, partner))
    return pairs


def _with_partners(
    todo: Sequence[int], partners: Sequence[int], met: set[frozenset[int]], start: int, rotating: int
) -> list[Pair]:
    """One step: each node of ``todo`` with a partner it has not met: the first ``rotating`` partners (the
    cleared nodes) in turn from ``start``, then the rest in order; with none to spare, another node of
    ``todo`` it has not met."""
    used: set[int] = set()
    pairs: list[Pair] = []
    skip = set(todo)
    head = [n for n in partners[:rotating] if n not in skip]
    if head:
        head = head[start % len(head) :] + head[: start % len(head)]
    pool = head + [n for n in partners[rotating:] if n not in skip]
    at = 0
    spare = len(pool)
    alone: list[int] = []
    for node in todo:
        partner = None
        for k in range(len(pool) if spare else 0):
            cand = pool[(at + k) % len(pool)]
            if cand not in used and frozenset((node, cand)) not in met:
                partner = cand
                at = (at + k + 1) % len(pool)
                spare -= 1
                break
        if partner is None:
            alone.append(node)
        else:
            pairs.append((node, partner))
            used.update((node, partner))
    for i, node in enumerate(alone):
        if node in used:
            continue
        partner = next((p for p in alone[i + 1 :] if p not in used and frozenset((node, p)) not in met), None)
        if partner is not None:
            pairs.append((node, partner))
            used.update((node, partner))
    return pairs


def _paths_again(paths: Sequence[Pair], steps: Sequence[tuple[Pair, ...]]) -> list[tuple[Pair, ...]]:
    """Open paths whose nodes met new partners in every step of a round: read again in a step of their own
    (a path is named on two rounds' readings), those that share no node with an earlier one."""
    if not paths or not steps:
        return []
    used: set[int] = set()
    out: list[Pair] = []
    for a, b in paths:
        if not {a, b} & used:
            out.append((a, b))
            used.update((a, b))
    return [tuple(out)]
