"""Side by side over repeated runs: per op and size, the median time per call of nccl-tests' runs (one GPU per
thread, one process per GPU under MPI) and of the suite's sweeps, each with how far its runs spread, the ratio of
the medians, and, where that ratio is outside nccl-tests' bound, whether the suite's median lies among
nccl-tests' own runs on the same machine (then the reference itself read that time: no bound can be held there),
or else whether the two sides' runs overlap (some run of each read a time the other side read too).

    python3 benchmarks/sidebyside_medians.py OUT [OUT...] [--timing auto]
    python3 benchmarks/sidebyside_medians.py --between A B     # how far each side's medians moved from A to B

Each OUT is a folder of ``REPEATS=N LAYOUTS="threads mpi" benchmarks/nccltests.sh`` with N of 2 or more (its run
folders ``nccl-tests-R``, ``nccl-tests-mpi-R``, ``sweep-auto-R``; a single run's have no ``-R``), or of its
``placement`` mode (``OUT/place-SET``); several OUT folders (two bands of sizes run apart) are merged per op and
size. The bound is nccltests_table's: 0.95-1.05 from 1 MiB up, 0.9-1.1 below. ``--between A B``: per side, the
lowest and highest ratio of B's median to A's over the op and sizes both measured, and the widest spread of one
op and size's runs in either (the ``placement`` mode's two CPU sets).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import nccltests_repeat as repeat  # this folder's own modules, beside this script
import nccltests_table as table

Key = tuple[str, int]  # (op, bytes)
LAYOUTS = {"threads": "nccl-tests", "mpi": "nccl-tests-mpi"}


@dataclass(frozen=True)
class Side:
    """One side's runs at one op and size, us per call."""

    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def span(self) -> float:
        """The slowest run over the fastest."""
        return max(self.runs) / min(self.runs)

    def text(self) -> str:
        return f"{_us(self.median)} ({self.span:.2f}, {len(self.runs)})" if self.runs else "-"


def _us(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.1f}"


def _run_numbers(out: Path, prefix: str) -> list[str]:
    found = [p.name[len(prefix) + 1 :] for p in out.glob(f"{prefix}-[0-9]*")]
    return sorted((n for n in found if n.isdigit()), key=int)


def gather(outs: list[Path], timing: str) -> dict[str, dict[Key, list[float]]]:
    """Every run's time per call, per side (``threads``, ``mpi``, ``suite``) and (op, bytes)."""
    sides: dict[str, dict[Key, list[float]]] = {"threads": {}, "mpi": {}, "suite": {}}
    for out in outs:
        for layout, prefix in LAYOUTS.items():
            for n in _run_numbers(out, prefix):
                for key, us in repeat.nccl_tests(out / f"{prefix}-{n}").items():
                    sides[layout].setdefault(key, []).append(us)
        for n in _run_numbers(out, f"sweep-{timing}"):
            for key, us in repeat.suite(out / f"sweep-{timing}-{n}").items():
                sides["suite"].setdefault(key, []).append(us)
    return sides


def verdict(key: Key, theirs: list[Side], ours: Side) -> tuple[str, str]:
    """``within``, ``among`` (the suite's median among nccl-tests' runs), ``overlap`` (some run of each side
    among the other's) or ``outside``; and the text of the row's last cell."""
    low, high = table.BOUNDS[key[1] >= table.MIB]
    ratios = [side.median / ours.median for side in theirs if side.runs]
    if any(low <= r <= high for r in ratios):
        return "within", ""
    every = [us for side in theirs for us in side.runs]
    span = f"{_us(min(every))}-{_us(max(every))}"
    if min(every) <= ours.median <= max(every):
        return "among", f"among nccl-tests' runs ({span})"
    if min(ours.runs) <= max(every) and min(every) <= max(ours.runs):
        return "overlap", f"the runs overlap (nccl-tests {span}, the suite {_us(min(ours.runs))}-{_us(max(ours.runs))})"
    return "outside", "**outside**"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="*", type=Path)
    parser.add_argument("--timing", default="auto")
    parser.add_argument("--between", nargs=2, type=Path, metavar=("A", "B"))
    args = parser.parse_args()
    if args.between:
        a, b = args.between
        return between(a, b, args.timing)
    if not args.outs:
        parser.error("name at least one OUT folder, or --between A B")
    sides = gather(args.outs, args.timing)
    keys = sorted(sides["suite"].keys() & (sides["threads"].keys() | sides["mpi"].keys()), key=_order)
    if not keys:
        print("no op and size measured by both sides", file=sys.stderr)
        return 2
    head = "nccl-tests threads: median us (slowest run / fastest, runs)"
    print(f"| op | size (B) | {head} | MPI | suite | ratio threads / MPI | |")
    print("|---|---:|---:|---:|---:|---:|---|")
    counts: dict[tuple[bool, str], int] = {}
    sizes: dict[bool, list[int]] = {}
    for key in keys:
        theirs = [Side(sides[layout].get(key, [])) for layout in LAYOUTS]
        ours = Side(sides["suite"][key])
        found, note = verdict(key, theirs, ours)
        counts[(key[1] >= table.MIB, found)] = counts.get((key[1] >= table.MIB, found), 0) + 1
        sizes.setdefault(key[1] >= table.MIB, []).append(key[1])
        ratios = " / ".join(f"{s.median / ours.median:.2f}" if s.runs else "-" for s in theirs)
        cells = [key[0], str(key[1]), theirs[0].text(), theirs[1].text(), ours.text(), ratios, note]
        print("| " + " | ".join(cells) + " |")
    print()
    columns = "within the bound (either layout's median) | among nccl-tests' own runs | the runs overlap | outside"
    print(f"| band (bound) | op and size pairs | {columns} |")
    print("|---|---:|---:|---:|---:|---:|")
    for big in (False, True):
        row = [counts.get((big, v), 0) for v in ("within", "among", "overlap", "outside")]
        if sum(row):
            low, high = table.BOUNDS[big]
            label = f"{_bytes(min(sizes[big]))} to {_bytes(max(sizes[big]))} ({low}-{high})"
            print(f"| {label} | {sum(row)} | " + " | ".join(map(str, row)) + " |")
    return 0


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def between(a: Path, b: Path, timing: str) -> int:
    """Per side, B's medians over A's (lowest-highest) and the widest spread of one op and size's runs."""
    first, second = gather([a], timing), gather([b], timing)
    print(f"| side | {b.name} median / {a.name} median | widest spread of one op and size's runs |")
    print("|---|---:|---:|")
    for side in first:
        keys = first[side].keys() & second[side].keys()
        if not keys:
            continue
        ratios = [Side(second[side][k]).median / Side(first[side][k]).median for k in keys]
        spread = max(Side(runs).span for runs in [*first[side].values(), *second[side].values()])
        print(f"| {side} | {min(ratios):.2f}-{max(ratios):.2f} | {spread:.2f} |")
    return 0


def _order(key: Key) -> tuple[int, int]:
    ops = list(table.NCCL_TESTS_NAMES)
    return (ops.index(key[0]) if key[0] in ops else len(ops), key[1])


if __name__ == "__main__":
    sys.exit(main())
