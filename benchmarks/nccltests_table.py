"""Side by side: nccl-tests' time and the suite's, per op and size, from one machine's run (``nccltests.sh``).

    python3 benchmarks/nccltests_table.py NCCL_TESTS_DIR SWEEP_EVIDENCE [--per-iter NCCL_TESTS_I_DIR]

NCCL_TESTS_DIR holds ``<op>.txt``, the output of nccl-tests' ``<op>_perf`` (``all_reduce``, ``all_gather``,
``reduce_scatter``, ``alltoall``, ``broadcast``, ``sendrecv``); SWEEP_EVIDENCE is the evidence folder (or its
``evidence.json``) of ``cluster-acceptance sweep`` over the same sizes. The ratio is nccl-tests' time over the
suite's (= the suite's busbw over nccl-tests'), flagged outside 0.95-1.05 from 1 MiB up and 0.9-1.1 below
(the bounds the gated figure must keep). Rows pair on the bytes the call moved (nccl-tests' ``size`` column:
the larger buffer);
nccl-tests rounds a rank's part down to 16 B, the suite up to one 16 B part (``schema.collectives``), so a
size only one side measured is listed with the reason. The column compared is the one whose buffers the suite
uses: in place for all_reduce, broadcast and reduce (their definitions' ``in_place``), out of place for the others.
Exit 1 when a pair is flagged, 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from acceptance.schema.collectives import OPS

# nccl-tests' program per suite op name, and the ops whose output is their input: the ops' definitions
NCCL_TESTS_NAMES = {name: op.nccl_tests for name, op in OPS.items()}
IN_PLACE = frozenset(name for name, op in OPS.items() if op.in_place)
MIB = 2**20
# the acceptance bounds: within 0.95-1.05 from 1 MiB up, 0.9-1.1 below
BOUNDS = {True: (0.95, 1.05), False: (0.9, 1.1)}


@dataclass(frozen=True)
class NcclTestsRow:
    """One line of nccl-tests' table (``writeBenchmarkLinePreamble``/``Body`` in src/util.cu)."""

    size: int  # bytes: max(sendBytes, expectedBytes)
    time_us: float  # the column the suite's buffers match (see the module's docstring)
    busbw_gbps: float
    p99_us: float | None  # -I 1's i_p99 of that column
    cv_pct: float | None  # -I 1's i_cv%


@dataclass(frozen=True)
class SuiteRow:
    op: str
    size: int  # bytes moved
    time_us: float
    busbw_gbps: float
    p99_us: float | None  # the highest p99 among the ranks' own times per call
    cv_pct: float | None


@dataclass(frozen=True)
class Pair:
    op: str
    size: int
    theirs: NcclTestsRow | None
    ours: SuiteRow | None
    per_iter: NcclTestsRow | None  # the -I 1 run's row, where given

    @property
    def ratio(self) -> float | None:
        if self.theirs is None or self.ours is None or self.ours.time_us <= 0:
            return None
        return self.theirs.time_us / self.ours.time_us

    @property
    def flagged(self) -> bool:
        ratio = self.ratio
        if ratio is None:
            return False
        low, high = BOUNDS[self.size >= MIB]
        return not low <= ratio <= high

    @property
    def reason(self) -> str:
        if self.theirs is None:
            return "nccl-tests printed no row of this size (it rounds a rank's part down to 16 B)"
        if self.ours is None:
            if self.theirs.size == 0:
                return (
                    "nccl-tests times a call of 0 B here (its part rounded down to 16 B); the suite moves one 16 B part"
                )
            return "the suite measured no call of this size"
        return "outside the bound" if self.flagged else ""


def _number(text: str) -> float:
    return float(text)


def parse_nccl_tests(text: str, op: str) -> list[NcclTestsRow]:
    """The rows of one nccl-tests output: size, count, type, redop, root, then per column (out of place,
    in place) time, algbw, busbw, #wrong, and with ``-I 1`` i_min, i_max, i_p99, i_cv%."""
    rows: list[NcclTestsRow] = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or not fields[0].isdigit() or len(fields) < 13:
            continue
        per_iter = len(fields) >= 5 + 2 * 8
        width = 8 if per_iter else 4
        start = 5 + (width if op in IN_PLACE else 0)
        block = fields[start : start + width]
        rows.append(
            NcclTestsRow(
                size=int(fields[0]),
                time_us=_number(block[0]),
                busbw_gbps=_number(block[2]),
                p99_us=_number(block[6]) if per_iter else None,
                cv_pct=_number(block[7]) if per_iter else None,
            )
        )
    return rows


