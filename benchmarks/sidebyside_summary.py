"""The measurements page's side-by-side summary from ``nccltests.sh``'s two tables (one GPU per thread, one
process per GPU under MPI): time per call at a few sizes, nccl-tests threads / MPI / suite with the ratios,
and per band how many sizes are within nccl-tests' bound, with how far nccl-tests' own two layouts differ.

    python3 benchmarks/sidebyside_summary.py TABLE_THREADS TABLE_MPI
"""

from __future__ import annotations

import sys
from pathlib import Path

SIZES = (8, 65536, 1 << 20, 16 << 20, 128 << 20, 4 << 30)
LABELS = {8: "8 B", 65536: "64 KiB", 1 << 20: "1 MiB", 16 << 20: "16 MiB", 128 << 20: "128 MiB", 4 << 30: "4 GiB"}
Rows = dict[tuple[str, int], tuple[float, float]]  # (op, bytes) -> (nccl-tests us, suite us)


def read(path: Path) -> Rows:
    rows: Rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 6 or not cells[2].isdigit() or cells[4] in ("-", ""):
            continue
        rows[(cells[1], int(cells[2]))] = (float(cells[3]), float(cells[4]))
    return rows


def fmt(us: float) -> str:
    return f"{us:,.0f}" if us >= 1000 else f"{us:.1f}"


def main(argv: list[str]) -> int:
    threads, mpi = read(Path(argv[0])), read(Path(argv[1]))
    ops = list(dict.fromkeys(op for op, _ in threads))
    print("| op | " + " | ".join(LABELS[s] for s in SIZES) + " |")
    print("|---" * (len(SIZES) + 1) + "|")
    for op in ops:
        cells = []
        for size in SIZES:
            first = min((s for o, s in threads if o == op and s >= size and (op, s) in mpi), default=None)
            if first is None:
                cells.append("-")
                continue
            (t, ours), (m, _) = threads[(op, first)], mpi[(op, first)]
            cells.append(f"{fmt(t)} / {fmt(m)} / {fmt(ours)} ({t / ours:.2f} / {m / ours:.2f})")
        print(f"| {op} | " + " | ".join(cells) + " |")
    print()
    print("| band | within the bound, against threads | against MPI | either | nccl-tests threads / MPI |")
    print("|---|---|---|---|---|")
    bands = (("1 MiB to 4 GiB (0.95-1.05)", True, 0.95, 1.05), ("8 B to 512 KiB (0.9-1.1)", False, 0.9, 1.1))
    for name, big, low, high in bands:
        keys = [k for k in threads if k in mpi and (k[1] >= 1 << 20) == big]
        within_t = [k for k in keys if low <= threads[k][0] / threads[k][1] <= high]
        within_m = [k for k in keys if low <= mpi[k][0] / mpi[k][1] <= high]
        either = set(within_t) | set(within_m)
        layouts = [threads[k][0] / mpi[k][0] for k in keys]
        counts = " | ".join(f"{len(found)} of {len(keys)}" for found in (within_t, within_m, either))
        print(f"| {name} | {counts} | {min(layouts):.2f}-{max(layouts):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
