"""Naming the culprit when a figure across nodes fails, as a statistical test that never blames a healthy
node. Torch-free: node ids and figures in; the rounds to run, who is cleared, who is to blame and the one
line that says so out.

Each round is one job over every node; the pairs of a step run at once, the steps of a round one after
the other, and the whole round ``repeats`` times over, interleaved (step 1, step 2, step 1, step 2, ...),
so a passing disturbance lands on different pairs instead of on one pair's every reading. Nodes are
numbered 0..N-1 (the nodes' own ranks, stable from job to job). A pair runs at the pace of its slower
node (or of the path between them), so a fast pair clears both its nodes and a slow pair only says that
one of the two, or their path, is slow.

The decision, per pair and per node, in log space (a slowdown is a ratio):

* the noise: the spread of each healthy pair's repeats (pooled over the pairs above the midpoint to
  ``fraction`` x the census median, but those that flap, with an upper confidence bound when few pairs
  were measured: a steady throttled pair never makes the test bolder), never less than ``SIGMA_FLOOR``;
* the healthy level: the median of the census pairs (round 1's first step, where every node is in one
  pair), leaving out those decisively slow against a first median; never a maximum, which grows with the
  number of noisy pairs. Where the slow hypothesis in use is milder than ``fraction``, the pairs slow at
  it are left out too, and where one node's pairs can be half the sample (two pairs at 4 or 5 nodes)
  against the faster pairs instead of a median that node sets itself. Its own error (the variance of a
  median) enters every test below, since every pair is compared with the same level;
* the slow hypothesis: the mildest slowdown two witness pairs tell apart at this noise (``Scale``), no
  milder than ``mild`` and no bolder than ``fraction`` (the profile's ``slow_pair_fraction``);
* each pair: Wald's sequential probability ratio test between "healthy" (its level) and "slow" (at the
  slow hypothesis x the level), over its
  repeats: a log-likelihood ratio over ``log((1 - BETA) / WITNESS_ALPHA)`` makes the pair slow, under
  ``log(BETA / (1 - ALPHA))`` fast; a pair whose repeats disagree by more than the noise allows (it
  flaps) clears nobody;
* a node is cleared by a fast pair or by its pairs together, and re-opened when its pairs with two
  cleared partners are slow (or one is and the rest lean slow), whatever a fast pair said, unless those
  pairs together, the slow ones included, still clear it (a healthy node that met many partners at high
  noise has a slow pair or two by chance: its pairs together are the test of the node); it is named
  only when its pairs with at least two different cleared partners together pass
  ``log((1 - BETA) N / ALPHA)`` (a false-blame rate of ALPHA / N per node, ALPHA for the whole
  cluster: Bonferroni over the N nodes), and without its strongest partner the rest still passes
  ``log((1 - BETA) / WITNESS_ALPHA)`` on its own: two independent witnesses, so one bad path or partner
  convicts nobody;
* a slow pair of two cleared nodes, each fast with two other partners, is their path, not either node,
  named within the paths' own budget (``PATH_ALPHA`` over the node pairs tested), and only where it also
  stands below each node's pairs with other cleared partners (a node too mildly slow to name is not
  told as its paths);
* a rail is named only when it stands below the node's other rails, by the same test.

Rounds:

1. every node in disjoint pairs (the census); the failing probe's slowest links, where it has them, are
   measured too in a second step, and their nodes meet other partners in the first; with N odd the
   node left over meets another in the second step.
2. each suspect (neither cleared nor named, its evidence leaning slow) meets two cleared partners it
   has not met (one per step, rotating through the cleared nodes, as NVIDIA's cluster-readiness-engine
   confirms each suspect with a different healthy reference node, ADR-055, and Google's
   cluster-health-scanner pairs each failed node with a passed one in its second pass,
   ``nccl_runner.py``; first those whose pairs together clear them by more than one slow pair's worth,
   so that a chance slow pair with a suspect re-opens no partner); with no cleared node to spare, with
   a node that leans healthy, then another suspect; a slow path not yet decisive is measured again, and
   its nodes meet new partners. More partners (steps) where one pair says too little against the
   noise, at most ``MAX_STEPS``. When
   round 1 showed no slow pair, every node meets a new partner instead (a second census: a slow path
   not paired yet then shows, and the level has twice the pairs). When the suspects have met every node
   they could (a few nodes), their pairs are read again instead, with the census's first step (the
   level's sample): more readings where no new partner is left. At most ``MAX_PAIR_ROUNDS`` pair rounds.
3. the rails (GPU i <-> GPU i) of each named node against a cleared node, and of each named path, every
   rail at once, both directions. Two nodes can only blame their pair: their rails are measured.

So a slow node is named in 3 rounds (more when round 2 leaves it undecided), whatever N is; nodes the
noise leaves leaning slow on no more than noise are said to be too noisy to judge, and not listed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypedDict, cast

from typing_extensions import NotRequired

from acceptance.families.collectives import GroupFigure
from acceptance.families.connectivity import Link, Matrix, endpoint, matrices
from acceptance.families.internode import pair_statistics as stats
from acceptance.families.internode.pair_statistics import NOISY_RATIO, OUTLIER_Z, Trimmed, trimmed

Pair = tuple[int, int]
# the node's own rank, which the plugin hands to every job of an isolation: torchrun's GROUP_RANK is
# assigned anew by each rendezvous, so it cannot say which machine round 2's "node 3" is
NODE_ENV = "ACCEPTANCE_NODE_RANK"
# pair rounds: a third and more only while nodes are left open (at high noise); with the rails, at most 6
MAX_PAIR_ROUNDS = 5
# the partners each open node meets in a confirmation round: two witnesses; more where one pair says
# little against the noise, up to this many steps in one round (each step a pair test of every open node)
MAX_STEPS = 4
# interleaved repeats of every pair in a round: the fewest that give a spread and a median
REPEATS = 5
# the chance, per isolation, that any healthy node is named (split over the N nodes: ALPHA / N each)
ALPHA = 0.01
# the chance, per isolation, that any healthy path is named (split over the node pairs tested): a path is
# one pair's evidence, without the two witnesses that hold a node's blame well under ALPHA, so its own
# budget is a tenth of the nodes'
PATH_ALPHA = 0.001
# the chance that a node at ``fraction`` x the healthy level is cleared by one pair
BETA = 0.01
# a node's evidence without its strongest witness must still say "slow" on its own at this error rate
WITNESS_ALPHA = 0.05
# the least noise assumed per reading (5%): timed windows of a healthy collective vary by a few percent,
# and a figure closer than this to the level is no fault worth a node
SIGMA_FLOOR = 0.05
# the noise bound with few pairs: the upper 90% confidence bound of the variance (z of 0.90): few pairs,
# few readings, a wider test
SIGMA_CONFIDENCE_Z = 1.2816
# the mildest slowdown worth naming where the noise allows (``Internode.mild_pair_fraction``): a NIC
# trained at a lower rate or a noisy neighbour costs a node a fifth of its pace
MILD = 0.8
# the power at which the slow hypothesis is one the rounds can tell apart: 90% (z of 0.90)
RESOLUTION_Z = 1.2816
# names in the one-line verdict; the full lists are in the evidence
MESSAGE_NAMES = 10


class RoundSpec(TypedDict):
    number: int
    kind: str
    steps: list[list[list[int]]]  # per step, its node pairs
    repeats: NotRequired[int]  # the steps run this many times over, interleaved
    hint: NotRequired[list[list[int]]]  # round 1: the failing probe's slowest node pairs


class IsolationConfig(TypedDict):
    """An isolation round's section of its probe's spec (``acceptance.run.isolation_rounds.round_spec``)."""

    round: RoundSpec
    op: str
    size: str
    iters: int


class PairRow(GroupFigure):
    """One node pair's figure in a pairs round: its median repeat's collective figures (busbw is its
    ``gbps``) and every repeat's busbw, in the order they ran."""

    a: int
    b: int
    gbps: float
    repeats_gbps: NotRequired[list[float]]


