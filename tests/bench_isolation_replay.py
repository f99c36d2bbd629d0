"""The isolation rounds replayed on synthetic clusters: the real ``Isolation.next_round`` / ``record`` that
the plugin drives, fed pair and rail figures drawn from a cluster model instead of jobs. Prints, per noise
level, node count and fault, how often no healthy node was named, precision, recall, the mean rounds and
the largest verdict line; writes the table as markdown. Not a test (the unit tests replay a reduced grid):

    python -m tests.bench_isolation_replay --trials 20 --markdown /tmp/isolation-replay.md

The model: a pair of nodes runs at the pace of its slower node, or of the path between them; every
reading (each repeat of a pair, each direction of a rail) is multiplied by lognormal noise exp(sigma z).
A node with a slow rail runs its pairs at that rail's pace. A flapping node is slow (0.2x) in half its
readings. Before round 1 the failing probe's rails (``links.hypercube_rounds``, one reading each) give the
three slowest node pairs as the isolation's starting hint, as the plugin's connectivity probe does.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.families import connectivity as links
from acceptance.families.internode.isolation import Isolation, Pair, Round

BASE_GBPS = 10.0  # a healthy pair's figure; only ratios matter
GPUS = 8  # rails per node
SLOW_RAIL = 3  # the GPU whose rail is slow in the slow-rail fault
FLAP_FACTOR, FLAP_SHARE = 0.2, 0.5  # a flapping node: 0.2x in half its readings
HINTS = 3  # the failing probe's slowest node pairs handed to round 1
SIGMAS = (0.0, 0.1, 0.3, 0.6)
NODE_COUNTS = (2, 3, 5, 8, 16, 64, 256, 1024)


@dataclass
class Cluster:
    """The truth: per node its pace, per path and per rail their own, and who flaps."""

    nodes: int
    sigma: float
    rng: random.Random
    pace: dict[int, float] = field(default_factory=dict)
    paths: dict[frozenset[int], float] = field(default_factory=dict)
    rails: dict[tuple[int, int], float] = field(default_factory=dict)  # (node, gpu) -> pace
    flapping: set[int] = field(default_factory=set)
    fabric: float = 1.0  # every pair's pace: a fault no node is to blame for

    @property
    def bad(self) -> set[int]:
        """The nodes a verdict should name."""
        return {n for n, p in self.pace.items() if p < 1} | {n for n, _ in self.rails} | self.flapping

    def node_pace(self, node: int) -> float:
        rails = [p for (n, _), p in self.rails.items() if n == node]
        flap = FLAP_FACTOR if node in self.flapping and self.rng.random() < FLAP_SHARE else 1.0
        return min([self.pace.get(node, 1.0), flap, *rails])

    def noise(self) -> float:
        return math.exp(self.sigma * self.rng.gauss(0.0, 1.0))

    def pair(self, a: int, b: int) -> float:
        pace = min(self.node_pace(a), self.node_pace(b), self.paths.get(frozenset((a, b)), 1.0))
        return BASE_GBPS * self.fabric * pace * self.noise()

    def rail(self, a: int, b: int, gpu: int) -> float:
        ends = [self.pace.get(n, 1.0) * self.rails.get((n, gpu), 1.0) for n in (a, b)]
        return BASE_GBPS * self.fabric * min(*ends, self.paths.get(frozenset((a, b)), 1.0)) * self.noise()

    def hint(self) -> tuple[Pair, ...]:
        """The failing probe's slowest node pairs: one reading of each rail pair of its rounds."""
        measured = [(self.pair(a, b), (a, b)) for r in links.hypercube_rounds(self.nodes) for a, b in r]
        return tuple(pair for _, pair in sorted(measured)[:HINTS])


Fault = Callable[[Cluster], None]


def slow_nodes(factor: float, count: Callable[[int], int] = lambda n: 1) -> Fault:
    def apply(c: Cluster) -> None:
        for node in c.rng.sample(range(c.nodes), min(count(c.nodes), c.nodes)):
            c.pace[node] = factor

    return apply


