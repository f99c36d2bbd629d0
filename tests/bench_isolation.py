"""Isolation against the node count: N CPU "nodes" in network namespaces (one rank each), the last one's
link throttled, the rail test run on every node with local-cpu's settings. Prints, per N, the node named,
the rounds, the time to the culprit, the setup time per node and the noise estimate after each pair round.
A count named twice is run twice (``--nodes 5,5,5,5,5``: five runs of five nodes). Not a test; needs root:

    python -m tests.bench_isolation --nodes 5,8,16
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from acceptance.reports.table import render
from tests import netns
from tests.test_isolation_netns import suite
from tests.test_multinode import base_env

COLUMNS = (
    "nodes",
    "named",
    "rounds",
    "to culprit s",
    "round walls s",
    "inside the jobs s",
    "rails probe s",
    "netns setup s/node",
    "rendezvous s",
    "suite wall s",
    "noise by round",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_isolation", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="5,8,16", help="node counts, comma-separated (default: 5,8,16)")
    parser.add_argument("--rate", default="30mbit", help="tc rate of the slow node's link (default: 30mbit)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per probe job (default: 600)")
    parser.add_argument("--out", type=Path, default=Path(f"/tmp/bench-isolation-{time.strftime('%Y%m%d-%H%M%S')}"))
    args = parser.parse_args(argv)
    try:
        args.counts = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes: expected node counts like 4,8,16, got {args.nodes!r}")
    if any(n < 2 for n in args.counts):
        parser.error(f"--nodes: every count must be at least 2, got {args.nodes!r}")
    return args


def one(nodes: int, rate: str, folder: Path, timeout_s: int) -> tuple[object, ...]:
    bed = netns.TestBed(nodes)
    try:
        bed.start()
        bed.throttle(nodes - 1, rate)
        # 16 nodes start 32 torch processes per round: on 2 shared cores that alone can pass local-cpu's 180 s
        args = [*suite(nodes), "--cluster-timeout", str(timeout_s)]
        runs = netns.run_suite(bed, args, folder, base_env(), limit_s=8 * timeout_s)
    finally:
        bed.close()
    (path,) = folder.glob("node0-*/evidence.json")
    evidence = json.loads(path.read_text())
    walls = {p["key"]: p.get("wall_s", float("nan")) for p in evidence["probes"]}
    rounds = [walls[k] for k in sorted(walls) if k.startswith("isolation-")]
    # the ranks' own time (rendezvous and measuring); the rest of a round's wall is starting Python and torch
    inside = [p["result"]["wall_s"] for p in evidence["probes"] if p["key"].startswith("isolation-") and "result" in p]
    found: dict[str, Any] = next(
        (t["measurements"]["isolation"] for t in evidence["tests"] if "isolation" in t["measurements"]), {}
    )
    conn: dict[str, Any] = next((p["result"] for p in evidence["probes"] if p["key"] == "connectivity"), {})
    return (
        nodes,
        ", ".join(found.get("pair_matrix", {}).get("labels", [""])[n] for n in found.get("culprits", [])) or "none",
        len(rounds),
        f"{sum(rounds):.1f}",
        " + ".join(f"{w:.0f}" for w in rounds),
        " + ".join(f"{w:.0f}" for w in inside),
        f"{walls.get('connectivity', float('nan')):.1f}",
        f"{statistics.mean(bed.setup_s):.3f}",
        f"{conn.get('rendezvous_s', float('nan')):.1f}",
        f"{max(r.wall_s for r in runs):.0f}",
        " / ".join(f"{sigma:.0%}" for sigma in found.get("noise_by_round", [])),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    why = netns.missing()
    if why:
        print(f"bench_isolation: {why}", file=sys.stderr)
        return 4
    rows: list[tuple[Any, ...]] = []
    for i, nodes in enumerate(args.counts, 1):  # a folder per run: a count named twice is run twice
        rows.append(one(nodes, args.rate, args.out / f"{i:02d}-n{nodes}", args.timeout))
        print(render(COLUMNS, rows[-1:]), flush=True)
    print(f"\nslow node: the last one, its link at {args.rate} both ways; evidence under {args.out}\n")
    print(render(COLUMNS, rows, style="markdown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