class RoundResult(TypedDict):
    """An isolation round's probe result: ``pairs`` in a pairs round, ``links`` in a rails round."""

    round: int
    kind: str
    hosts: dict[int, str]
    pairs: NotRequired[list[PairRow]]
    links: NotRequired[list[Link]]
    hint: NotRequired[list[list[int]]]  # round 1's, as it was asked: a replay starts from the same


class PairRecord(TypedDict):
    """A PairFigure in the evidence: its fields and its verdict."""

    a: int
    b: int
    gbps: float  # the median repeat
    repeats_gbps: list[float]
    wrong: int
    round: int
    log_ratio: float  # ln(gbps / healthy level), the mean over the repeats but its outliers
    outliers: int  # repeats set aside, far from the pair's median (two or more: the pair flaps)
    llr: float  # the log-likelihood ratio "slow" against "healthy"
    verdict: str  # slow, fast, flapping or undecided


class IsolationEvidence(TypedDict):
    message: str
    rounds: list[RoundSpec]
    pairs: list[PairRecord]
    pair_matrix: Matrix
    healthy_gbps: float
    slow_under_gbps: float
    slow_pair_fraction: float
    noise_sigma: float
    noise_dof: int  # the degrees of freedom of the noise estimate
    noisy: dict[str, float]  # node -> its own noise, where it is noisier than the rest (judged at it, not slow)
    outliers: int  # readings set aside as outliers, over every pair
    outlier_cut: float  # ln units: a reading this far from its pair's median is an outlier
    noise_by_round: list[float]  # the estimate after each pairs round: steady when the cluster is worst
    named_fraction: float  # the slow hypothesis in use: a pair at this fraction of the level is slow
    resolution: float  # the smallest slowdown (a fraction) two witness pairs tell apart at this noise
    repeats: int
    alpha: float
    name_llr: float
    witness_llr: float
    clear_llr: float
    cleared: list[int]
    culprits: list[int]
    hosts: dict[str, str]  # node -> its host, as the rounds named them: who a culprit is (the drain list)
    witnesses: dict[str, list[int]]
    paths: list[list[int]]
    flapping: list[list[int]]
    undecided: list[int]
    suspects: list[int]
    too_noisy: list[int]
    untested: list[int]
    hint: list[list[int]]
    rails: list[Link]
    rail_matrices: dict[str, Matrix]
    slow_rails: dict[str, list[int]]  # node -> the GPU indexes of its rails below its others
    error: str | None


@dataclass(frozen=True)
class PairFigure:
    a: int
    b: int
    figures: tuple[float, ...]  # every repeat's GB/s
    wrong: int = 0
    round: int = 0

    @property
    def gbps(self) -> float:
        usable = [f for f in self.figures if not math.isnan(f)]
        return statistics.median(usable) if usable else math.nan

    @cached_property
    def logs(self) -> tuple[float, ...]:
        return tuple(math.log(f) for f in self.figures if f > 0 and math.isfinite(f))

    @property
    def broken(self) -> bool:
        """Wrong data, or a repeat that measured nothing: slow however fast the rest ran."""
        return self.wrong > 0 or not self.figures or len(self.logs) < len(self.figures)

    def has(self, node: int) -> bool:
        return node in (self.a, self.b)

    def other(self, node: int) -> int:
        return self.b if node == self.a else self.a


