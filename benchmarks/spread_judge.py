"""The spread rule (``collectives.late_ranks``) re-read from recorded runs: for each evidence file given, the
ranks the rule names at a ratio, floor and share, and in how many op/size cases each rank stood out.

    python benchmarks/spread_judge.py EVIDENCE.json [...] [--ratio 4] [--floor-us 100] [--share 0.25]

The lateness figures are the runs' own (the sweep's ``spread``); only the rule is applied again, so a bound can
be checked against every run recorded so far.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from acceptance.families.collectives import lateness
from acceptance.families.collectives.lateness import Spread


def spreads(path: Path) -> list[Spread]:
    doc = json.loads(path.read_text())
    return [s for test in doc["tests"] for s in test["measurements"].get("sweep", {}).get("spread", [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evidence", nargs="+", type=Path)
    parser.add_argument("--ratio", type=float, default=4.0)
    parser.add_argument("--floor-us", type=float, default=100.0)
    parser.add_argument("--share", type=float, default=0.25)
    args = parser.parse_args()
    for path in args.evidence:
        cases = spreads(path)
        stood = Counter(x.rank for x in lateness.late_ranks(cases, args.ratio, args.floor_us))
        named = sorted({x.rank for x in lateness.late_ranks(cases, args.ratio, args.floor_us, args.share)})
        counts = ", ".join(f"rank {r}: {n} of {len(cases)}" for r, n in sorted(stood.items())) or "none"
        print(f"{path}: stood out {counts}; named: {named or 'none'}")


if __name__ == "__main__":
    main()
