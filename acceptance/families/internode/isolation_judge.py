"""The isolation rounds' statistical test: from the pairs measured to who is cleared, who is named and who
is left open, within an explicit error budget (``acceptance.families.internode.isolation`` gives the
math; docs/isolation.md too)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from acceptance.families.connectivity import Link
from acceptance.families.internode import pair_statistics as stats
from acceptance.families.internode.isolation_flapping import flapping_nodes
from acceptance.families.internode.isolation_noise import noisy_nodes
from acceptance.families.internode.isolation_records import (
    ALPHA,
    BETA,
    HUBER_K,
    MILD,
    PATH_ALPHA,
    REPEATS,
    RESOLUTION_Z,
    SIGMA_CONFIDENCE_Z,
    SIGMA_FLOOR,
    WITNESS_ALPHA,
    Judged,
    Noise,
    Pair,
    PairFigure,
    Round,
    Scale,
    Status,
)
from acceptance.families.internode.isolation_records import by_node as per_node
from acceptance.families.internode.pair_statistics import OUTLIER_Z, trimmed

# what is left of the pairs' own variance, at most, where their error and the level's cancel
CANCELLED = 1e-9


def censored_sum(logs: Sequence[float], level: float, effect: float, sigma: float) -> float:
    """The sum of these readings' log ratios to ``level``, each held within ``HUBER_K`` noises beyond either
    hypothesis (healthy at 0, slow at ``effect``): Huber's censored test, where one reading far off weighs as
    one very slow reading (the tests' inner loop)."""
    reach = HUBER_K * sigma
    low, high = level + min(effect, 0.0) - reach, level + reach
    return sum(low if x < low else high if x > high else x for x in logs) - level * len(logs)


def one_node_share(pairs: Sequence[PairFigure]) -> int:
    """How many of these pairs to set aside, slowest first, before their median is a healthy pair's: as many as
    one node holds, where it holds half of them or more (two census pairs at 4 or 5 nodes, the one pair at 2 or
    3), since that node, slow, would set their median itself; a fault only slows a pair. 0 otherwise."""
    held = Counter(n for p in pairs for n in (p.a, p.b))
    most = max(held.values(), default=0)
    return min(most, len(pairs) - 1) if 2 * most >= len(pairs) else 0


def against_level(log_ratio: float, own_var: float, level_var: float, effect: float) -> float:
    """The log-likelihood ratio of pairs' mean against the level (``stats.llr``), at the pairs' own variance
    and the level's part of it. Where the two cancel (the pairs are the level's own sample, weighed to clear),
    their difference from the level cancels too: what is left is rounding, no evidence either way."""
    if own_var + level_var <= CANCELLED * own_var:
        return 0.0
    return stats.llr(log_ratio, own_var + level_var, effect)


@dataclass
class Judge:
    """The statistical test over the pairs measured so far: the noise, the level, each pair's verdict, who is
    cleared, named, or left open (``Status``). The rounds (``isolation_planner``) and the verdict's words
    (``isolation_words``) read it; ``Isolation`` adds the rounds' records to it."""

    nodes: int
    fraction: float  # the effect size worth naming: a pair at this fraction of the healthy level is slow
    # the mildest slowdown named where the noise lets the rounds tell it apart (never bolder than fraction)
    mild: float = MILD
    hosts: dict[int, str] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    pairs: list[PairFigure] = field(default_factory=list)
    rails: list[Link] = field(default_factory=list)
    error: str | None = None
    repeats: int = REPEATS
    alpha: float = ALPHA
    hint: tuple[Pair, ...] = ()  # the failing probe's slowest node pairs, slowest first
    noise_by_round: list[float] = field(default_factory=list)  # the noise estimate after each pairs round
    _status: Status | None = field(default=None, repr=False)

    # the thresholds of the test, in log-likelihood ratio
    @property
    def name_llr(self) -> float:
        return math.log((1 - BETA) * max(self.nodes, 1) / self.alpha)

    @property
    def witness_llr(self) -> float:
        return math.log((1 - BETA) / WITNESS_ALPHA)

    @property
    def clear_llr(self) -> float:
        return math.log(BETA / (1 - self.alpha))

    def path_llr(self, tested: int) -> float:
        """A path's own budget: PATH_ALPHA over the node pairs tested (each one a path that could be named),
        apart from the nodes': there are about as many paths as nodes to test, and more with every round."""
        return math.log((1 - BETA) * max(tested, 1) / PATH_ALPHA)

    @property
    def bound(self) -> float:
        """ln(fraction): the profile's slowdown, always worth naming, in log units below the healthy level."""
        return math.log(self.fraction)

    @property
    def effect(self) -> float:
        """The slow hypothesis in use, in log units below the healthy level (``Scale.effect``)."""
        return self.status().scale.effect

    def status(self) -> Status:
        if self._status is None:
            self._status = self._judge()
        return self._status

    def _first_level(self) -> float:
        """The median of the census pairs' median logs (no noise needed, no outlier moves it): where healthy
        pairs are, for telling the pairs that may estimate the noise from those plainly slow."""
        return stats.median(stats.median(p.logs) for p in self.census_sample())

    def census_sample(self) -> list[PairFigure]:
        # a census round's first step: every node once, no pair chosen for what it read; and round 1's pair of
        # the node left over of an odd count (in its second step, beside the hinted paths, which are chosen for
        # what the failing probe read): at 3 nodes, the one pair that does not share the first step's fate
        census = {(r.number, frozenset(p)) for r in self.rounds if r.census for p in r.steps[0]}
        hinted = {frozenset(p) for r in self.rounds for p in r.hint}
        census |= {
            (r.number, frozenset(p))
            for r in self.rounds[:1]
            if r.census
            for step in r.steps[1:]
            for p in step
            if frozenset(p) not in hinted
        }
        usable = [p for p in self.pairs if not p.broken]
        if self.nodes <= 3:
            # every pair there is: the level's reference is then the faster ones (``_level``), since a slow
            # node is in two of the three and the hint has chosen all of them
            return usable
        return [p for p in usable if (p.round, frozenset((p.a, p.b))) in census] or usable

    def _noise(self) -> Noise:
        """The noise of one reading in log units, and the degrees of freedom it rests on: the pooled variance
        of each healthy pair's repeats around their mean (its outliers set aside), raised to its upper 90%
        bound for the degrees of freedom it has (few pairs, few readings: a wider test, never a bolder one).
        Healthy: above the midpoint to ``fraction`` x the first level; a throttled pair is steady, and pooling
        it would make the test most confident where the cluster is worst. Pairs that flap are left out: a
        flapping node is a fault to find, not noise to tolerate; so are a noisy node's pairs, judged at that
        node's own noise (``_noisy``) instead of widening every other pair's test."""
        first = self._first_level()
        usable = [p for p in self.pairs if len(p.logs) >= 2 and not p.broken]
        healthy = [p for p in usable if math.isnan(first) or stats.median(p.logs) - first > self.bound / 2]
        if not healthy:
            floor = max(SIGMA_FLOOR, -self.bound / 2)  # no spread measured: assume the effect is noise
            return Noise(floor, 0, max(OUTLIER_Z * floor, -self.bound / 2))
        # the typical pair's spread, from the middle of its readings: outliers move neither
        typical = max(SIGMA_FLOOR, stats.median(stats.middle_span_sigma(p.logs) for p in healthy))
        cut = max(OUTLIER_Z * typical, -self.bound / 2)
        noisy = noisy_nodes(usable, healthy, first)
        squares, dof = 0.0, 0
        for p in healthy:
            t = trimmed(p.logs, cut)
            if p.a in noisy or p.b in noisy or t.flaps or len(t.kept) < 2:
                continue
            squares += sum((x - t.mean) ** 2 for x in t.kept)
            dof += len(t.kept) - 1
        if dof == 0:
            return Noise(typical, 0, cut, noisy)
        sigma = max(SIGMA_FLOOR, math.sqrt(squares / stats.chi2_quantile(dof, -SIGMA_CONFIDENCE_Z)))
        found = Noise(sigma, dof, cut, {n: s for n, s in noisy.items() if s > sigma})
        return replace(found, flapping=frozenset(flapping_nodes(usable, found.trim, self.nodes)))

    def _level(self, noise: Noise, effect: float, robust: bool) -> tuple[float, float, frozenset[PairFigure]]:
        """ln of a healthy pair's GB/s and the variance of that estimate: the median of the census pairs
        (each its readings' mean, outliers aside), leaving out those decisively slow (at ``effect``) against
        a first median (a fault, not a sample of the level). ``robust``: where one node's pairs can be half
        the sample or more, a slow node sets that median itself, halfway between its pairs and the healthy
        ones; the reference is then the median of the pairs left once ``one_node_share`` of the slowest are
        set aside (a fault only slows a pair), with its own error in the test."""
        sample = [(p, noise.trim(p)) for p in self.census_sample()]
        sample = [(p, t) for p, t in sample if t.kept]
        if not sample:
            return math.nan, math.inf, frozenset()
        sigma = noise.sigma
        means = sorted(((t.mean, len(t.kept)) for _, t in sample), reverse=True)
        by_mean = sorted(sample, key=lambda found: -found[1].mean)
        aside = one_node_share([p for p, _ in sample]) if robust else 0
        upper = means[: len(means) - aside]
        first = statistics.median(x for x, _ in upper)
        # the reference's own error where it rests on a few pairs (the census median's is small beside a pair's)
        ref_var = sigma**2 / statistics.fmean(n for _, n in upper) / len(upper) if aside else 0.0
        chosen = [stats.llr(x - first, sigma**2 / n + ref_var, effect) < self.witness_llr for x, n in means]
        kept = [m for m, keep in zip(means, chosen, strict=True) if keep]
        if not kept:
            return first, sigma**2 / statistics.fmean(n for _, n in upper) / len(upper), frozenset()
        pairs = frozenset(p for (p, _), keep in zip(by_mean, chosen, strict=True) if keep)
        middle = statistics.median(x for x, _ in kept)
        if len(kept) <= 2 or one_node_share(list(pairs)):
            factor = stats.median_variance(len(kept))  # of a median of k means, against their mean's
            return middle, factor * sigma**2 / statistics.fmean(n for _, n in kept) / len(kept), pairs
        # many pairs, no node's the most of them: their readings' mean, censored as ``weigh`` censors a node's,
        # about their median; a median stays put where a share of the readings falls far below (congestion,
        # retransmits) and a node's mean does not: every healthy node would lean slow against it
        readings = [x for (_, t), keep in zip(by_mean, chosen, strict=True) if keep for x in t.kept]
        return middle + censored_sum(readings, middle, effect, sigma) / len(readings), sigma**2 / len(readings), pairs

    def _scale(self) -> Scale:
        """The noise, the level and the slow hypothesis: the mildest slowdown a node's two witness pairs can
        tell apart from healthy within the node's share of the budget (90% of the time), no milder than
        ``mild`` and no bolder than the profile's ``fraction``. The level leaves out the pairs slow at the
        hypothesis in use: first the profile's, then the one its level allows."""
        noise = self._noise()
        # at 3 nodes every pair is the sample, and a slow node is in two of the three: the faster pair is the level
        level, level_var, sample = self._level(noise, self.bound, robust=self.nodes <= 3)
        effect, resolution = self._hypothesis(noise.sigma, level_var)
        if effect != self.bound:
            level, level_var, sample = self._level(noise, effect, robust=True)
            effect, resolution = self._hypothesis(noise.sigma, level_var)
        return Scale(level, level_var, noise, effect, resolution, sample)

    def _hypothesis(self, sigma: float, level_var: float) -> tuple[float, float]:
        """The slow hypothesis in use and the resolution, in log units, at this noise and level error."""
        # a node named on two witnesses: two pairs' readings, their mean against the level
        node_var = sigma**2 / (2 * self.repeats) + (level_var if math.isfinite(level_var) else 0.0)
        reach = RESOLUTION_Z + math.sqrt(RESOLUTION_Z**2 + 2 * self.name_llr)
        resolution = -reach * math.sqrt(node_var)
        return min(max(resolution, self.bound), max(math.log(self.mild), self.bound)), resolution

    def weigh(self, pairs: Sequence[PairFigure], scale: Scale, clearing: bool = False) -> float:
        """The log-likelihood ratio "slow" against "healthy" of these pairs: their readings' mean (outliers
        aside, each censored at its pair's noise) against the level; +inf when one is broken. ``clearing``:
        less the level's error its pairs in the level's sample share (at 4 nodes most of a healthy node's)."""
        if any(p.broken for p in pairs):
            return math.inf
        total, count, variance, shared = 0.0, 0, 0.0, 0
        for p in pairs:
            t, sigma = scale.noise.trim(p), scale.noise.of(p)
            # a pair that flaps reads slow some of the time: its readings far off are the fault, weighed in full
            total += censored_sum(t.kept, scale.level, scale.effect, math.inf if t.flaps else sigma)
            count += len(t.kept)
            variance += len(t.kept) * sigma**2
            shared += p in scale.sample
        if not count:
            return 0.0
        level_var = scale.level_var - 2 * scale.sigma**2 * shared * clearing / count / max(len(scale.sample), 1)
        return against_level(total / count, variance / count**2, level_var, scale.effect)

    def _verdict(self, p: PairFigure, scale: Scale) -> Judged:
        """One pair against the level: slow, flapping (two outliers or more in its repeats: the pair, not
        chance, and decided before "slow": a pair that flaps clears nobody and convicts nobody on its own),
        fast or undecided."""
        t = scale.noise.trim(p)
        if p.broken or math.isnan(scale.level):
            return Judged(p, t.mean - scale.level, math.inf, "slow", t.outliers)
        llr = self.weigh([p], scale)
        verdict = (
            "flapping"
            if t.flaps
            else "slow"
            if llr >= self.witness_llr
            else "fast"
            if llr <= self.clear_llr
            else "undecided"
        )
        return Judged(p, t.mean - scale.level, llr, verdict, t.outliers)

    def _witnessed(self, per_partner: Mapping[int, list[PairFigure]], scale: Scale, paths: float) -> list[int] | None:
        """The cleared partners that witness a node slow, or None when it is not to be named: two witnesses
        (without its strongest partner the rest still says "slow" on its own: one bad path convicts
        nobody), and all of it passes the node's share of the error budget."""
        if len(per_partner) < 2 or math.isnan(scale.level):
            return None
        every = [p for found in per_partner.values() for p in found]
        rest = min(
            self.weigh([p for q, found in per_partner.items() if q != partner for p in found], scale)
            for partner in per_partner
        )
        # the rest must pass the node's own budget where it alone tells a slow node from a slow path to its
        # strongest partner: at 3 nodes (one pair left), and where that partner's pairs alone pass ``paths``
        weights = {q: self.weigh(found, scale) for q, found in per_partner.items()}
        enough = self.name_llr if self.nodes == 3 or max(weights.values()) >= paths else self.witness_llr
        if self.weigh(every, scale) < self.name_llr or rest < enough:
            return None
        return sorted(q for q, weight in weights.items() if weight > 0)

    def _cleared(self, judged: list[Judged], scale: Scale) -> set[int]:
        """The nodes shown healthy: in a fast pair, or all their pairs together (flapping ones aside) say
        "healthy" (a slow node makes every pair of its own slow, so they test the node itself). A node with
        slow or flapping pairs with two cleared partners is re-opened whatever a fast pair said: one pair
        that happened to read fast does not clear a node that two others say is slow. So is one whose pairs
        with cleared partners, its slow path aside, lean slow: the evidence points at the node, not a path.
        Unless all its pairs with cleared partners together, those slow or flapping included, still say
        "healthy" past ``clear_llr``: a healthy node that met many partners at high noise has a slow or
        flapping pair or two by chance (about 1% of its pairs at 60% noise), and its pairs together are the
        test of the node; re-opened on them, it would stay open however many partners it met."""
        by_node = per_node(judged)

        def slow_elsewhere(node: int) -> set[int]:
            # its partner whose pairs with it read slowest, where that partner's pairs with others say "slow"
            # on their own: the partner explains those pairs, which say nothing of this node (at 4 nodes a slow
            # node is a third of every other node's partners, and would keep them all from being cleared)
            weights: dict[int, list[PairFigure]] = {}
            for j in by_node[node]:
                weights.setdefault(j.pair.other(node), []).append(j.pair)
            worst = max(weights, key=lambda q: self.weigh(weights[q], scale))
            theirs = [j.pair for j in by_node[worst] if j.pair.other(worst) != node and j.verdict != "flapping"]
            return {worst} if theirs and self.weigh(theirs, scale) >= self.witness_llr else set()

        # a fast pair clears its nodes where it read steadily: one with an outlier may be a flapping node's
        # pair that happened to read slow once only
        cleared = {n for j in judged if j.verdict == "fast" and not j.outliers for n in (j.pair.a, j.pair.b)}
        for node, mine in by_node.items():
            steady = [
                j.pair for j in mine if j.verdict != "flapping" and j.pair.other(node) not in slow_elsewhere(node)
            ]
            if node not in cleared and steady and self.weigh(steady, scale, clearing=True) <= self.clear_llr:
                cleared.add(node)
        for _ in range(len(by_node)):
            reopened = set()
            for node in cleared:
                mine = [j for j in by_node.get(node, []) if j.pair.other(node) in cleared]
                against = {j.pair.other(node) for j in mine if j.verdict in ("slow", "flapping")}
                rest = [j.pair for j in mine if j.verdict not in ("slow", "flapping")]
                doubted = len(against) >= 2 or (against and rest and self.weigh(rest, scale) > 0)
                # all of them together, the slow and flapping ones included, still clear it: the test of
                # the node itself, which one pair's chance reading does not undo (Wald's lower boundary)
                if doubted and self.weigh([j.pair for j in mine], scale, clearing=True) > self.clear_llr:
                    reopened.add(node)
            if not reopened:
                break
            cleared -= reopened
        return cleared

    def _judge(self) -> Status:
        scale = self._scale()
        judged = [self._verdict(p, scale) for p in self.pairs]
        cleared = self._cleared(judged, scale)
        measured = {n for p in self.pairs for n in (p.a, p.b)}
        by_node = per_node(judged)
        path_llr = self.path_llr(len({frozenset((p.a, p.b)) for p in self.pairs}))
        witnesses: dict[int, list[int]] = {}
        for node in sorted(measured - cleared):
            per_partner: dict[int, list[PairFigure]] = {}
            for j in by_node[node]:
                if j.pair.other(node) in cleared:
                    per_partner.setdefault(j.pair.other(node), []).append(j.pair)
            found = self._witnessed(per_partner, scale, path_llr)
            if found is not None:
                witnesses[node] = found
        per_path: dict[Pair, list[Judged]] = {}
        for j in judged:
            per_path.setdefault((min(j.pair.a, j.pair.b), max(j.pair.a, j.pair.b)), []).append(j)
        # a path: slow between two cleared nodes, never fast or flapping; named within the paths' own budget,
        # and only once each of its nodes was fast with two other partners (one pair that happened to read
        # fast does not make a slow node's pair a path)
        fast_with = {n: set[int]() for n in measured}
        for j in judged:
            if j.verdict == "fast":
                fast_with[j.pair.a].add(j.pair.b)
                fast_with[j.pair.b].add(j.pair.a)
        slow_paths = {
            key: self.weigh([j.pair for j in found], scale)
            for key, found in sorted(per_path.items())
            if set(key) <= cleared
            and any(j.verdict == "slow" for j in found)
            and all(j.verdict in ("slow", "undecided") for j in found)
        }
        confirmed = {n for n, others in fast_with.items() if len(others) >= 2}
        named_paths = [
            key
            for key, llr in slow_paths.items()
            if llr >= path_llr
            and set(key) <= confirmed
            and self._replicated([j.pair for j in per_path[key]], scale)
            and self._below_ends(key, by_node, cleared, scale)
        ]
        # open: worth another round, where one more round reading as its rounds so far did would pass the
        # paths' budget; a healthy pair that read slow by chance (one in a hundred at 60% noise) would not,
        # and chasing it would cost a healthy cluster a round
        open_paths = [
            key
            for key, llr in slow_paths.items()
            if key not in named_paths and llr * (1 + 1 / len({j.pair.round for j in per_path[key]})) >= path_llr
        ]
        left = measured - cleared - set(witnesses)

        def against(node: int) -> list[PairFigure]:
            # its pairs with cleared partners: the witnesses it would be named on
            return [j.pair for j in by_node[node] if j.pair.other(node) in cleared]

        def leans_slow(node: int) -> bool:
            # its pairs with nodes not named: a pair with a named node says nothing of this one
            mine = [j for j in by_node[node] if j.pair.other(node) not in witnesses]
            steady = [j.pair for j in mine if j.verdict != "flapping"]
            return any(j.verdict in ("slow", "flapping") for j in mine) or self.weigh(steady, scale) > 0

        suspects = sorted(n for n in left if leans_slow(n))
        return Status(
            scale=scale,
            judged=judged,
            cleared=sorted(cleared),
            culprits=sorted(witnesses),
            witnesses=witnesses,
            paths=named_paths,
            open_paths=open_paths,
            path_ends=sorted({n for key in open_paths for n in key if n not in confirmed}),
            undecided=sorted(left),
            # undecided, and the evidence leans slow: the next round's business
            suspects=suspects,
            held=[
                n
                for n in suspects
                # slow with nobody cleared to weigh it against yet, or slow with its cleared partners
                if (not against(n) and any(j.verdict == "slow" for j in by_node[n]))
                or self.weigh(against(n), scale) >= self.witness_llr
            ],
            untested=sorted(set(range(self.nodes)) - measured),
        )

    def _replicated(self, path: Sequence[PairFigure], scale: Scale) -> bool:
        """A path's evidence stands in two rounds: without its strongest round the rest still says "slow"
        on its own. A path rests on one pair, without a node's two witnesses; read again in another round,
        a passing disturbance or a noisy node's chance low readings do not repeat, a slow link does."""
        if any(p.broken for p in path):
            return True
        rounds = {p.round for p in path}
        if len(rounds) < 2:
            return False
        return min(self.weigh([p for p in path if p.round != r], scale) for r in rounds) >= self.witness_llr

    def _below_ends(self, key: Pair, by_node: Mapping[int, list[Judged]], cleared: set[int], scale: Scale) -> bool:
        """A path's pairs stand below each of its nodes' pairs with other cleared partners, by the test of a
        witness: the path is slow, not one of its nodes at a pace of its own too mild to name (a node at 0.8x
        among 30% noise is cleared, and its pairs, a chance low reading or two, would read as a slow path).
        The rails' rule, for nodes: a rail is named only below the node's other rails."""
        a, b = key
        path = [j.pair for j in by_node[a] if j.pair.other(a) == b]
        if any(p.broken for p in path):
            return True
        logs = [x for p in path for x in scale.noise.trim(p).kept]
        for node, partner in ((a, b), (b, a)):
            others = [
                x
                for j in by_node[node]
                if j.pair.other(node) != partner and j.pair.other(node) in cleared and j.verdict != "flapping"
                for x in scale.noise.trim(j.pair).kept
            ]
            if not logs or not others:
                return False
            variance = scale.sigma**2 / len(logs) + scale.sigma**2 / len(others)
            if stats.llr(statistics.fmean(logs) - statistics.fmean(others), variance, scale.effect) < self.witness_llr:
                return False
        return True

    @property
    def culprits(self) -> list[int]:
        return [] if self.nodes == 2 else self.status().culprits

    def label(self, node: int) -> str:
        host = self.hosts.get(node)
        return f"node {node} (host {host})" if host else f"node {node}"