@dataclass(frozen=True)
class Round:
    number: int
    kind: str  # "pairs": a collective inside each node pair; "rails": every rail of each pair, both directions
    steps: tuple[tuple[Pair, ...], ...]
    repeats: int = 1
    census: bool = False  # every node in one pair: the healthy level's sample
    hint: tuple[Pair, ...] = ()

    def spec(self) -> RoundSpec:
        out: RoundSpec = {
            "number": self.number,
            "kind": self.kind,
            "steps": [[list(p) for p in step] for step in self.steps],
        }
        if self.kind == "pairs":
            out["repeats"] = self.repeats
        if self.hint:
            out["hint"] = [list(p) for p in self.hint]
        return out


@dataclass(frozen=True)
class Judged:
    """A pair measurement against the healthy level."""

    pair: PairFigure
    log_ratio: float  # mean of ln(repeat / level), its outliers set aside
    llr: float  # log-likelihood ratio of "slow at fraction x" against "healthy"; +inf when broken
    verdict: str  # slow, fast, flapping, undecided
    outliers: int = 0  # repeats set aside, far from the pair's median


@dataclass(frozen=True)
class Noise:
    """The noise of one reading, in log units: the cluster's, and each noisy node's own."""

    sigma: float  # a reading of a pair of two nodes that are not noisy (upper confidence bound)
    dof: int  # the degrees of freedom ``sigma`` rests on
    cut: float  # a reading this far from its pair's median is an outlier (``OUTLIER_Z`` x the noise)
    noisy: dict[int, float] = field(default_factory=dict)  # node -> its own noise, above the cluster's

    def of(self, p: PairFigure) -> float:
        """The noise of one reading of this pair: its noisier end's."""
        return max(self.sigma, self.noisy.get(p.a, 0.0), self.noisy.get(p.b, 0.0))

    def trim(self, p: PairFigure) -> Trimmed:
        """The pair's readings but its outliers, at its own noise."""
        return trimmed(p.logs, max(self.cut, OUTLIER_Z * self.of(p)))


@dataclass(frozen=True)
class Scale:
    """What every pair is judged against, in log units."""

    level: float  # ln GB/s of a healthy pair
    level_var: float  # the variance of that estimate
    noise: Noise  # the noise of one reading, from the healthy pairs; a noisy node's its own
    effect: float  # the slow hypothesis in use: ln of the slowdown a slow pair is tested against
    resolution: float  # ln of the smallest slowdown two witness pairs tell apart at this noise

    @property
    def sigma(self) -> float:
        return self.noise.sigma

    @property
    def dof(self) -> int:
        return self.noise.dof


@dataclass(frozen=True)
class Status:
    scale: Scale
    judged: list[Judged]
    cleared: list[int]
    culprits: list[int]
    witnesses: dict[int, list[int]]  # a culprit's cleared partners whose pairs were slow
    paths: list[Pair]  # slow pairs of two cleared nodes, each fast with two other partners
    open_paths: list[Pair]  # slow pairs of two cleared nodes, not yet decisive
    path_ends: list[int]  # nodes of an open path that have not yet been fast with two other partners
    undecided: list[int]  # neither cleared nor named
    suspects: list[int]  # undecided, and their evidence leans slow: the next round's business
    held: list[int]  # suspects slow with no cleared partner yet, or whose cleared partners together say "slow"
    untested: list[int]

    @property
    def level(self) -> float:
        """GB/s of a healthy pair."""
        return math.exp(self.scale.level) if not math.isnan(self.scale.level) else math.nan

    @property
    def level_sigma(self) -> float:
        """The standard error of the level's logarithm."""
        return math.sqrt(self.scale.level_var)

    @property
    def sigma(self) -> float:
        return self.scale.sigma

    @property
    def too_noisy(self) -> list[int]:
        """Suspects the noise left neither cleared nor held: the verdict names and lists none of them."""
        return [n for n in self.suspects if n not in self.held]

    @property
    def slow(self) -> list[Judged]:
        return [j for j in self.judged if j.verdict == "slow"]

    @property
    def flapping(self) -> list[Judged]:
        return [j for j in self.judged if j.verdict == "flapping"]


