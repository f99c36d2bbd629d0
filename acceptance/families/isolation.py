"""Naming the culprit when a figure across nodes fails. Torch-free: node ids and figures in; the rounds to
run, who is suspect, who is to blame and the one line that says so out.

Each round is one job over every node; the pairs of a step run at once, the steps of a round one after
the other in the same job. Nodes are numbered 0..N-1 (the nodes' own ranks, stable from job to job).

1. Every node in disjoint pairs; with N odd the node left over meets node 0 in a second step.
2. Each suspect (a node only in slow pairs) and each node not yet measured meets a known-good node (one
   that was in a fast pair): slow with a good partner makes it the culprit, fast clears it. With no good
   node to spare, suspects meet each other in pairs not measured yet; when every pair of round 1 was
   alike, every node meets a new partner. Repeated while that still resolves someone, at most
   ``MAX_PAIR_ROUNDS`` pair rounds in all.
3. The culprit's rails (GPU i <-> GPU i) against a good node it has not met, every rail at once, both
   directions, so the slowest rail is named. Two nodes can only blame their pair: their rails are measured.

A pair is slow when its figure is under ``fraction`` x the best pair's (relative, so one bound serves any
fabric; the best pair is the healthy reference), or when its data came back wrong. One slow node is named
in at most 3 rounds whatever N is: one pair round, one re-pairing, one rail round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from typing_extensions import NotRequired

from acceptance.families.collectives import GroupFigure
from acceptance.families.links import Link, Matrix, endpoint, matrices

Pair = tuple[int, int]
# the node's own rank, which the plugin hands to every job of an isolation: torchrun's GROUP_RANK is
# assigned anew by each rendezvous, so it cannot say which machine round 2's "node 3" is
NODE_ENV = "ACCEPTANCE_NODE_RANK"
MAX_PAIR_ROUNDS = 3  # one slow node needs 2; a third resolves the odd-sized worst case (N = 3, node 0 slow)


class RoundSpec(TypedDict):
    number: int
    kind: str
    steps: list[list[list[int]]]  # per step, its node pairs


class IsolationConfig(TypedDict):
    """An isolation round's section of its probe's spec (``acceptance.run.isolation_rounds.round_spec``)."""

    round: RoundSpec
    op: str
    size: str
    iters: int


class PairRow(GroupFigure):
    """One node pair's figure in a pairs round: its collective's busbw is its ``gbps``."""

    a: int
    b: int
    gbps: float


class RoundResult(TypedDict):
    """An isolation round's probe result: ``pairs`` in a pairs round, ``links`` in a rails round."""

    round: int
    kind: str
    hosts: dict[int, str]
    pairs: NotRequired[list[PairRow]]
    links: NotRequired[list[Link]]


class PairRecord(TypedDict):
    """A PairFigure in the evidence: its fields."""

    a: int
    b: int
    gbps: float
    wrong: int
    round: int


class IsolationEvidence(TypedDict):
    message: str
    rounds: list[RoundSpec]
    pairs: list[PairRecord]
    pair_matrix: Matrix
    slow_under_gbps: float
    fraction_of_best: float
    good: list[int]
    culprits: list[int]
    suspects: list[int]
    untested: list[int]
    rails: list[Link]
    rail_matrices: dict[str, Matrix]
    error: str | None


@dataclass(frozen=True)
class PairFigure:
    a: int
    b: int
    gbps: float
    wrong: int = 0
    round: int = 0

    def has(self, node: int) -> bool:
        return node in (self.a, self.b)

    def other(self, node: int) -> int:
        return self.b if node == self.a else self.a


@dataclass(frozen=True)
class Round:
    number: int
    kind: str  # "pairs": a collective inside each node pair; "rails": every rail of each pair, both directions
    steps: tuple[tuple[Pair, ...], ...]

    def spec(self) -> RoundSpec:
        return {"number": self.number, "kind": self.kind, "steps": [[list(p) for p in step] for step in self.steps]}


@dataclass(frozen=True)
class Status:
    limit: float  # a pair under this many GB/s is slow
    slow: list[PairFigure]
    fast: list[PairFigure]
    good: list[int]
    culprits: list[int]
    suspects: list[int]  # only in slow pairs, and not explained by a culprit
    untested: list[int]


