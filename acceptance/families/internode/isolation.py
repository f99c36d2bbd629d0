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

* a pair's reading: its repeats' mean, those further than ``OUTLIER_Z`` x the noise below their median
  set aside as outliers and counted (a retransmit moves a pair by nothing), those as far above counted
  and kept (a fault only slows: it is the pair's pace or noise); two outliers, or one above the rest,
  make the pair flap (``pair_statistics``);
* the noise: the spread of each healthy pair's repeats (pooled over the pairs above the midpoint to
  ``fraction`` x the census median, but those that flap, with an upper confidence bound when few pairs
  were measured: a steady throttled pair never makes the test bolder), never less than ``SIGMA_FLOOR``;
  a noisy node (its pairs spread ``NOISY_RATIO`` x the typical pair's without it, more than its partners',
  with readings spread above the level of the pairs without it, which no fault gives; ``isolation_noise``)
  is judged at its own noise, called noisy, never named; a node in whose pairs the outliers gather (more
  than the rest's rate gives it within ``ALPHA`` / N, its worst partner aside) is flapping, its pairs judged
  on every reading (``isolation_flapping``);
* the healthy level: the median of the census pairs (round 1's first step, where every node is in one
  pair; at 3 nodes every pair), leaving out those decisively slow against a first median; never a
  maximum, which grows with the number of noisy pairs. Where the slow hypothesis in use is milder than
  ``fraction``, the pairs slow at it are left out too, and where one node's pairs can be half the sample
  (two pairs at 4 or 5 nodes) against the faster pairs instead of a median that node sets itself; where
  no node holds half, the kept pairs' censored readings' mean about their median (a median stays put
  where a share of readings falls far below, a node's mean does not). Its own error enters every test
  below, since every pair is compared with the same level;
* every reading weighed censored within ``HUBER_K`` noises beyond either hypothesis (Huber's censored
  probability ratio test): one reading far below weighs as one very slow reading, not as several;
* the slow hypothesis: the mildest slowdown two witness pairs tell apart at this noise (``Scale``), no
  milder than ``mild`` and no bolder than ``fraction`` (the profile's ``slow_pair_fraction``);
* each pair: Wald's sequential probability ratio test between "healthy" (its level) and "slow" (at the
  slow hypothesis x the level), over its
  repeats: a log-likelihood ratio over ``log((1 - BETA) / WITNESS_ALPHA)`` makes the pair slow, under
  ``log(BETA / (1 - ALPHA))`` fast; a pair that flaps is flapping before it is slow, and clears nobody;
* a node is cleared by a fast pair or by its pairs together (those with a partner slow with its other
  partners aside: the partner explains them; those in the level's sample without the error they share
  with it), and re-opened when its pairs with two
  cleared partners are slow (or one is and the rest lean slow), whatever a fast pair said, unless those
  pairs together, the slow ones included, still clear it (a healthy node that met many partners at high
  noise has a slow pair or two by chance: its pairs together are the test of the node); it is named
  only when its pairs with at least two different cleared partners together pass
  ``log((1 - BETA) N / ALPHA)`` (a false-blame rate of ALPHA / N per node, ALPHA for the whole
  cluster: Bonferroni over the N nodes), and without its strongest partner the rest still passes
  ``log((1 - BETA) / WITNESS_ALPHA)`` on its own: two independent witnesses, so one bad path or partner
  convicts nobody (at 3 nodes that rest, one pair, passes the node's threshold: it alone tells the node
  from a slow path to its other partner; so does it where the strongest partner's pairs alone pass the
  paths' threshold);
* a slow pair of two cleared nodes, each fast with two other partners, is their path, not either node,
  named within the paths' own budget (``PATH_ALPHA`` over the node pairs tested), on two rounds'
  readings (a disturbance does not repeat), and only where it also
  stands below each node's pairs with other cleared partners (a node too mildly slow to name is not
  told as its paths);
* a rail is named only when it stands below the node's other rails, by the same test; a node whose rails
  are slow one way only is slow when it sends (or receives); where nobody stands out, one pair's rails
  name a rail slow on every node.

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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from acceptance.families.connectivity import Link
from acceptance.families.internode import isolation_planner as planner
from acceptance.families.internode import isolation_words as words
from acceptance.families.internode.isolation_judge import Judge
from acceptance.families.internode.isolation_records import (
    MAX_PAIR_ROUNDS,
    MESSAGE_NAMES,
    IsolationConfig,
    IsolationEvidence,
    Pair,
    PairFigure,
    PairRow,
    Round,
    RoundResult,
    RoundSpec,
    Status,
)

__all__ = [
    "MAX_PAIR_ROUNDS",
    "MESSAGE_NAMES",
    "Isolation",
    "IsolationConfig",
    "IsolationEvidence",
    "Pair",
    "PairFigure",
    "PairRow",
    "Round",
    "RoundResult",
    "RoundSpec",
    "Status",
]


@dataclass
class Isolation(Judge):
    """The rounds as the plugin drives them: the next round to run, each round's result recorded, and the
    verdict's line and evidence."""

    def next_round(self) -> Round | None:
        """The round to run now, or None when the verdict is in."""
        number = len(self.rounds) + 1
        if self.error is not None or self.nodes < 2 or any(r.kind == "rails" for r in self.rounds):
            return None
        if not self.rounds:
            return planner.first_round(self, number)
        if self.nodes > 2 and len(self.rounds) < MAX_PAIR_ROUNDS:
            found = planner.next_pairs_round(self, number)
            if found is not None:
                return found
        rails = planner.rail_pairs(self)
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

    def message(self) -> str:
        """One line: who is to blame, on what evidence, and the rail that stands below the others."""
        return words.message(self)

    def evidence(self) -> IsolationEvidence:
        return words.evidence(self)

    def slow_rails(self, node: int) -> dict[int, float]:
        """The rails of ``node`` that stand below its other rails (``isolation_words.slow_rails``)."""
        return words.slow_rails(self, node)