@dataclass
class Isolation:
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

    def next_round(self) -> Round | None:
        """The round to run now, or None when the verdict is in."""
        number = len(self.rounds) + 1
        if self.error is not None or self.nodes < 2 or any(r.kind == "rails" for r in self.rounds):
            return None
        if not self.rounds:
            return self._first(number)
        if self.nodes > 2 and len(self.rounds) < MAX_PAIR_ROUNDS:
            found = self._again(number)
            if found is not None:
                return found
        rails = self._rail_pairs()
        return Round(number, "rails", (tuple(rails),)) if rails else None

    def record(self, rnd: Round, result: Mapping[str, Any]) -> None:
        """A round's probe result: ``hosts`` {node: host}; ``pairs`` [{a, b, gbps, repeats_gbps, wrong}] or
        ``links``."""
        self.rounds.append(rnd)
        self._status = None
        self.hosts.update({int(k): str(v) for k, v in result.get("hosts", {}).items()})
        if rnd.kind == "pairs":
            for p in result["pairs"]:
                figures = p.get("repeats_gbps") or [p["gbps"]]
                self.pairs.append(
                    PairFigure(
                        int(p["a"]),
                        int(p["b"]),
                        tuple(float(f) for f in figures),
                        int(p.get("wrong", 0)),
                        rnd.number,
                    )
                )
            self.noise_by_round.append(self.status().sigma)
        else:
            # a link of the round's result (JSON), renumbered with the isolation's round
            self.rails += [cast(Link, {**link, "round": rnd.number}) for link in result["links"]]

    def fail(self, rnd: Round, error: str) -> None:
        self.rounds.append(rnd)
        self._status = None
        self.error = error.strip().splitlines()[0] if error.strip() else "no result"

    # -- the test ---------------------------------------------------------------------------------------

    def status(self) -> Status:
        if self._status is None:
            self._status = self._judge()
        return self._status

    def _first_level(self) -> float:
        """The median of the census pairs' median logs (no noise needed, no outlier moves it): where healthy
        pairs are, for telling the pairs that may estimate the noise from those plainly slow."""
        return stats.median(stats.median(p.logs) for p in self._census_sample())

    def _census_sample(self) -> list[PairFigure]:
        # a census round's first step: every node once (the hinted paths and the node left over of an odd
        # count meet in the second), no pair chosen for what it read
        census = {(r.number, frozenset(p)) for r in self.rounds if r.census for p in r.steps[0]}
        usable = [p for p in self.pairs if not p.broken]
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
        noisy = self._noisy(usable, typical, cut, first)
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
        return Noise(sigma, dof, cut, {n: max(s, sigma) for n, s in noisy.items()})

    def _noisy(self, usable: Sequence[PairFigure], typical: float, cut: float, first: float) -> dict[int, float]:
        """The nodes noisier than the rest, with their own noise (upper 90% bound): the middle of their pairs'
        readings spreads ``NOISY_RATIO`` x the typical pair's (root mean square over two partners or more)
        and more than any partner's pairs do (a pair with a noisy node is its partner's too), and some of
        their readings lie above the healthy level by more than an outlier's distance: a fault only slows a
        pair, so readings far above healthy are noise, not a slow node, nor a flapping one (slow in some
        readings, never fast beyond the rest)."""
        spreads: dict[int, list[float]] = {}
        partners: dict[int, set[int]] = {}
        above: set[int] = set()
        for p in usable:
            spread = stats.middle_span_sigma(p.logs)
            for n in (p.a, p.b):
                spreads.setdefault(n, []).append(spread)
                partners.setdefault(n, set()).add(p.other(n))
            if not math.isnan(first) and max(p.logs) - first > cut:
                above.update((p.a, p.b))
        rms = {n: math.sqrt(stats.fmean(x**2 for x in found)) for n, found in spreads.items()}
        out: dict[int, float] = {}
        for node, mine_partners in partners.items():
            wide = rms[node] > NOISY_RATIO * typical and all(rms[node] > rms[q] for q in mine_partners)
            if len(mine_partners) < 2 or node not in above or not wide:
                continue
            squares, dof = 0.0, 0
            for p in usable:
                if p.has(node):
                    t = trimmed(p.logs, OUTLIER_Z * rms[node])
                    squares += sum((x - t.mean) ** 2 for x in t.kept)
                    dof += len(t.kept) - 1
            if dof:
                out[node] = math.sqrt(squares / stats.chi2_quantile(dof, -SIGMA_CONFIDENCE_Z))
        return out

    @staticmethod
    def _llr(log_ratio: float, variance: float, effect: float) -> float:
        return stats.llr(log_ratio, variance, effect)

    def _level(self, noise: Noise, effect: float, robust: bool) -> tuple[float, float]:
        """ln of a healthy pair's GB/s and the variance of that estimate: the median of the census pairs
        (each its readings' mean, outliers aside), leaving out those decisively slow (at ``effect``) against
        a first median (a fault, not a sample of the level). ``robust``: where one node's pairs can be half
        the sample or more (two census pairs at 4 or 5 nodes; the one pair at 2 or 3), a slow node sets that
        median itself, halfway between its pairs and the healthy ones; the reference is then the median of
        the pairs left once as many of the slowest as one node holds are set aside (a fault only slows a
        pair, so the faster pairs are the healthy ones), with its own error in the test."""
        sample = [(p, noise.trim(p)) for p in self._census_sample()]
        sample = [(p, t) for p, t in sample if t.kept]
        if not sample:
            return math.nan, math.inf
        sigma = noise.sigma
        means = sorted(((t.mean, len(t.kept)) for _, t in sample), reverse=True)
        upper = means
        if robust:
            held: dict[int, int] = {}
            for p, _ in sample:
                for n in (p.a, p.b):
                    held[n] = held.get(n, 0) + 1
            most = max(held.values())
            if 2 * most >= len(means):
                upper = means[: max(len(means) - most, 1)]
        first = statistics.median(x for x, _ in upper)
        # the reference's own error where it rests on a few pairs (the census median's is small beside a pair's)
        ref_var = sigma**2 / statistics.fmean(n for _, n in upper) / len(upper) if upper is not means else 0.0
        kept = [(x, n) for x, n in means if self._llr(x - first, sigma**2 / n + ref_var, effect) < self.witness_llr]
        if not kept:
            return first, sigma**2 / statistics.fmean(n for _, n in upper) / len(upper)
        readings = statistics.fmean(n for _, n in kept)
        # the variance of a median of k means: pi / 2 of the mean's for many, the mean's itself for 1 or 2
        factor = math.pi / 2 if len(kept) > 2 else 1.0
        return statistics.median(x for x, _ in kept), factor * sigma**2 / readings / len(kept)

    def _scale(self) -> Scale:
        """The noise, the level and the slow hypothesis: the mildest slowdown a node's two witness pairs can
        tell apart from healthy within the node's share of the budget (90% of the time), no milder than
        ``mild`` and no bolder than the profile's ``fraction``. The level leaves out the pairs slow at the
        hypothesis in use: first the profile's, then the one its level allows."""
        noise = self._noise()
        level, level_var = self._level(noise, self.bound, robust=False)
        effect, resolution = self._hypothesis(noise.sigma, level_var)
        if effect != self.bound:
            level, level_var = self._level(noise, effect, robust=True)
            effect, resolution = self._hypothesis(noise.sigma, level_var)
        return Scale(level, level_var, noise, effect, resolution)

    def _hypothesis(self, sigma: float, level_var: float) -> tuple[float, float]:
        """The slow hypothesis in use and the resolution, in log units, at this noise and level error."""
        # a node named on two witnesses: two pairs' readings, their mean against the level
        node_var = sigma**2 / (2 * self.repeats) + (level_var if math.isfinite(level_var) else 0.0)
        reach = RESOLUTION_Z + math.sqrt(RESOLUTION_Z**2 + 2 * self.name_llr)
        resolution = -reach * math.sqrt(node_var)
        return min(max(resolution, self.bound), max(math.log(self.mild), self.bound)), resolution

    def _evidence(self, pairs: Sequence[PairFigure], scale: Scale) -> float:
        """The log-likelihood ratio "slow" against "healthy" of these pairs together: their readings' mean
        (each pair's outliers aside) against the level, whose own error they share, each reading at its
        pair's noise; +inf when one is broken."""
        if any(p.broken for p in pairs):
            return math.inf
        total, count, variance = 0.0, 0, 0.0
        for p in pairs:
            kept = scale.noise.trim(p).kept
            total += sum(kept)
            count += len(kept)
            variance += len(kept) * scale.noise.of(p) ** 2
        if not count:
            return 0.0
        return self._llr(total / count - scale.level, variance / count**2 + scale.level_var, scale.effect)

    def _verdict(self, p: PairFigure, scale: Scale) -> Judged:
        """One pair against the level: slow, flapping (two outliers or more in its repeats: the pair, not
        chance, and decided before "slow": a pair that flaps clears nobody and convicts nobody on its own),
        fast or undecided."""
        t = scale.noise.trim(p)
        if p.broken or math.isnan(scale.level):
            return Judged(p, t.mean - scale.level, math.inf, "slow", t.outliers)
        llr = self._evidence([p], scale)
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

    def _witnessed(self, per_partner: Mapping[int, list[PairFigure]], scale: Scale) -> list[int] | None:
        """The cleared partners that witness a node slow, or None when it is not to be named: two witnesses
        (without its strongest partner the rest still says "slow" on its own: one bad path convicts
        nobody), and all of it passes the node's share of the error budget."""
        if len(per_partner) < 2 or math.isnan(scale.level):
            return None
        every = [p for found in per_partner.values() for p in found]
        rest = min(
            self._evidence([p for q, found in per_partner.items() if q != partner for p in found], scale)
            for partner in per_partner
        )
        if self._evidence(every, scale) < self.name_llr or rest < self.witness_llr:
            return None
        return sorted(q for q, found in per_partner.items() if self._evidence(found, scale) > 0)

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
        by_node = _by_node(judged)
        # a fast pair clears its nodes where it read steadily: one with an outlier may be a flapping node's
        # pair that happened to read slow once only
        cleared = {n for j in judged if j.verdict == "fast" and not j.outliers for n in (j.pair.a, j.pair.b)}
        for node, mine in by_node.items():
            steady = [j.pair for j in mine if j.verdict != "flapping"]
            if node not in cleared and steady and self._evidence(steady, scale) <= self.clear_llr:
                cleared.add(node)
        for _ in range(len(by_node)):
            reopened = set()
            for node in cleared:
                mine = [j for j in by_node.get(node, []) if j.pair.other(node) in cleared]
                against = {j.pair.other(node) for j in mine if j.verdict in ("slow", "flapping")}
                rest = [j.pair for j in mine if j.verdict not in ("slow", "flapping")]
                doubted = len(against) >= 2 or (against and rest and self._evidence(rest, scale) > 0)
                # all of them together, the slow and flapping ones included, still clear it: the test of
                # the node itself, which one pair's chance reading does not undo (Wald's lower boundary)
                if doubted and self._evidence([j.pair for j in mine], scale) > self.clear_llr:
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
        by_node = _by_node(judged)
        witnesses: dict[int, list[int]] = {}
        for node in sorted(measured - cleared):
            per_partner: dict[int, list[PairFigure]] = {}
            for j in by_node[node]:
                if j.pair.other(node) in cleared:
                    per_partner.setdefault(j.pair.other(node), []).append(j.pair)
            found = self._witnessed(per_partner, scale)
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
            key: self._evidence([j.pair for j in found], scale)
            for key, found in sorted(per_path.items())
            if set(key) <= cleared
            and any(j.verdict == "slow" for j in found)
            and all(j.verdict in ("slow", "undecided") for j in found)
        }
        path_llr = self.path_llr(len(per_path))
        confirmed = {n for n, others in fast_with.items() if len(others) >= 2}
        named_paths = [
            key
            for key, llr in slow_paths.items()
            if llr >= path_llr
            and set(key) <= confirmed
            and self._replicated([j.pair for j in per_path[key]], scale)
            and self._below_ends(key, by_node, cleared, scale)
        ]
        open_paths = [key for key in slow_paths if key not in named_paths]
        left = measured - cleared - set(witnesses)

        def against(node: int) -> list[PairFigure]:
            # its pairs with cleared partners: the witnesses it would be named on
            return [j.pair for j in by_node[node] if j.pair.other(node) in cleared]

        def leans_slow(node: int) -> bool:
            # its pairs with nodes not named: a pair with a named node says nothing of this one
            mine = [j for j in by_node[node] if j.pair.other(node) not in witnesses]
            steady = [j.pair for j in mine if j.verdict != "flapping"]
            return any(j.verdict in ("slow", "flapping") for j in mine) or self._evidence(steady, scale) > 0

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
                or self._evidence(against(n), scale) >= self.witness_llr
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
        return min(self._evidence([p for p in path if p.round != r], scale) for r in rounds) >= self.witness_llr

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
            if self._llr(statistics.fmean(logs) - statistics.fmean(others), variance, scale.effect) < self.witness_llr:
                return False
        return True

    # -- the rounds -------------------------------------------------------------------------------------

    def _first(self, number: int) -> Round:
        """Every node in one pair; the hinted paths measured as well, their nodes first paired elsewhere."""
        hinted: list[int] = []
        for a, b in self.hint:
            hinted += [n for n in (a, b) if n not in hinted and 0 <= n < self.nodes]
        others = [n for n in range(self.nodes) if n not in hinted]
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
        for a, b in self.hint:
            if a != b and {a, b} <= set(range(self.nodes)) and not {a, b} & used and frozenset((a, b)) not in met:
                second.append((a, b))
                used.update((a, b))
                met.add(frozenset((a, b)))
        if len(order) % 2:
            last = order[-1]
            partner = next((n for n in order[:-1] if n not in used), None)
            if partner is not None and last not in used:
                second.append((last, partner))
        steps = (step, tuple(second)) if second else (step,)
        return Round(number, "pairs", steps, self.repeats, census=True, hint=self.hint)

    def _again(self, number: int) -> Round | None:
        st = self.status()
        met = {frozenset((p.a, p.b)) for p in self.pairs}
        if len(self.rounds) == 1 and not st.slow and not st.culprits:
            # nothing slow in round 1: the fabric, a bound set too high, or a slow path not paired yet; a
            # new partner for every node measures other paths, and the level from twice the pairs
            step = _matching(list(range(self.nodes)), met, prefer=set(st.cleared))
            return Round(number, "pairs", (tuple(step),), self.repeats, census=True) if step else None
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
        firm = self._firm(st)
        partners = [n for n in st.cleared if n in firm] + [n for n in st.cleared if n not in firm]
        for s in range(self._partners(st.scale)):
            # cleared partners first; with too few, nodes that lean healthy (not suspects) before suspects
            step = _with_partners(todo, partners + leaning, met, rotate + s * 104729, len(firm) or len(partners))
            for a, b in list(paths):  # a slow path not yet decisive, once, where both its nodes are free
                if not {a, b} & {n for pair in step for n in pair}:
                    step.append((a, b))
                    paths.remove((a, b))
            if step:
                steps.append(tuple(step))
                met |= {frozenset(p) for p in step}
        steps += _paths_again(paths, steps)
        if not steps and st.suspects:
            return self._repeat(number, st)
        return Round(number, "pairs", tuple(steps), self.repeats) if steps else None

    def _repeat(self, number: int, st: Status) -> Round | None:
        """Nodes left open that have met every node they could (a few nodes): their pairs read again, and
        the census's first step with them (the level's sample, no pair chosen for what it read): more
        readings where no new partner is left, at most ``MAX_STEPS`` steps."""
        first = next((r for r in self.rounds if r.census), None)
        if first is None or not first.steps[0]:
            return None
        steps: list[tuple[Pair, ...]] = [first.steps[0]]
        done = {frozenset(p) for p in first.steps[0]}
        todo: list[Pair] = []
        for node in st.suspects:
            for p in self.pairs:
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
        return Round(number, "pairs", tuple(steps), self.repeats, census=True)

    def _firm(self, st: Status) -> set[int]:
        """The cleared nodes whose pairs together stay past ``clear_llr`` however one more pair reads slow."""
        by_node = _by_node(st.judged)
        return {
            n
            for n in st.cleared
            if self._evidence([j.pair for j in by_node.get(n, [])], st.scale) <= self.clear_llr - self.witness_llr
        }

    def _partners(self, scale: Scale) -> int:
        """The partners each open node meets in a round: two witnesses, or as many as a healthy node needs
        for its pairs together to clear it (two standard deviations past ``clear_llr``) where one pair says
        little against the noise, at most ``MAX_STEPS``."""
        variance = scale.sigma**2 / self.repeats + scale.level_var
        per_pair = scale.effect**2 / (2 * variance)  # a healthy pair's expected evidence, -llr
        if not per_pair > 0:
            return 2
        # k pairs give -k I with a standard deviation of sqrt(2 k I): k I >= (sqrt 2 + sqrt(2 + |clear|))^2
        needed = (math.sqrt(2) + math.sqrt(2 - self.clear_llr)) ** 2 / per_pair
        return max(2, min(MAX_STEPS, math.ceil(needed)))

    def _rail_pairs(self) -> list[Pair]:
        st = self.status()
        if self.nodes == 2:
            return [(0, 1)] if self.pairs else []
        met = {frozenset((p.a, p.b)) for p in self.pairs}
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
        if not pairs and not st.held and not st.untested and not st.too_noisy:
            # nobody stands out: every pair alike. One pair of cleared nodes' rails tells a rail slow on every
            # node (that rail's switch or cabling) from a fabric slow as a whole
            census = next((r.steps[0] for r in self.rounds if r.census), ())
            pairs = [p for p in census if set(p) <= set(st.cleared)][:1]
        return pairs

    # -- the verdict ------------------------------------------------------------------------------------

    @property
    def culprits(self) -> list[int]:
        return [] if self.nodes == 2 else self.status().culprits

    def label(self, node: int) -> str:
        host = self.hosts.get(node)
        return f"node {node} (host {host})" if host else f"node {node}"

    def message(self) -> str:
        """One line: who is to blame, on what evidence, and the rail that stands below the others."""
        st = self.status()
        head = f"isolation ({len(self.rounds)} round{'s' * (len(self.rounds) != 1)}"
        if self.pairs and not math.isnan(st.level):
            head += (
                f"; healthy pair {st.level:.3g} GB/s, noise {st.sigma:.0%} a reading, "
                f"naming {math.exp(st.scale.effect):.2g}x and slower"
            )
        head += "): "
        parts: list[str] = []
        if self.nodes == 2 and self.pairs:
            parts.append(self._pair_of_two())
        else:
            culprits = self.culprits
            if len(culprits) <= 3:
                parts += [self._culprit(node, st) for node in culprits]
            else:
                parts.append(
                    f"{len(culprits)} nodes slow with two or more cleared partners each: "
                    + _names([f"{self.label(n)} {self._node_gbps(n, st):.3g} GB/s" for n in culprits])
                )
            if len(st.paths) <= 3:
                parts += [
                    f"the path {self.label(a)} <-> {self.label(b)} at {self._path_gbps(a, b):.3g} GB/s "
                    "while both are fast with others" + self._rail_text(a, b)
                    for a, b in st.paths
                ]
            else:
                parts.append(
                    f"{len(st.paths)} paths slow between nodes fast with others: "
                    + _names([f"{a} <-> {b}" for a, b in st.paths])
                )
            left = st.held + st.untested
            if left and self.pairs:
                parts.append(
                    f"not resolved in {len(self.rounds)} rounds (slow pairs, too few cleared witnesses): "
                    + _names([self.label(n) for n in left])
                )
            noisy = {n: s for n, s in st.scale.noise.noisy.items() if n not in culprits}
            if noisy:
                # wider spread, not slower: judged at its own noise, never named or drained for it
                parts.append(
                    _names([f"{self.label(n)} noisy ({s:.0%} a reading)" for n, s in sorted(noisy.items())])
                    + f" against {st.sigma:.0%} for the rest: judged at its own noise, not slow"
                )
            if st.too_noisy and self.pairs:
                # leaning slow on evidence no stronger than the noise gives a healthy node: nobody to list
                parts.append(
                    f"too noisy to judge {len(st.too_noisy)} node{'s' * (len(st.too_noisy) != 1)} in "
                    f"{len(self.rounds)} rounds (noise {st.sigma:.0%} a reading; none slow past its witnesses)"
                )
            if not parts and self.pairs:
                parts.append(self._nobody(st))
        if self.error is not None:
            parts.append(f"round {len(self.rounds)} failed: {self.error}")
        return head + (" | ".join(parts) or "nothing measured")

    def _node_gbps(self, node: int, st: Status) -> float:
        mine = [j.pair.gbps for j in st.judged if j.pair.has(node) and j.pair.other(node) in st.witnesses.get(node, [])]
        return statistics.median(mine) if mine else math.nan

    def _path_gbps(self, a: int, b: int) -> float:
        return min((p.gbps for p in self.pairs if {p.a, p.b} == {a, b}), default=math.nan)

    def _culprit(self, node: int, st: Status) -> str:
        mine = [j for j in st.judged if j.pair.has(node) and j.pair.other(node) in st.cleared]
        slow = [j.pair.gbps for j in mine if j.verdict == "slow"]
        partners = ", ".join(str(n) for n in st.witnesses[node])
        return (
            f"{self.label(node)}: {len(slow)} of {len(mine)} pairs with cleared partners ({partners}) "
            f"at {_span(slow)} GB/s against {st.level:.3g} healthy" + self._rail_text(node)
        )

    def _pair_of_two(self) -> str:
        figures = [f for p in self.pairs for f in p.figures]
        return (
            f"{self.label(0)} and {self.label(1)}: their pair at {_span(figures)} GB/s; "
            "two nodes can only blame their pair, not one node: which end is slow takes a third node's "
            "reading" + self._rail_text(0, 1)
        )

    def _nobody(self, st: Status) -> str:
        figures = [p.gbps for p in self.pairs]
        line = (
            f"no node stands out: {len(figures)} pairs at {_span(figures)} GB/s, none named at "
            f"{self.fraction:g} x the healthy level; every node shares the fault (a switch, the fabric) "
            "or the bound is too high"
        )
        ends = sorted({n for k in self.rails for n in (k["src_node"], k["dst_node"])})
        below = [set(self.slow_rails(n)) for n in ends]
        if ends and below[0] and all(b == below[0] for b in below):
            # the same rail below the others on every node measured, while every pair reads alike
            gpus = ", ".join(f"GPU {g} <-> GPU {g}" for g in sorted(below[0]))
            line += f"; rail {gpus} below the other rails on every node measured ({len(ends)}): that rail on every node"
        return line + self._rail_text(*ends) if ends and not below[0] else line

    def slow_rails(self, node: int) -> dict[int, float]:
        """The rails of ``node`` (GPU index -> its slower direction's GB/s) that stand below its other
        rails: both directions under the midpoint to ``fraction`` x the others' median, by the same test as
        a pair (one reading a direction)."""
        per_rail: dict[int, list[float]] = {}
        for k in self.rails:
            if node in (k["src_node"], k["dst_node"]):
                per_rail.setdefault(int(k["src_gpu"]), []).append(float(k["gbps"]))
        if len(per_rail) < 2:
            return {}
        sigma, effect = self.status().sigma, self.effect
        out: dict[int, float] = {}
        threshold = math.log((1 - BETA) * len(per_rail) / WITNESS_ALPHA)
        for gpu, figures in per_rail.items():
            others = [f for g, fs in per_rail.items() if g != gpu for f in fs if f > 0 and math.isfinite(f)]
            if not others:
                continue
            ref = math.log(statistics.median(others))
            bad = [f for f in figures if not (f > 0 and math.isfinite(f))]
            logs = [math.log(f) - ref for f in figures if f > 0 and math.isfinite(f)]
            llr = math.inf if bad else sum(self._llr(x, sigma**2, effect) for x in logs)
            if llr >= threshold:
                out[gpu] = min(figures)
        return out

    def _rail_text(self, *nodes: int) -> str:
        mine = [k for k in self.rails if {k["src_node"], k["dst_node"]} & set(nodes)]
        if not mine:
            return ""
        worst = min(mine, key=lambda k: k["gbps"] if not math.isnan(k["gbps"]) else -1.0)
        where = f"{endpoint(worst, 'src')} -> {endpoint(worst, 'dst')}"
        gpus = {int(k["src_gpu"]) for k in mine}
        if len(gpus) == 1:
            rail = f"GPU {worst['src_gpu']} <-> GPU {worst['dst_gpu']}"
            return f"; rail {rail} at {worst['gbps']:.3g} GB/s ({where}), the only rail"
        below = {g: f for n in nodes for g, f in self.slow_rails(n).items()}
        way = self._direction(nodes[0], mine) if nodes else ""
        if below and len(below) < len(gpus):
            named = ", ".join(f"GPU {g} <-> GPU {g} ({f:.3g} GB/s)" for g, f in sorted(below.items()))
            others = stats.median(float(k["gbps"]) for k in mine if int(k["src_gpu"]) not in below)
            return f"; rail {named} below the node's other rails ({others:.3g} GB/s median; slowest {where})" + way
        return (
            f"; rail GPU {worst['src_gpu']} <-> GPU {worst['dst_gpu']} slowest ({worst['gbps']:.3g} GB/s, {where}) "
            "but not below the others" + way
        )

    def _direction(self, node: int, mine: Sequence[Link]) -> str:
        """Where the node's rails are slow one way only: sending or receiving, by the test of a pair (the
        median of each direction's rails against the other's). Two nodes: the slow direction between them,
        which of the two ends it is takes a third node."""
        sent = [
            math.log(k["gbps"]) for k in mine if k["src_node"] == node and k["gbps"] > 0 and math.isfinite(k["gbps"])
        ]
        got = [
            math.log(k["gbps"]) for k in mine if k["dst_node"] == node and k["gbps"] > 0 and math.isfinite(k["gbps"])
        ]
        if not sent or not got:
            return ""
        gap = stats.median(got) - stats.median(sent)  # > 0: its sends slower than what it receives
        sigma = self.status().sigma
        variance = math.pi / 2 * sigma**2 * (1 / len(sent) + 1 / len(got))
        if self._llr(-abs(gap), variance, self.effect) < self.witness_llr:
            return ""
        out, into = math.exp(stats.median(sent)), math.exp(stats.median(got))
        if self.nodes == 2:
            return f"; slow one way only: {out:.3g} GB/s from node {node}, {into:.3g} GB/s to it"
        return f"; slow when it {'sends' if gap > 0 else 'receives'} ({out:.3g} GB/s out, {into:.3g} GB/s in)"

    def evidence(self) -> IsolationEvidence:
        st = self.status()
        cells: dict[frozenset[int], float] = {}
        for p in self.pairs:
            key = frozenset((p.a, p.b))
            cells[key] = min(p.gbps, cells.get(key, math.inf))
        return {
            "message": self.message(),
            "rounds": [r.spec() for r in self.rounds],
            "pairs": [
                {
                    "a": j.pair.a,
                    "b": j.pair.b,
                    "gbps": j.pair.gbps,
                    "repeats_gbps": list(j.pair.figures),
                    "wrong": j.pair.wrong,
                    "round": j.pair.round,
                    "log_ratio": j.log_ratio,
                    "outliers": j.outliers,
                    "llr": j.llr,
                    "verdict": j.verdict,
                }
                for j in st.judged
            ],
            "pair_matrix": {
                "labels": [self.label(n) for n in range(self.nodes)],
                "matrix": [[cells.get(frozenset((a, b))) for b in range(self.nodes)] for a in range(self.nodes)],
                "unit": "busbw_gbps",
            },
            "healthy_gbps": st.level,
            "slow_under_gbps": st.level * math.exp(st.scale.effect / 2),
            "slow_pair_fraction": self.fraction,
            "noise_sigma": st.sigma,
            "noise_dof": st.scale.dof,
            "noisy": {str(n): s for n, s in sorted(st.scale.noise.noisy.items())},
            "outliers": sum(j.outliers for j in st.judged),
            "outlier_cut": st.scale.noise.cut,
            "noise_by_round": list(self.noise_by_round),
            "named_fraction": math.exp(st.scale.effect),
            "resolution": math.exp(st.scale.resolution),
            "repeats": self.repeats,
            "alpha": self.alpha,
            "name_llr": self.name_llr,
            "witness_llr": self.witness_llr,
            "clear_llr": self.clear_llr,
            "cleared": st.cleared,
            "culprits": self.culprits,
            "hosts": {str(n): h for n, h in sorted(self.hosts.items())},
            "witnesses": {str(n): w for n, w in st.witnesses.items()},
            "paths": [list(p) for p in st.paths],
            "flapping": [[j.pair.a, j.pair.b] for j in st.flapping],
            "undecided": st.undecided,
            "suspects": st.suspects,
            "too_noisy": st.too_noisy,
            "untested": st.untested,
            "hint": [list(p) for p in self.hint],
            "rails": self.rails,
            "rail_matrices": matrices(self.rails, "gpu"),
            "slow_rails": {
                str(n): sorted(self.slow_rails(n)) for n in sorted({*self.culprits, *(x for p in st.paths for x in p)})
            },
            "error": self.error,
        }


def _by_node(judged: Iterable[Judged]) -> dict[int, list[Judged]]:
    """Each node's judged pairs."""
    out: dict[int, list[Judged]] = {}
    for j in judged:
        out.setdefault(j.pair.a, []).append(j)
        out.setdefault(j.pair.b, []).append(j)
    return out


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


def _names(items: Iterable[str]) -> str:
    listed = list(items)
    shown = ", ".join(listed[:MESSAGE_NAMES])
    return shown + (
        f" and {len(listed) - MESSAGE_NAMES} more (all in the evidence)" if len(listed) > MESSAGE_NAMES else ""
    )


def _span(values: list[float]) -> str:
    usable = [v for v in values if not math.isnan(v)]
    if not usable:
        return "nan"
    lo, hi = min(usable), max(usable)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"
