"""The end-of-session table for the terminal: every figure as checked, and the tables the families print
after them (``ReportSection.terminal``: the training table, with tokens per dollar where the profile names a
price per GPU-hour). The plugin writes these lines."""

from __future__ import annotations

from collections import Counter

from acceptance.evidence.model import EvidenceDoc
from acceptance.reports import view
from acceptance.reports.sections import reporting
from acceptance.reports.table import render
from acceptance.verdicts import INFORMATION, FigureVerdict


def counts(data: EvidenceDoc) -> str:
    """Gated checks apart from recorded information, and the tests' outcomes: a figure without a bound held
    nothing, so it is never counted as a passed check."""
    verdicts = [c.verdict for t in data.tests for c in t.checks]
    gated = [v for v in verdicts if v != INFORMATION]
    by_verdict = Counter(gated)
    parts = [f"{by_verdict[v]} {word}" for v, word in _CHECK_WORDS if by_verdict[v]]
    outcomes = Counter(t.outcome for t in data.tests)
    tests = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items(), key=lambda kv: str(kv[0])))
    held = f" ({', '.join(parts)})" if parts else ""
    return f"checks: {len(gated)} gated{held}, {len(verdicts) - len(gated)} recorded as information; tests: {tests}"


_CHECK_WORDS: tuple[tuple[FigureVerdict, str], ...] = (
    ("pass", "held"),
    ("fail", "failed"),
    ("baseline_fail", "worse than the baseline"),
    ("xfail", "known issues"),
)


def lines(data: EvidenceDoc) -> list[str]:
    found = view.figures(data, failing_first=False)  # as the run printed them, test by test
    out: list[str] = []
    if found:
        nodes = any(f.node for f in found)
        head = ["metric", "value", "unit", "bound", "verdict"] + (["node"] if nodes else [])
        figures = [
            [f.metric, f.value, f.unit, f.bound or "-", f.verdict.upper(), *([f.node] if nodes else [])] for f in found
        ]
        out += render(head, figures).splitlines()
    run = view.Reported(data)
    for _, report in reporting():
        for head, rows in report.terminal(run) if report.terminal else []:
            out += ["", *render(head, rows).splitlines()]
    return out
