"""What the collectives' spread rule said of one run: its two figures, their verdicts, the rank it named.

    python3 benchmarks/nccltests_spread.py EVIDENCE [--slowed-rank R]

EVIDENCE is a suite run's evidence folder (or its ``evidence.json``) with ``test_rank_spread`` in it. With
``--slowed-rank`` (the rank whose GPU or CPU core was shared on purpose), exit 0 only when the rule failed the
run and named that rank; without it (a healthy run), exit 0 only when the rule passed. Exit 2: no figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

METRICS = ("collectives.rank_p99_ratio", "collectives.rank_cv_excess")


@dataclass(frozen=True)
class Said:
    metric: str
    value: float
    verdict: str
    bound: str
    detail: str


@dataclass(frozen=True)
class Run:
    said: list[Said]
    rank: int | None  # the rank the rule looked at (its measurement ``standout``)

    @property
    def failed(self) -> bool:
        return any(s.verdict == "fail" for s in self.said)


def read(evidence: Path) -> Run:
    path = evidence / "evidence.json" if evidence.is_dir() else evidence
    doc = json.loads(path.read_text())
    said, rank = [], None
    for test in doc.get("tests", []):
        standout = test.get("measurements", {}).get("standout")
        if isinstance(standout, dict) and isinstance(standout.get("rank"), int):
            rank = standout["rank"]
        for check in test.get("checks", []):
            if check.get("metric") in METRICS:
                said.append(
                    Said(check["metric"], float(check["value"]), str(check.get("verdict")), str(check.get("bound")),
                         str(check.get("detail") or ""))
                )  # fmt: skip
    return Run(said, rank)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evidence", type=Path)
    parser.add_argument("--slowed-rank", type=int)
    args = parser.parse_args(argv)
    try:
        run = read(args.evidence)
    except (OSError, ValueError, KeyError) as exc:
        print(f"{args.evidence}: cannot read: {exc}", file=sys.stderr)
        return 2
    if not run.said:
        print(f"{args.evidence}: no spread figure (did test_rank_spread run?)")
        return 2
    for s in run.said:
        print(f"  {s.metric} = {s.value:.3f} ({s.bound}): {s.verdict}; {s.detail}")
    if args.slowed_rank is None:
        print(f"  healthy run: the rule {'FAILED it (a false alarm)' if run.failed else 'passed it'}")
        return 1 if run.failed else 0
    named = run.failed and run.rank == args.slowed_rank
    print(
        f"  slowed rank {args.slowed_rank}: the rule {'named it' if named else 'did NOT name it'} "
        f"(failed: {run.failed}, rank looked at: {run.rank})"
    )
    return 0 if named else 1


if __name__ == "__main__":
    sys.exit(main())
