"""The collectives probe's rows of one or more evidence folders, one line each: op, size, how it was timed,
time per call (the mean over ranks, and the slowest rank's) and each timed window's busbw.

    python3 benchmarks/collectives_rows.py EVIDENCE_DIR [EVIDENCE_DIR ...] [--sizes 1M,4M]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--sizes", help="only these sizes, comma-separated, as the profile spells them")
    args = parser.parse_args()
    sizes = set(args.sizes.split(",")) if args.sizes else None
    for folder in args.folders:
        for result in sorted(folder.glob("probes/*collectives*/result.json")):
            doc = json.loads(result.read_text())
            print(f"== {result}")
            for row in doc.get("result", doc)["rows"]:
                if sizes is None or row["size"] in sizes:
                    windows = " ".join(f"{w:.1f}" for w in row["busbw_windows_gbps"])
                    print(
                        f"{row['op']:15s} {row['size']:>5s} {row['timing']:12.12s} {row['time_us']:9.2f} us "
                        f"(slowest {row['time_us_max']:9.2f}) windows GB/s: {windows}"
                    )


if __name__ == "__main__":
    main()
