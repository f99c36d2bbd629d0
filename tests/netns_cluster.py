"""N "nodes" in network namespaces on this machine, one pytest each, for a trial by hand; e.g. the two GPUs
of one host as two nodes over NCCL's socket transport, node 1's link throttled:

    python -m tests.netns_cluster --nodes 2 --slow 1 --rate 2gbit --gpus-per-node 1 --out DIR -- PYTEST-ARGS...

Every node gets NNODES, NODE_RANK, MASTER_ADDR (node 0's name), MASTER_PORT, and its veth for gloo and
NCCL; with --gpus-per-node its own GPUs (CUDA_VISIBLE_DEVICES) and NCCL's P2P and shared-memory transports
off, so that NCCL goes through the network. Prints each node's exit status and the end of its output; the
evidence is under DIR. Not a test; needs root (and iproute2, or NETNS_IPROUTE: see tests/netns.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests import netns
from tests.test_multinode import base_env

TAIL = 40


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m tests.netns_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2, help="number of nodes (default: 2)")
    parser.add_argument("--slow", type=int, action="append", default=[], help="node whose link is throttled")
    parser.add_argument("--rate", default="2gbit", help="tc rate of a slow node's link, both ways (default: 2gbit)")
    parser.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node, handed out in order (default: 0)")
    parser.add_argument("--out", type=Path, required=True, help="evidence and logs")
    ours, sep, pytest_args = list(argv if argv is not None else sys.argv[1:]), "--", []
    if sep in ours:
        at = ours.index(sep)
        ours, pytest_args = ours[:at], ours[at + 1 :]
    args = parser.parse_args(ours)
    if args.nodes < 2 or any(not 0 <= n < args.nodes for n in args.slow) or not pytest_args:
        parser.error("need --nodes >= 2, --slow among the nodes, and the pytest arguments after --")
    return args, pytest_args


def gpus(node: int, per_node: int) -> dict[str, str]:
    if per_node < 1:
        return {}
    devices = ",".join(str(node * per_node + i) for i in range(per_node))
    # NCCL's own transports inside a host would bypass the namespaces' veths
    return {"CUDA_VISIBLE_DEVICES": devices, "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


def main(argv: list[str] | None = None) -> int:
    args, pytest_args = parse_args(argv)
    why = netns.missing()
    if why:
        print(f"netns_cluster: {why}", file=sys.stderr)
        return 4
    bed = netns.TestBed(args.nodes)
    try:
        bed.start()
        for node in args.slow:
            bed.throttle(node, args.rate)
        per_node = [gpus(n, args.gpus_per_node) for n in range(args.nodes)]
        runs = netns.run_suite(bed, pytest_args, args.out, base_env(), per_node)
    finally:
        bed.close()
    for run in runs:
        tail = "\n".join(run.output.splitlines()[-TAIL:])
        print(f"=== node {run.node} ({bed.host(run.node)}): exit {run.returncode}, {run.wall_s:.0f} s\n{tail}\n")
    return max(run.returncode for run in runs)


if __name__ == "__main__":
    sys.exit(main())