@dataclass
class Isolation:
    nodes: int
    fraction: float
    hosts: dict[int, str] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    pairs: list[PairFigure] = field(default_factory=list)
    rails: list[Link] = field(default_factory=list)
    error: str | None = None

    def next_round(self) -> Round | None:
        """The round to run now, or None when the verdict is in."""
        number = len(self.rounds) + 1
        if self.error is not None or self.nodes < 2 or any(r.kind == "rails" for r in self.rounds):
            return None
        if not self.rounds:
            step = tuple((a, a + 1) for a in range(0, self.nodes - 1, 2))
            odd = ((self.nodes - 1, 0),) if self.nodes % 2 else ()
            return Round(number, "pairs", (step, odd) if odd else (step,))
        if self.nodes > 2 and len(self.rounds) < MAX_PAIR_ROUNDS:
            repair = self._repairing()
            if repair:
                return Round(number, "pairs", (tuple(repair),))
        rails = self._rail_pairs()
        return Round(number, "rails", (tuple(rails),)) if rails else None

    def record(self, rnd: Round, result: Mapping[str, Any]) -> None:
        """A round's probe result: ``hosts`` {node: host}; ``pairs`` [{a, b, gbps, wrong}] or ``links``."""
        self.rounds.append(rnd)
        self.hosts.update({int(k): str(v) for k, v in result.get("hosts", {}).items()})
        if rnd.kind == "pairs":
            self.pairs += [
                PairFigure(int(p["a"]), int(p["b"]), float(p["gbps"]), int(p.get("wrong", 0)), rnd.number)
                for p in result["pairs"]
            ]
        else:
            # a link of the round's result (JSON), renumbered with the isolation's round
            self.rails += [cast(Link, {**link, "round": rnd.number}) for link in result["links"]]

    def fail(self, rnd: Round, error: str) -> None:
        self.rounds.append(rnd)
        self.error = error.strip().splitlines()[0] if error.strip() else "no result"

    def status(self) -> Status:
        best = max((p.gbps for p in self.pairs if not math.isnan(p.gbps)), default=0.0)
        limit = self.fraction * best
        slow = [p for p in self.pairs if p.wrong or not p.gbps >= limit]
        fast = [p for p in self.pairs if p not in slow]
        good = {n for p in fast for n in (p.a, p.b)}
        measured = {n for p in self.pairs for n in (p.a, p.b)}
        culprits = {n for n in measured - good if any(p.has(n) and p.other(n) in good for p in slow)}
        explained = {n for n in measured - good - culprits if all(p.other(n) in culprits for p in slow if p.has(n))}
        return Status(
            limit=limit,
            slow=slow,
            fast=fast,
            good=sorted(good),
            culprits=sorted(culprits),
            suspects=sorted(measured - good - culprits - explained),
            untested=sorted(set(range(self.nodes)) - measured),
        )

    def _repairing(self) -> list[Pair]:
        st = self.status()
        slow_count = {n: sum(p.has(n) for p in st.slow) for n in range(self.nodes)}
        todo = sorted(st.suspects + st.untested, key=lambda n: (-slow_count[n], n))
        if not st.slow and len(self.rounds) == 1:
            # every pair alike: the fabric, or a slow node in every pair (N = 3, or one per pair); new
            # partners tell the two apart
            todo = list(range(self.nodes))
        met = {frozenset((p.a, p.b)) for p in self.pairs}
        used: set[int] = set()
        pairs = []
        for node in todo:
            if node in used:
                continue
            # a good partner first: a suspect has met no good node yet, or it would be culprit or cleared
            for partner in [*st.good, *todo]:
                if partner != node and partner not in used and frozenset((node, partner)) not in met:
                    pairs.append((node, partner))
                    used.update((node, partner))
                    break
        return pairs

    def _rail_pairs(self) -> list[Pair]:
        st = self.status()
        if self.nodes == 2:
            return [(0, 1)] if self.pairs else []
        met = {frozenset((p.a, p.b)) for p in self.pairs}
        used: set[int] = set()
        pairs = []
        for node in st.culprits:
            spare = [g for g in st.good if g not in used]
            # a good node it has not met yet: one more partner for the verdict, and the rails' own figure
            fresh = [g for g in spare if frozenset((node, g)) not in met] or spare
            if fresh and node not in used:
                pairs.append((node, fresh[0]))
                used.update((node, fresh[0]))
        for p in self._odd_paths(st):
            if not used & {p.a, p.b}:
                pairs.append((p.a, p.b))
                used.update((p.a, p.b))
        return pairs

    def _odd_paths(self, st: Status) -> list[PairFigure]:
        """Slow pairs of two good nodes: the path between them, not either node."""
        return [p for p in st.slow if p.a in st.good and p.b in st.good]

    @property
    def culprits(self) -> list[int]:
        return [] if self.nodes == 2 else self.status().culprits

    def label(self, node: int) -> str:
        host = self.hosts.get(node)
        return f"node {node} (host {host})" if host else f"node {node}"

    def message(self) -> str:
        """One line: who is to blame, on what evidence, and the slowest rail."""
        st = self.status()
        head = f"isolation ({len(self.rounds)} round{'s' * (len(self.rounds) != 1)}): "
        if self.nodes == 2 and self.pairs:
            parts = [self._pair_of_two()]
        else:
            parts = [self._culprit(node, st) for node in st.culprits]
            parts += [
                f"the path {self.label(p.a)} <-> {self.label(p.b)} at {p.gbps:.3g} GB/s while both are fast with others"
                + self._rail_text(p.a, p.b)
                for p in self._odd_paths(st)
            ]
            if st.suspects or (st.untested and self.pairs):
                left = ", ".join(self.label(n) for n in st.suspects + st.untested)
                parts.append(f"not resolved in {len(self.rounds)} rounds: {left}")
            if not parts and self.pairs:
                parts.append(self._nobody(st))
        if self.error is not None:
            parts.append(f"round {len(self.rounds)} failed: {self.error}")
        return head + (" | ".join(parts) or "nothing measured")

    def _culprit(self, node: int, st: Status) -> str:
        mine = [p for p in self.pairs if p.has(node)]
        slow = [p.gbps for p in st.slow if p.has(node)]
        elsewhere = min((p.gbps for p in st.fast), default=math.nan)
        return (
            f"{self.label(node)}: {len(slow)} of {len(mine)} pairs with it at {_span(slow)} GB/s "
            f"against >= {elsewhere:.3g} elsewhere" + self._rail_text(node)
        )

    def _pair_of_two(self) -> str:
        figures = [p.gbps for p in self.pairs]
        return (
            f"{self.label(0)} and {self.label(1)}: their pair at {_span(figures)} GB/s; "
            "two nodes can only blame their pair, not one node" + self._rail_text(0, 1)
        )

    def _nobody(self, st: Status) -> str:
        figures = [p.gbps for p in self.pairs]
        return (
            f"no node stands out: {len(figures)} pairs at {_span(figures)} GB/s, none under "
            f"{self.fraction:g} x the best; every node shares the fault (a switch, the fabric) or the bound is too high"
        )

    def _rail_text(self, *nodes: int) -> str:
        mine = [k for k in self.rails if {k["src_node"], k["dst_node"]} & set(nodes)]
        if not mine:
            return ""
        worst = min(mine, key=lambda k: k["gbps"] if not math.isnan(k["gbps"]) else -1.0)
        return (
            f"; rail GPU {worst['src_gpu']} <-> GPU {worst['dst_gpu']} slowest "
            f"({worst['gbps']:.3g} GB/s, {endpoint(worst, 'src')} -> {endpoint(worst, 'dst')})"
        )

    def evidence(self) -> IsolationEvidence:
        st = self.status()
        cells: dict[frozenset[int], float] = {}
        for p in self.pairs:
            key = frozenset((p.a, p.b))
            cells[key] = min(p.gbps, cells.get(key, math.inf))
        return {
            "message": self.message(),
            "rounds": [r.spec() for r in self.rounds],
            "pairs": [{"a": p.a, "b": p.b, "gbps": p.gbps, "wrong": p.wrong, "round": p.round} for p in self.pairs],
            "pair_matrix": {
                "labels": [self.label(n) for n in range(self.nodes)],
                "matrix": [[cells.get(frozenset((a, b))) for b in range(self.nodes)] for a in range(self.nodes)],
                "unit": "busbw_gbps",
            },
            "slow_under_gbps": st.limit,
            "fraction_of_best": self.fraction,
            "good": st.good,
            "culprits": self.culprits,
            "suspects": st.suspects,
            "untested": st.untested,
            "rails": self.rails,
            "rail_matrices": matrices(self.rails, "gpu"),
            "error": self.error,
        }


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"
