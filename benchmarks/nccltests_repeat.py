"""How far each side moves from one run to the next, beside how far the suite is from nccl-tests, from the
runs of ``nccltests.sh`` (REPEATS > 1, or two folders of single runs): per op and for sizes below and from
1 MiB, the range of nccl-tests' time in run i over run j, of the suite's, and of nccl-tests' over the suite's.

    python3 benchmarks/nccltests_repeat.py OUT [--timing auto]   # OUT/nccl-tests-R and OUT/sweep-auto-R
    python3 benchmarks/nccltests_repeat.py --runs A B            # A/nccl-tests, A/sweep-auto; B/...
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import nccltests_table as table  # this folder's own module, beside this script

MIB = 2**20
Times = dict[tuple[str, int], float]  # (op, bytes) -> us


def nccl_tests(folder: Path) -> Times:
    out: Times = {}
    for op, name in table.NCCL_TESTS_NAMES.items():
        path = folder / f"{name}.txt"
        if path.is_file():
            out |= {(op, r.size): r.time_us for r in table.parse_nccl_tests(path.read_text(), op) if r.size > 0}
    return out


def suite(folder: Path) -> Times:
    return {(r.op, r.size): r.time_us for r in table.parse_sweep(folder)}


def spans(pairs: list[tuple[Times, Times]]) -> dict[tuple[str, bool], tuple[float, float]]:
    """Per op and (from 1 MiB?), the lowest and highest ratio a / b over every pair and size both measured."""
    ratios: dict[tuple[str, bool], list[float]] = {}
    for a, b in pairs:
        for key in a.keys() & b.keys():
            ratios.setdefault((key[0], key[1] >= MIB), []).append(a[key] / b[key])
    return {k: (min(v), max(v)) for k, v in ratios.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--runs", nargs="+", type=Path, help="folders of single runs instead")
    parser.add_argument("--timing", default="auto")
    args = parser.parse_args()
    if args.runs:
        runs = [(nccl_tests(d / "nccl-tests"), suite(d / f"sweep-{args.timing}")) for d in args.runs]
    else:
        found = sorted(args.out.glob("nccl-tests-[0-9]*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))
        runs = [(nccl_tests(d), suite(args.out / f"sweep-{args.timing}-{d.name.rsplit('-', 1)[1]}")) for d in found]
    if len(runs) < 2:
        print("fewer than two runs", file=sys.stderr)
        return 2
    columns = {
        "nccl-tests run/run": spans([(a[0], b[0]) for a, b in itertools.permutations(runs, 2)]),
        "suite run/run": spans([(a[1], b[1]) for a, b in itertools.permutations(runs, 2)]),
        "nccl-tests/suite": spans([(theirs, ours) for theirs, ours in runs]),
    }
    print("| op | sizes | " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    for op in table.NCCL_TESTS_NAMES:
        for big in (False, True):
            cells = [columns[c].get((op, big)) for c in columns]
            text = [f"{lo:.2f}-{hi:.2f}" if span else "-" for span in cells for lo, hi in [span or (0, 0)]]
            print(f"| {op} | {'1 MiB and up' if big else 'below 1 MiB'} | " + " | ".join(text) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
