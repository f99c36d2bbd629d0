"""The isolation rounds replayed on synthetic clusters: the real ``Isolation.next_round`` / ``record`` that
the plugin drives, fed pair and rail figures drawn from a cluster model instead of jobs. Prints, per noise
level, node count and fault, how often no healthy node or path was named, precision, recall, how often a
bad node was told only as paths, how often a healthy cluster ended resolved, the rounds, the slowdown the
rounds named at and the largest verdict line; writes the table as markdown, or into docs/isolation.md.
Not a test (the unit tests replay a reduced grid with seeds of their own):

    python -m tests.bench_isolation_replay --trials 200 --docs docs/isolation.md

The model: a pair of nodes runs at the pace of its slower node, or of the path between them; every
reading (each repeat of a pair, each direction of a rail) is multiplied by lognormal noise exp(sigma z).
A node with a slow rail (a random GPU) runs its pairs at that rail's pace. A flapping node is slow (0.2x)
in half its readings. A slow path joins two random nodes, measured by the failing probe or not. Before
round 1 the failing probe's rails (``links.hypercube_rounds``, one reading each) give the three slowest
node pairs as the isolation's starting hint, as the plugin's connectivity probe does. Readings are drawn
a round at a time (numpy), and the cells are spread over the machine's cores.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from acceptance.families import connectivity as links
from acceptance.families.internode.isolation import Isolation, Pair, Round

BASE_GBPS = 10.0  # a healthy pair's figure; only ratios matter
GPUS = 8  # rails per node
FLAP_FACTOR, FLAP_SHARE = 0.2, 0.5  # a flapping node: 0.2x in half its readings
HINTS = 3  # the failing probe's slowest node pairs handed to round 1
SIGMAS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.6)
NODE_COUNTS = (2, 3, 4, 5, 8, 16, 64, 256, 1024)
SEED = 38_000_003  # the bench's own; the unit tests draw theirs (tests/test_isolation_units.py)


@dataclass
class Cluster:
    """The truth: per node its pace, per path and per rail their own, and who flaps."""

    nodes: int
    sigma: float
    rng: np.random.Generator
    pace: np.ndarray = field(init=False)
    paths: dict[frozenset[int], float] = field(default_factory=dict)
    rails: dict[tuple[int, int], float] = field(default_factory=dict)  # (node, gpu) -> pace
    flapping: set[int] = field(default_factory=set)
    fabric: float = 1.0  # every pair's pace: a fault no node is to blame for
    outliers: float = 0.0  # the share of readings far below the rest (congestion, a retransmit)
    noisy: dict[int, float] = field(default_factory=dict)  # node -> the noise of its pairs' readings
    one_way: dict[int, float] = field(default_factory=dict)  # node -> its pace when it sends
    rail_everywhere: dict[int, float] = field(default_factory=dict)  # GPU -> its pace on every node

    def __post_init__(self) -> None:
        self.pace = np.ones(self.nodes)

    @property
    def bad(self) -> set[int]:
        """The nodes a verdict should name (a noisy node is not slow: naming it is blaming a healthy node)."""
        slow = {int(n) for n in np.flatnonzero(self.pace < 1)} | set(self.one_way)
        return slow | {n for n, _ in self.rails} | self.flapping

    def pairs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """One reading of each pair (a[i], b[i])."""
        node = self.pace.copy()
        for (n, _), p in self.rails.items():
            node[n] = min(node[n], p)
        for n, p in self.one_way.items():  # an all_reduce sends both ways: the pair waits for the slow sender
            node[n] = min(node[n], p)
        ends = np.minimum(node[a], node[b]) * min(self.rail_everywhere.values(), default=1.0)
        for n in self.flapping:
            flap = ((a == n) | (b == n)) & (self.rng.random(len(a)) < FLAP_SHARE)
            ends = np.where(flap, np.minimum(ends, FLAP_FACTOR), ends)
        for key, p in self.paths.items():
            x, y = tuple(key)
            on = ((a == x) & (b == y)) | ((a == y) & (b == x))
            ends = np.where(on, np.minimum(ends, p), ends)
        sigma = np.full(len(a), self.sigma)
        for n, s in self.noisy.items():
            sigma = np.where((a == n) | (b == n), np.maximum(sigma, s), sigma)
        return (
            BASE_GBPS * self.fabric * ends * np.exp(sigma * self.rng.standard_normal(len(a))) * self._outliers(len(a))
        )

    def _outliers(self, count: int) -> np.ndarray:
        """Each reading, with chance ``outliers``, at 0.05-0.5x of its pace (log-uniform)."""
        hit = self.rng.random(count) < self.outliers
        return np.where(hit, np.exp(self.rng.uniform(math.log(0.05), math.log(0.5), count)), 1.0)

    def rail(self, a: int, b: int, gpu: int) -> float:
        """One reading of GPU ``gpu`` of node ``a`` sending to the same GPU of node ``b``."""
        ends = [self.pace[n] * self.rails.get((n, gpu), 1.0) for n in (a, b)]
        pace = min(*ends, self.paths.get(frozenset((a, b)), 1.0), self.one_way.get(a, 1.0))
        pace *= self.rail_everywhere.get(gpu, 1.0)
        noise = max(self.sigma, self.noisy.get(a, 0.0), self.noisy.get(b, 0.0))
        return float(
            BASE_GBPS * self.fabric * pace * math.exp(noise * self.rng.standard_normal()) * self._outliers(1)[0]
        )

    def hint(self) -> tuple[Pair, ...]:
        """The failing probe's slowest node pairs: one reading of each rail pair of its rounds."""
        measured = [p for r in links.hypercube_rounds(self.nodes) for p in r]
        ends = np.array(measured)
        figures = self.pairs(ends[:, 0], ends[:, 1])
        return tuple(measured[i] for i in np.argsort(figures, kind="stable")[:HINTS])


