"""The table of ``nccltests.sh loop``: nccl-tests' time per call at -n 20 and -n 200 (one GPU per thread, and
one process per GPU under MPI where it ran), each the median of its runs with their range, beside the direct
loop's variants (``nccl_loop_ab.py``), at the sizes the loop measured.

    python3 benchmarks/nccl_loop_table.py LOOP_DIR
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from nccltests_table import NCCL_TESTS_NAMES, parse_nccl_tests  # type: ignore[import-not-found]

from acceptance.schema.sizes import parse_size

AB_LINE = re.compile(r"^(\S+)\s+(\S+)\s+(.+?)\s+us/call median\s+([\d.]+)")


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    found: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    names = {theirs: ours for ours, theirs in NCCL_TESTS_NAMES.items()}
    for path in sorted(folder.glob("*-n*-*.txt")):
        layout, prog, calls, _ = re.split(r"-(?=[^-]+-n\d+-\d+$)|-(?=n\d+-\d+$)|-(?=\d+$)", path.stem)
        ours = names[prog]
        for row in parse_nccl_tests(path.read_text(errors="replace"), ours):
            found[(ours, row.size, f"nccl-tests {layout} {calls}")].append(row.time_us)
    for path in sorted(folder.glob("ab-*.txt")):
        for line in path.read_text(errors="replace").splitlines():
            if m := AB_LINE.match(line):
                found[(m[1], parse_size(m[2]), f"suite {m[3]}")].append(float(m[4]))
    suite_sizes = sorted({(op, size) for op, size, label in found if label.startswith("suite")})
    labels = sorted({label for _, _, label in found}, key=lambda s: (not s.startswith("nccl"), s))
    print("| op | size | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for op, size in suite_sizes:
        # nccl-tests' sizes are bytes moved; below 16 B a rank the suite's parts round up (nccltests_table.py)
        cells = [_cell(found.get((op, size, label), [])) for label in labels]
        print(f"| {op} | {size} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