def several(n: int) -> int:
    """Two slow nodes, or 5% of them; at most a quarter of the nodes (then the median is still healthy)."""
    return max(1, min(max(2, round(0.05 * n)), n // 4))


def slow_path(factor: float) -> Fault:
    """One path slow; one the failing probe measured (else it would not have failed)."""

    def apply(c: Cluster) -> None:
        c.paths[frozenset(c.rng.choice([p for r in links.hypercube_rounds(c.nodes) for p in r]))] = factor

    return apply


def slow_rail(factor: float) -> Fault:
    def apply(c: Cluster) -> None:
        c.rails[(c.rng.randrange(c.nodes), SLOW_RAIL)] = factor

    return apply


def fabric(factor: float) -> Fault:
    def apply(c: Cluster) -> None:
        c.fabric = factor

    return apply


def flapping(c: Cluster) -> None:
    c.flapping.add(c.rng.randrange(c.nodes))


def healthy(c: Cluster) -> None:
    """No fault: a bound set too high."""


FAULTS: dict[str, Fault] = {
    "no fault": healthy,
    "fabric 0.5x": fabric(0.5),
    "1 node 0.5x": slow_nodes(0.5),
    "1 node 0.2x": slow_nodes(0.2),
    "1 node 0.01x": slow_nodes(0.01),
    "2+ nodes 0.5x": slow_nodes(0.5, several),
    "2+ nodes 0.2x": slow_nodes(0.2, several),
    "path 0.2x": slow_path(0.2),
    "rail 0.2x": slow_rail(0.2),
    "flapping 0.2x": flapping,
}


@dataclass(frozen=True)
class Trial:
    named: frozenset[int]
    bad: frozenset[int]
    rounds: int
    message_bytes: int
    path_named: bool  # a slow path named as a path (False where there is none)
    rail_named: bool  # the slow rail named (False where there is none)

    @property
    def blamed_healthy(self) -> bool:
        return bool(self.named - self.bad)


def measure(cluster: Cluster, rnd: Round) -> dict[str, object]:
    """A round's result as the probe writes it, from the cluster model."""
    hosts = {n: f"n{n}" for n in range(cluster.nodes)}
    if rnd.kind == "pairs":
        readings: dict[Pair, list[float]] = {}
        for _ in range(rnd.repeats):  # interleaved: every step once, then again
            for step in rnd.steps:
                for a, b in step:
                    readings.setdefault((a, b), []).append(cluster.pair(a, b))
        rows = [
            {"a": a, "b": b, "gbps": sorted(f)[len(f) // 2], "repeats_gbps": f, "wrong": 0}
            for (a, b), f in readings.items()
        ]
        return {"hosts": hosts, "pairs": rows}
    found = []
    for step in rnd.steps:
        for a, b in step:
            for gpu in range(GPUS):
                for src, dst in ((a, b), (b, a)):
                    found.append(
                        {
                            "src": src * GPUS + gpu,
                            "dst": dst * GPUS + gpu,
                            "src_node": src,
                            "dst_node": dst,
                            "src_gpu": gpu,
                            "dst_gpu": gpu,
                            "src_host": f"n{src}",
                            "dst_host": f"n{dst}",
                            "gbps": cluster.rail(src, dst, gpu),
                            "wrong": 0,
                            "round": rnd.number,
                        }
                    )
    return {"hosts": hosts, "links": found}


def replay(cluster: Cluster, fraction: float, hint: bool = True) -> Isolation:
    """The plugin's loop (``acceptance.run.isolation_rounds.isolate``) with the model for the jobs."""
    iso = Isolation(cluster.nodes, fraction, hint=cluster.hint() if hint and cluster.nodes > 2 else ())
    while (rnd := iso.next_round()) is not None:
        iso.record(rnd, measure(cluster, rnd))
    return iso


def trial(nodes: int, sigma: float, fault: Fault, seed: int, fraction: float = 0.5) -> Trial:
    cluster = Cluster(nodes, sigma, random.Random(seed))
    fault(cluster)
    iso = replay(cluster, fraction)
    named = frozenset(iso.culprits)
    st = iso.status()
    true_paths = {tuple(sorted(p)) for p in cluster.paths}
    rail_nodes = {n for n, _ in cluster.rails}
    return Trial(
        named=named,
        bad=frozenset(cluster.bad),
        rounds=len(iso.rounds),
        message_bytes=len(iso.message().encode()),
        path_named=bool(true_paths) and bool(true_paths & {tuple(sorted(p)) for p in st.paths}),
        rail_named=bool(rail_nodes) and all(SLOW_RAIL in iso.slow_rails(n) for n in rail_nodes & named),
    )


@dataclass(frozen=True)
class Cell:
    sigma: float
    nodes: int
    fault: str
    trials: list[Trial]

    @property
    def clean(self) -> float:
        """The share of trials that named no healthy node."""
        return sum(not t.blamed_healthy for t in self.trials) / len(self.trials)

    @property
    def precision(self) -> float:
        named = sum(len(t.named) for t in self.trials)
        return sum(len(t.named & t.bad) for t in self.trials) / named if named else math.nan

    @property
    def recall(self) -> float:
        bad = sum(len(t.bad) for t in self.trials)
        return sum(len(t.named & t.bad) for t in self.trials) / bad if bad else math.nan

    @property
    def false_blame(self) -> float:
        """Healthy nodes named over healthy nodes, over every trial."""
        healthy = sum(self.nodes - len(t.bad) for t in self.trials)
        return sum(len(t.named - t.bad) for t in self.trials) / healthy if healthy else 0.0

    @property
    def mean_rounds(self) -> float:
        return sum(t.rounds for t in self.trials) / len(self.trials)

    @property
    def max_message(self) -> int:
        return max(t.message_bytes for t in self.trials)

    @property
    def path_rate(self) -> float:
        return sum(t.path_named for t in self.trials) / len(self.trials)

    @property
    def rail_rate(self) -> float:
        return sum(t.rail_named for t in self.trials) / len(self.trials)


def cell(sigma: float, nodes: int, fault: str, trials: int, seed: int = 0, fraction: float = 0.5) -> Cell:
    base = _seed(seed, fault, nodes, sigma)
    return Cell(sigma, nodes, fault, [trial(nodes, sigma, FAULTS[fault], base + i, fraction) for i in range(trials)])


def _seed(seed: int, fault: str, nodes: int, sigma: float) -> int:
    """A fixed seed per cell (no ``hash``: it changes from one Python process to the next)."""
    return seed * 1_000_003 + sum(map(ord, fault)) * 10_007 + nodes * 101 + round(sigma * 1000)


COLUMNS = (
    "sigma",
    "nodes",
    "fault",
    "no healthy named",
    "precision",
    "recall",
    "false blame",
    "rounds",
    "max line B",
    "path/rail",
)


def row(c: Cell) -> tuple[str, ...]:
    def pct(x: float) -> str:
        return "-" if math.isnan(x) else f"{100 * x:.0f}%"

    extra = pct(c.path_rate) if c.fault.startswith("path") else pct(c.rail_rate) if c.fault.startswith("rail") else ""
    return (
        f"{c.sigma:g}",
        str(c.nodes),
        c.fault,
        pct(c.clean),
        pct(c.precision),
        pct(c.recall),
        f"{c.false_blame:.2g}",
        f"{c.mean_rounds:.2f}",
        str(c.max_message),
        extra,
    )


def markdown(rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_isolation_replay", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per cell (default: 20)")
    parser.add_argument("--nodes", default=",".join(map(str, NODE_COUNTS)), help="node counts, comma-separated")
    parser.add_argument("--sigmas", default=",".join(map(str, SIGMAS)), help="noise levels, comma-separated")
    parser.add_argument("--faults", default=",".join(FAULTS), help="faults, comma-separated: " + ", ".join(FAULTS))
    parser.add_argument("--fraction", type=float, default=0.5, help="slow_pair_fraction (default: 0.5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", type=Path, help="write the table here as markdown")
    args = parser.parse_args(argv)
    try:
        args.counts = [int(n) for n in args.nodes.split(",")]
        args.noise = [float(s) for s in args.sigmas.split(",")]
    except ValueError:
        parser.error(f"--nodes / --sigmas: expected comma-separated numbers, got {args.nodes!r} / {args.sigmas!r}")
    args.cases = [f.strip() for f in args.faults.split(",")]
    unknown = [f for f in args.cases if f not in FAULTS]
    if unknown:
        parser.error(f"--faults: unknown {unknown}; expected some of {list(FAULTS)}")
    if args.trials < 1 or any(n < 2 for n in args.counts) or not 0 < args.fraction < 1:
        parser.error("--trials must be at least 1, every node count at least 2, --fraction in (0, 1)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows: list[tuple[str, ...]] = []
    start = time.monotonic()
    print(" | ".join(COLUMNS), flush=True)
    for sigma in args.noise:
        for nodes in args.counts:
            for fault in args.cases:
                if nodes < 3 and fault.startswith(("2+", "path")):
                    continue  # two nodes have one path and cannot hold two slow nodes apart
                rows.append(row(cell(sigma, nodes, fault, args.trials, args.seed, args.fraction)))
                print(" | ".join(rows[-1]), flush=True)
    table = markdown(rows)
    if args.markdown is not None:
        args.markdown.write_text(table)
    print(f"\n{len(rows)} cells x {args.trials} trials in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
