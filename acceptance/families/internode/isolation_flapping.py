"""A flapping node of the isolation rounds: one in whose pairs the outliers gather. A node slow in some of
its readings puts one or two of a pair's five repeats far below the rest, which the pair's figure sets
aside as outliers (``pair_statistics.trimmed``): pair by pair it reads healthy, and its pairs together
would clear it. Heavy-tailed noise (congestion, a retransmit) puts outliers in every node's pairs alike;
a flapping node's pairs hold them at the rate it flaps. Its pairs are then judged on every reading
(``isolation_records.Noise.trim``): its outliers are its fault, not the noise's."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from acceptance.families.internode.isolation_records import ALPHA, SIGMA_CONFIDENCE_Z, PairFigure
from acceptance.families.internode.pair_statistics import Trimmed, binomial_tail


def flapping_nodes(pairs: Sequence[PairFigure], trim: Callable[[PairFigure], Trimmed], nodes: int) -> set[int]:
    """The nodes whose pairs, the pairs with their worst partner aside (a healthy partner of a flapping node
    holds its outliers in that one pair), hold more outliers than the rest of the cluster's outlier rate
    gives a node's readings with a chance of ``ALPHA`` / N (the nodes' error budget, Bonferroni over N:
    judged on every reading, a healthy node's heavy tail could read as slow). The rate of the rest is the
    upper 90% bound of its count (outliers + 1, so that where no other pair held an outlier, a few are not
    a certainty) over its readings: a small cluster's rate is known to a few outliers, and a node is not
    to flap for the rest's luck."""
    found: dict[int, dict[int, tuple[int, int]]] = {}  # node -> partner -> (outliers, readings)
    total, readings = 0, 0
    for p in pairs:
        t = trim(p)
        total += t.outliers
        readings += len(p.logs)
        for n in (p.a, p.b):
            held, seen = found.setdefault(n, {}).get(p.other(n), (0, 0))
            found[n][p.other(n)] = (held + t.outliers, seen + len(p.logs))
    out: set[int] = set()
    for node, partners in found.items():
        if len(partners) < 2:
            continue
        worst = max(partners, key=lambda q: partners[q][0])
        held = sum(c for q, (c, _) in partners.items() if q != worst)
        seen = sum(k for q, (_, k) in partners.items() if q != worst)
        mine = sum(c for c, _ in partners.values())
        rest = total - mine + 1
        rate = (rest + SIGMA_CONFIDENCE_Z * math.sqrt(rest)) / (readings - sum(k for _, k in partners.values()) + 1)
        if held and binomial_tail(seen, held, min(rate, 1.0)) < ALPHA / max(nodes, 1):
            out.add(node)
    return out
