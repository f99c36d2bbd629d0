"""A noisy node of the isolation rounds: one whose pairs spread wider than the rest, above the healthy level
as much as below it (no fault does that: a fault only slows a pair), told from the pairs without it, and
its own noise, at which its pairs are judged (``acceptance.families.internode.isolation_judge``)."""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence

from acceptance.families.internode import pair_statistics as stats
from acceptance.families.internode.isolation_records import SIGMA_CONFIDENCE_Z, SIGMA_FLOOR, PairFigure
from acceptance.families.internode.pair_statistics import NOISY_ABOVE, NOISY_RATIO, OUTLIER_Z, trimmed


def noisy_nodes(usable: Sequence[PairFigure], healthy: Sequence[PairFigure], first: float) -> dict[int, float]:
    """The nodes noisier than the rest, with their own noise (upper 90% bound): the middle of their pairs'
    readings spreads ``NOISY_RATIO`` x the typical pair's without them (root mean square over two partners
    or more; without them, since at 3 or 4 nodes a noisy node's pairs are most of the pairs)
    and more than each partner's other pairs do, their shared pair aside (it is the partner's too), and their
    readings above the healthy level spread ``NOISY_ABOVE`` x the typical pair's noise (root mean square):
    a fault only slows a pair, so readings spread far above healthy are noise, not a slow node, nor a
    flapping one (slow in some readings, at the typical noise in the rest, never beyond it)."""
    spreads: dict[int, dict[int, list[float]]] = {}  # node -> partner -> its pairs' spreads
    for p in usable:
        spread = stats.middle_span_sigma(p.logs)
        for n in (p.a, p.b):
            spreads.setdefault(n, {}).setdefault(p.other(n), []).append(spread)

    def rms(node: int, without: int | None = None) -> float:
        found = [x for q, xs in spreads[node].items() if q != without for x in xs]
        return math.sqrt(stats.fmean((x**2 for x in found), default=0.0))

    typical = _Typical([(p, stats.middle_span_sigma(p.logs)) for p in healthy])
    level = _Typical([(p, stats.median(p.logs)) for p in healthy])

    def above(node: int, without: int | None = None) -> float:
        # the root mean square of its readings above the level of the pairs without it (at 4 nodes the census
        # median is halfway to a slow node's pair)
        ref = stats.median([level.without(node)], first)
        found = [(x - ref) ** 2 for p in usable if p.has(node) and p.other(node) != without for x in p.logs if x > ref]
        return math.sqrt(stats.fmean(found, default=0.0))

    out: dict[int, float] = {}
    for node, mine in spreads.items():
        others = max(SIGMA_FLOOR, stats.median([typical.without(node)], SIGMA_FLOOR))
        # each shared pair set aside, the node's other pairs against its partner's other pairs: the noisier
        # of the two is the one whose other pairs read far above the level (a fault only slows a pair; a
        # healthy partner's other pair may spread wide by chance, but stays within the noise above the level)
        wide = rms(node) > NOISY_RATIO * others and all(
            rms(node, q) > rms(q, node) or above(node, q) > above(q, node) for q in mine
        )
        high = above(node) > NOISY_ABOVE * others
        if len(mine) < 2 or not high or not wide:
            continue
        squares, dof = 0.0, 0
        for p in usable:
            if p.has(node):
                t = trimmed(p.logs, OUTLIER_Z * rms(node))
                squares += sum((x - t.mean) ** 2 for x in t.kept)
                dof += len(t.kept) - 1
        if dof:
            out[node] = math.sqrt(squares / stats.chi2_quantile(dof, -SIGMA_CONFIDENCE_Z))
    return out


class _Typical:
    """The median of one figure of the healthy pairs (their spread, their level), without one node's pairs:
    the rest's, which a noisy or slow node's own pairs do not set (at 3 nodes it is in two of the three)."""

    def __init__(self, figures: Sequence[tuple[PairFigure, float]]) -> None:
        self.ordered = sorted(s for _, s in figures if not math.isnan(s))
        self.mine: dict[int, list[float]] = {}
        for p, s in figures:
            if not math.isnan(s):
                self.mine.setdefault(p.a, []).append(s)
                self.mine.setdefault(p.b, []).append(s)

    def without(self, node: int) -> float:
        rest = list(self.ordered)
        for s in self.mine.get(node, []):
            del rest[bisect.bisect_left(rest, s)]
        return statistics.median(rest) if rest else stats.median(self.ordered)
