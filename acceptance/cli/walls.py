"""Where a run's time went: each probe's wall time and status, from one evidence file or two side by side.

    python -m acceptance.cli.walls acceptance-results/<run>/evidence.json
    python -m acceptance.cli.walls before/evidence.json after/evidence.json

One row per probe job (a staged job's wall time counts from its gate's opening, and its status says how long
it was staged before; ``training`` jobs also list each strategy's part of the job, as ``- <strategy>``; evidence
written with a job per strategy lists that job's wall time as the strategy's), then the suite's wall time
from the evidence's start and finish. With two files, rows are matched by name (a strategy's row by the
strategy, whichever job it ran in) and the change is shown. ``--phases`` adds, per probe, the seconds rank 0
spent in each phase it named (``phases`` in its ``rank-0.json``, beside the evidence). Exit status 4 on an
unreadable file.
"""

from __future__ import annotations

import datetime
import itertools
import json
import sys
from pathlib import Path

from acceptance.cli.usage import USAGE_ERROR, Parser
from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.store import EvidenceError, read_evidence
from acceptance.json_types import JSONObject
from acceptance.reports.table import render

Row = tuple[str, float | None, str]


def rows(doc: EvidenceDoc) -> list[Row]:
    """(name, wall seconds, status) per probe job, each training strategy under its job, then the suite."""
    out: list[Row] = []
    for probe in doc.probes:
        staged = probe.staged_s  # started that long before its turn, beside the probes before it
        status = probe.status + (f" (staged {staged:.1f} s before)" if staged is not None else "")
        out.append((probe.key, probe.wall_s, status))
        result = probe.result or {}
        found = result.get("strategies") or result.get("parts")
        parts: JSONObject = found if isinstance(found, dict) else {}
        if isinstance(strategy := result.get("strategy"), str):  # evidence of a job per strategy: the job is the part
            parts = {strategy: {"wall_s": probe.wall_s}}
        where = " (baseline)" if probe.key.endswith("-baseline") else ""
        for name, part in parts.items():
            wall = part.get("wall_s") if isinstance(part, dict) else None
            failed = isinstance(part, dict) and part.get("error")
            out.append(
                (f"- {name}{where}", wall if isinstance(wall, (int, float)) else None, "failed" if failed else "ok")
            )
    out.append(("suite", suite_s(doc), doc.verdict))
    return out


def suite_s(doc: EvidenceDoc) -> float | None:
    """From the evidence's start to its finish (the whole pytest session on this node)."""
    if doc.finished is None:
        return None
    try:
        started = datetime.datetime.fromisoformat(doc.started)
        finished = datetime.datetime.fromisoformat(doc.finished)
    except ValueError:
        return None
    return (finished - started).total_seconds()


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(runs: list[list[Row]]) -> str:
    if len(runs) == 1:
        return render(["probe", "wall s", "status"], [[n, _s(w), st] for n, w, st in runs[0]])
    before, after = ({n: (w, st) for n, w, st in r} for r in runs)
    names = [n for n in dict.fromkeys([n for n, _, _ in runs[0]] + [n for n, _, _ in runs[1]]) if n != "suite"]
    names.append("suite")
    body = []
    for name in names:
        (w0, s0), (w1, s1) = before.get(name, (None, "-")), after.get(name, (None, "-"))
        change = f"{w1 - w0:+.1f}" if w0 is not None and w1 is not None else "-"
        body.append([name, _s(w0), s0, _s(w1), s1, change])
    return render(["probe", "before s", "status", "after s", "status", "change s"], body)


def phases(folder: Path, doc: EvidenceDoc) -> list[list[str]]:
    """(probe, phase, seconds) for every phase rank 0 of each probe named; the last phase lasts until its
    final beat. Probes whose heartbeat is missing or has no phases (older evidence) are left out."""
    out: list[list[str]] = []
    for probe in doc.probes:
        if probe.out_dir is None:
            continue
        try:
            beat = json.loads((folder / probe.out_dir / "rank-0.json").read_text(encoding="utf-8"))
            marks = [(str(name), float(at)) for name, at in beat["phases"]] + [("", float(beat["elapsed_s"]))]
        except (OSError, KeyError, TypeError, ValueError):
            continue
        for (name, at), (_, until) in itertools.pairwise(marks):
            out.append([probe.key, name, f"{until - at:.1f}"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m acceptance.cli.walls", description=__doc__.split("\n")[0])
    parser.add_argument("evidence", nargs="+", type=Path, help="evidence.json (or its folder); two to compare")
    parser.add_argument("--phases", action="store_true", help="also each probe's phases (one evidence file)")
    args = parser.parse_args(argv)
    if len(args.evidence) > 2 or (args.phases and len(args.evidence) > 1):
        parser.error("give one evidence file, or two to compare (--phases: one)")
    try:
        docs = [read_evidence(path) for path in args.evidence]
    except EvidenceError as exc:
        print(exc, file=sys.stderr)
        return USAGE_ERROR
    print(table([rows(doc) for doc in docs]))
    if args.phases:
        folder = args.evidence[0] if args.evidence[0].is_dir() else args.evidence[0].parent
        print()
        print(render(["probe", "phase (rank 0)", "s"], phases(folder, docs[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
