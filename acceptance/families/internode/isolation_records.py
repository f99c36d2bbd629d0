"""The isolation rounds' records: the constants of the test, a round and its spec, a pair's figures, a
judged pair, the noise and the scale every pair is judged against, a status, and the JSON shapes of a
round's result and of the evidence (``acceptance.families.internode.isolation`` says what they mean)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypedDict

from typing_extensions import NotRequired

from acceptance.families.collectives import GroupFigure
from acceptance.families.connectivity import Link, Matrix
from acceptance.families.internode.pair_statistics import OUTLIER_Z, Trimmed, trimmed

Pair = tuple[int, int]
# pair rounds: a third and more only while nodes are left open (at high noise); with the rails, at most 6
MAX_PAIR_ROUNDS = 5
# a cluster where nobody stands out ends within this many rounds: its one pair's rails (a rail slow on every
# node) only where the pair rounds took one fewer; one that took more is at a noise where one pair's rails,
# one reading a direction, tell a rail apart in about two trials of three
NOBODY_ROUNDS = 4
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
# a reading counts at most this many noises beyond either hypothesis (the slow one below, the healthy one
# above): Huber's censored probability ratio test (P. J. Huber, "A robust version of the probability ratio
# test", Ann. Math. Statist. 36 (1965) 1753-1758), whose error rates hold when a share of the readings is
# far off, as congestion and retransmits put them on real fabrics; at 2 a normal reading is censored about
# once in 40, and one reading far below weighs as 1 + 2 k sigma / |effect| healthy ones at most (4.5 at 60%
# noise; one at 0.05x weighed 7.6 uncensored there, 26 at 5% noise)
HUBER_K = 2.0
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
    """An isolation round's section of its probe's spec (``acceptance.families.internode.rounds.round_spec``)."""

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
    flapping_nodes: list[int]  # nodes in whose pairs the outliers gather: their pairs judged on every reading
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
    flapping: frozenset[int] = frozenset()  # nodes whose pairs hold the outliers: judged on every reading

    def of(self, p: PairFigure) -> float:
        """The noise of one reading of this pair: its noisier end's."""
        return max(self.sigma, self.noisy.get(p.a, 0.0), self.noisy.get(p.b, 0.0))

    def trim(self, p: PairFigure) -> Trimmed:
        """The pair's readings but its outliers, at its own noise; every reading of a flapping node's pair,
        its outliers counted (they are its fault, not the noise's)."""
        t = trimmed(p.logs, max(self.cut, OUTLIER_Z * self.of(p)))
        return Trimmed(p.logs, t.outliers, t.high) if self.flapping & {p.a, p.b} else t


@dataclass(frozen=True)
class Scale:
    """What every pair is judged against, in log units."""

    level: float  # ln GB/s of a healthy pair
    level_var: float  # the variance of that estimate
    noise: Noise  # the noise of one reading, from the healthy pairs; a noisy node's its own
    effect: float  # the slow hypothesis in use: ln of the slowdown a slow pair is tested against
    resolution: float  # ln of the smallest slowdown two witness pairs tell apart at this noise
    sample: frozenset[PairFigure] = frozenset()  # the pairs the level is the median of

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


def by_node(judged: Iterable[Judged]) -> dict[int, list[Judged]]:
    """Each node's judged pairs."""
    out: dict[int, list[Judged]] = {}
    for j in judged:
        out.setdefault(j.pair.a, []).append(j)
        out.setdefault(j.pair.b, []).append(j)
    return out