def parse_sweep(evidence: Path) -> list[SuiteRow]:
    """The sweep's rows from its evidence (``cli.sweep``: the test ``cluster-acceptance sweep``'s measurement
    ``sweep``), a size repeated by rounding (``same_as``) once."""
    path = evidence / "evidence.json" if evidence.is_dir() else evidence
    doc = json.loads(path.read_text())
    for test in doc.get("tests", []):
        sweep = test.get("measurements", {}).get("sweep")
        if isinstance(sweep, dict):
            out = []
            for row in sweep.get("rows", []):
                if "same_as" in row:
                    continue
                ranks = row.get("ranks_spread") or []
                top = max(ranks, key=lambda r: r["p99_us"]) if ranks else None
                out.append(
                    SuiteRow(
                        op=row["op"],
                        size=int(row["bytes"]),
                        time_us=float(row["time_us"]),
                        busbw_gbps=float(row["busbw_gbps"]),
                        p99_us=None if top is None else float(top["p99_us"]),
                        cv_pct=None if top is None else 100 * float(top["cv"]),
                    )
                )
            return out
    raise ValueError(f"{path}: no sweep measurement (is it a `cluster-acceptance sweep` evidence?)")


def pair(
    ours: list[SuiteRow], theirs: dict[str, list[NcclTestsRow]], per_iter: dict[str, list[NcclTestsRow]]
) -> list[Pair]:
    """Each op's rows of both sides, paired on the bytes moved, in size order."""
    out: list[Pair] = []
    for op in NCCL_TESTS_NAMES:
        mine = {r.size: r for r in ours if r.op == op}
        other = {r.size: r for r in theirs.get(op, [])}
        iters = {r.size: r for r in per_iter.get(op, [])}
        if not mine and not other:
            continue
        for size in sorted(set(mine) | set(other)):
            out.append(Pair(op, size, other.get(size), mine.get(size), iters.get(size)))
    return out


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(pairs: list[Pair]) -> str:
    """Markdown: op, size, nccl-tests us, ours us, ratio, the p99 and CV of each side's calls, a flag."""
    lines = [
        "| op | size (B) | nccl-tests us | ours us | ratio | nccl-tests -I p99 us / CV % "
        "| ours p99 us / CV % (the rank of the highest p99) | |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in pairs:
        theirs_i = f"{_cell(p.per_iter.p99_us)} / {_cell(p.per_iter.cv_pct, 1)}" if p.per_iter else "-"
        ours_i = f"{_cell(p.ours.p99_us)} / {_cell(p.ours.cv_pct, 1)}" if p.ours else "-"
        lines.append(
            f"| {p.op} | {p.size} | {_cell(p.theirs.time_us if p.theirs else None)} | "
            f"{_cell(p.ours.time_us if p.ours else None)} | {_cell(p.ratio, 3)} | {theirs_i} | {ours_i} | "
            f"{'**' + p.reason + '**' if p.flagged else p.reason} |"
        )
    return "\n".join(lines)


def read_dir(folder: Path | None) -> dict[str, list[NcclTestsRow]]:
    if folder is None:
        return {}
    found = {}
    for op, name in NCCL_TESTS_NAMES.items():
        path = folder / f"{name}.txt"
        if path.exists():
            found[op] = parse_nccl_tests(path.read_text(errors="replace"), op)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nccl_tests", type=Path, help="folder of <op>.txt, nccl-tests' output per op")
    parser.add_argument("sweep", type=Path, help="the sweep's evidence folder or evidence.json")
    parser.add_argument("--per-iter", type=Path, help="folder of <op>.txt from nccl-tests run with -I 1")
    args = parser.parse_args(argv)
    try:
        theirs = read_dir(args.nccl_tests)
        ours = parse_sweep(args.sweep)
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read the runs: {exc}", file=sys.stderr)
        return 2
    pairs = pair(ours, theirs, read_dir(args.per_iter))
    print(table(pairs))
    flagged = [p for p in pairs if p.flagged]
    compared = [p for p in pairs if p.ratio is not None]
    print(f"\n{len(compared)} sizes compared, {len(flagged)} outside the bounds (0.95-1.05 from 1 MiB, 0.9-1.1 below)")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