Fault = Callable[[Cluster], None]


def slow_nodes(factor: float, count: Callable[[int], int] = lambda n: 1) -> Fault:
    def apply(c: Cluster) -> None:
        for node in c.rng.choice(c.nodes, size=min(count(c.nodes), c.nodes), replace=False):
            c.pace[node] = factor

    return apply


def several(n: int) -> int:
    """Two slow nodes, or 5% of them; at most a quarter of the nodes (then the median is still healthy)."""
    return max(1, min(max(2, round(0.05 * n)), n // 4))


def slow_path(factor: float) -> Fault:
    """One path slow, between two random nodes: one the failing probe measured or not."""

    def apply(c: Cluster) -> None:
        a, b = c.rng.choice(c.nodes, size=2, replace=False)
        c.paths[frozenset((int(a), int(b)))] = factor

    return apply


def slow_rail(factor: float) -> Fault:
    def apply(c: Cluster) -> None:
        c.rails[(int(c.rng.integers(c.nodes)), int(c.rng.integers(GPUS)))] = factor

    return apply


def fabric(factor: float) -> Fault:
    def apply(c: Cluster) -> None:
        c.fabric = factor

    return apply


def outliers(rate: float, then: Fault | None = None) -> Fault:
    """A share of every reading far below the rest (heavy-tailed noise), with another fault or none."""

    def apply(c: Cluster) -> None:
        c.outliers = rate
        if then is not None:
            then(c)

    return apply


def noisy_node(c: Cluster) -> None:
    """One node's pairs four times as noisy as the rest (at least 40% a reading), at full pace."""
    c.noisy[int(c.rng.integers(c.nodes))] = max(4 * c.sigma, 0.4)


def one_way(factor: float) -> Fault:
    """One node slow only when it sends."""

    def apply(c: Cluster) -> None:
        c.one_way[int(c.rng.integers(c.nodes))] = factor

    return apply


def rail_everywhere(factor: float) -> Fault:
    """One GPU's rail slow on every node: the fabric of that rail, no node to blame."""

    def apply(c: Cluster) -> None:
        c.rail_everywhere[int(c.rng.integers(GPUS))] = factor

    return apply


def flapping(c: Cluster) -> None:
    c.flapping.add(int(c.rng.integers(c.nodes)))


def healthy(c: Cluster) -> None:
    """No fault: a bound set too high."""


FAULTS: dict[str, Fault] = {
    "no fault": healthy,
    "fabric 0.5x": fabric(0.5),
    "1 node 0.8x": slow_nodes(0.8),
    "1 node 0.5x": slow_nodes(0.5),
    "1 node 0.2x": slow_nodes(0.2),
    "1 node 0.01x": slow_nodes(0.01),
    "2+ nodes 0.5x": slow_nodes(0.5, several),
    "2+ nodes 0.2x": slow_nodes(0.2, several),
    "path 0.5x": slow_path(0.5),
    "path 0.2x": slow_path(0.2),
    "rail 0.2x": slow_rail(0.2),
    "flapping 0.2x": flapping,
    "outliers 1%": outliers(0.01),
    "outliers 5%": outliers(0.05),
    "outliers 5% + 1 node 0.5x": outliers(0.05, slow_nodes(0.5)),
    "noisy node": noisy_node,
    "one-way 0.2x": one_way(0.2),
    "rail 0.2x on every node": rail_everywhere(0.2),
}


@dataclass(frozen=True)
class Trial:
    named: frozenset[int]
    bad: frozenset[int]
    paths_named: frozenset[Pair]
    true_paths: frozenset[Pair]
    resolved: bool  # nothing named, nobody listed as unresolved or left to the noise
    listed: bool  # a node listed as not resolved (those left to the noise are not listed)
    rounds: int
    message_bytes: int
    named_fraction: float  # the slow hypothesis the verdict was reached at
    rail_named: bool  # the slow rail named, or the one-way node as such (False where there is none)
    raised: bool  # message() or evidence() raised

    @property
    def blamed_healthy(self) -> bool:
        """A healthy node named, or a healthy path: a path named that is not slow (a bad node's path too)."""
        return bool(self.named - self.bad) or bool(self.paths_named - self.true_paths)

    @property
    def told_as_paths(self) -> bool:
        """A bad node left unnamed while a path through it was named."""
        return any(not {a, b} & self.named and {a, b} & self.bad for a, b in self.paths_named)


def measure(cluster: Cluster, rnd: Round) -> dict[str, object]:
    """A round's result as the probe writes it, from the cluster model."""
    hosts = {n: f"n{n}" for n in range(cluster.nodes)}
    if rnd.kind == "pairs":
        order = [p for step in rnd.steps for p in step]
        ends = np.array(order * rnd.repeats)  # interleaved: every step once, then again
        figures = cluster.pairs(ends[:, 0], ends[:, 1]).reshape(rnd.repeats, len(order))
        rows = []
        for i, (a, b) in enumerate(order):
            got = [float(f) for f in figures[:, i]]
            rows.append({"a": a, "b": b, "gbps": sorted(got)[len(got) // 2], "repeats_gbps": got, "wrong": 0})
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
    cluster = Cluster(nodes, sigma, np.random.default_rng(seed))
    fault(cluster)
    iso = replay(cluster, fraction)
    named = frozenset(iso.culprits)
    st = iso.status()
    true_paths = frozenset((min(p), max(p)) for p in cluster.paths)
    rail_nodes = {n for n, _ in cluster.rails}
    try:
        line = iso.message()
        iso.evidence()
        raised = False
    except Exception:  # the verdict must never raise: the table counts the trials that did
        line, raised = "", True
    if cluster.one_way:  # named, and as slow when it sends
        told = set(cluster.one_way) <= named and "when it sends" in line
    elif cluster.rail_everywhere:  # the rail named on every node
        told = all(f"GPU {g} <-> GPU {g}" in line for g in cluster.rail_everywhere) and "every node" in line
    else:
        told = bool(rail_nodes) and all(gpu in iso.slow_rails(n) for (n, gpu) in cluster.rails if n in named)
    return Trial(
        named=named,
        bad=frozenset(cluster.bad),
        paths_named=frozenset(st.paths) if nodes > 2 else frozenset(),
        true_paths=true_paths,
        resolved=not named and not st.paths and not st.suspects and not st.untested,
        listed=bool(st.held or st.untested),
        rounds=len(iso.rounds),
        message_bytes=len(line.encode()),
        named_fraction=math.exp(st.scale.effect),
        rail_named=told,
        raised=raised,
    )


@dataclass(frozen=True)
class Cell:
    sigma: float
    nodes: int
    fault: str
    trials: list[Trial]

    @property
    def clean(self) -> float:
        """The share of trials that named no healthy node and no healthy path."""
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
    def as_paths(self) -> float:
        """The share of trials that told a bad node only as paths."""
        return sum(t.told_as_paths for t in self.trials) / len(self.trials)

    @property
    def resolved(self) -> float:
        return sum(t.resolved for t in self.trials) / len(self.trials)

    @property
    def unlisted(self) -> float:
        """The share of trials whose verdict listed no node as not resolved."""
        return sum(not t.listed for t in self.trials) / len(self.trials)

    @property
    def mean_rounds(self) -> float:
        return sum(t.rounds for t in self.trials) / len(self.trials)

    @property
    def max_rounds(self) -> int:
        return max(t.rounds for t in self.trials)

    @property
    def max_message(self) -> int:
        return max(t.message_bytes for t in self.trials)

    @property
    def named_fraction(self) -> float:
        return sorted(t.named_fraction for t in self.trials)[len(self.trials) // 2]

    @property
    def path_rate(self) -> float:
        return sum(bool(t.true_paths & t.paths_named) for t in self.trials) / len(self.trials)

    @property
    def raised(self) -> int:
        return sum(t.raised for t in self.trials)

    @property
    def rail_rate(self) -> float:
        return sum(t.rail_named for t in self.trials) / len(self.trials)


def cell(sigma: float, nodes: int, fault: str, trials: int, seed: int = SEED, fraction: float = 0.5) -> Cell:
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
    "told as paths",
    "resolved",
    "none listed",
    "rounds",
    "max rounds",
    "names at",
    "max line B",
    "path/rail/one-way",
    "raised",
)


def row(c: Cell) -> tuple[str, ...]:
    def pct(x: float) -> str:
        return "-" if math.isnan(x) else f"{100 * x:.1f}%".replace(".0%", "%")

    extra = (
        pct(c.path_rate)
        if c.fault.startswith("path")
        else pct(c.rail_rate)
        if c.fault.startswith(("rail", "one-way"))
        else ""
    )
    return (
        f"{c.sigma:g}",
        str(c.nodes),
        c.fault,
        pct(c.clean),
        pct(c.precision),
        pct(c.recall),
        pct(c.as_paths) if c.fault.startswith(("1 node", "2+", "rail 0.2x", "flapping", "one-way")) else "",
        pct(c.resolved) if c.fault == "no fault" else "",
        pct(c.unlisted) if c.fault == "no fault" else "",
        f"{c.mean_rounds:.2f}",
        str(c.max_rounds),
        f"{c.named_fraction:.2f}x",
        str(c.max_message),
        extra,
        str(c.raised),
    )


def markdown(rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- replay table: python -m tests.bench_isolation_replay --docs -->", "<!-- end of the replay table -->"


def into_docs(doc: Path, table: str, summary: str) -> None:
    """The table and the command's summary line between the markers of ``doc``, in place."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc}: no replay table markers ({BEGIN!r} ... {END!r})")
    block = f"{BEGIN}\n\n{summary}\n\n{table}\n{END}"
    doc.write_text(re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_isolation_replay", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="trials per cell (default: 200)")
    parser.add_argument("--nodes", default=",".join(map(str, NODE_COUNTS)), help="node counts, comma-separated")
    parser.add_argument("--sigmas", default=",".join(map(str, SIGMAS)), help="noise levels, comma-separated")
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help="faults, comma-separated: " + ", ".join(FAULTS).replace("%", "%%")
    )
    parser.add_argument("--fraction", type=float, default=0.5, help="slow_pair_fraction (default: 0.5)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: the cores)")
    parser.add_argument("--markdown", type=Path, help="write the table here as markdown")
    parser.add_argument("--docs", type=Path, help="put the table into this page, between its replay table markers")
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
    if args.trials < 1 or any(n < 2 for n in args.counts) or not 0 < args.fraction < 1 or args.jobs < 1:
        parser.error("--trials and --jobs must be at least 1, every node count at least 2, --fraction in (0, 1)")
    return args


def _cell(job: tuple[float, int, str, int, int, float]) -> tuple[str, ...]:
    return row(cell(*job))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    jobs = [
        (sigma, nodes, fault, args.trials, args.seed, args.fraction)
        for sigma in args.noise
        for nodes in args.counts
        for fault in args.cases
        # two nodes have one path and cannot hold two slow nodes apart
        if not (nodes < 3 and fault.startswith(("2+", "path")))
    ]
    start = time.monotonic()
    print(" | ".join(COLUMNS), flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        # the largest clusters first, so that no process is left with them at the end
        order = sorted(range(len(jobs)), key=lambda i: -jobs[i][1])
        done: dict[int, tuple[str, ...]] = {}
        for i, found in zip(order, pool.map(_cell, [jobs[i] for i in order], chunksize=1), strict=True):
            done[i] = found
            print(" | ".join(found), flush=True)
    rows = [done[i] for i in range(len(jobs))]
    table = markdown(rows)
    wall = time.monotonic() - start
    summary = (
        f"{len(rows)} cells x {args.trials} trials, slow_pair_fraction {args.fraction:g}, seed {args.seed}: "
        f"{wall:.0f} s on {args.jobs} processes"
    )
    if args.markdown is not None:
        args.markdown.write_text(table)
    if args.docs is not None:
        into_docs(args.docs, table, summary)
    print(f"\n{summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
