"""The one place a run's verdict is decided: the plugin, the sweep, bench_train and a merge all ask here, and
every reader of stored evidence (report, compare, merge, junit) asks ``verdict_of``.

PASS only for a whole, uninterrupted run that measured something and held every gate. A known failure
outranks an interruption (it is the news a person must act on); an interruption outranks a subset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acceptance.evidence.model import EvidenceDoc, Verdict

FAILED_OUTCOMES = ("failed", "error")
FAILED_CHECKS = ("fail", "baseline_fail")
ORDER: tuple[Verdict, ...] = ("FAIL", "INCOMPLETE", "PARTIAL", "PASS")  # worst first


@dataclass(frozen=True)
class Facts:
    """What a run knows at its end, as plain data."""

    outcomes: Sequence[str] = field(default_factory=list)  # each test's outcome
    check_verdicts: Sequence[str] = field(default_factory=list)  # each checked figure's verdict
    errors: Sequence[str] = field(default_factory=list)  # run-level errors: a gate off, a node missing, ...
    interrupted: bool = False
    subset: bool = False  # only part of the suite was selected
    node_verdicts: Sequence[str] = field(default_factory=list)  # the other nodes' verdicts (node 0 of several)


def facts_of(
    doc: EvidenceDoc, interrupted: bool = False, subset: bool = False, node_verdicts: Sequence[str] = ()
) -> Facts:
    """The facts an evidence document holds: its tests' outcomes, its figures' verdicts, its errors."""
    return Facts(
        outcomes=[t.outcome for t in doc.tests],
        check_verdicts=[c.verdict for t in doc.tests for c in t.checks],
        errors=list(doc.errors),
        interrupted=interrupted,
        subset=subset,
        node_verdicts=list(node_verdicts),
    )


def decide(facts: Facts) -> Verdict:
    """The verdict of ``facts``; a whole run that checked no figure at all is a FAIL (see ``problems``)."""
    failed = (
        any(o in FAILED_OUTCOMES for o in facts.outcomes)
        or any(v in FAILED_CHECKS for v in facts.check_verdicts)
        or bool(facts.errors)
        or (not facts.check_verdicts and not facts.interrupted)  # stopped before a figure: INCOMPLETE says it
    )
    verdicts: list[Verdict] = ["FAIL" if failed else "PASS"]
    if facts.interrupted:
        verdicts.append("INCOMPLETE")
    if facts.subset:
        verdicts.append("PARTIAL")
    verdicts += [v for v in facts.node_verdicts if v in ORDER]  # type: ignore[misc]
    verdicts += ["FAIL" for v in facts.node_verdicts if v not in ORDER]
    return worst(verdicts)


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    return min(verdicts, key=ORDER.index, default="FAIL")


NOTHING_MEASURED = "no figure was measured: every selected test was skipped or none ran"


def problems(facts: Facts) -> list[str]:
    """Run-level reasons a person needs beside a FAIL that no single test carries."""
    return [] if facts.check_verdicts or facts.interrupted else [NOTHING_MEASURED]


def _failed_anything(doc: Mapping[str, Any]) -> bool:
    tests = doc.get("tests") or []
    return (
        bool(doc.get("errors"))
        or any(t.get("outcome") in FAILED_OUTCOMES for t in tests)
        or any(c.get("verdict") in FAILED_CHECKS for t in tests for c in t.get("checks") or [])
        or any(p.get("status") == "failed" for p in doc.get("probes") or [])
    )


def verdict_of(doc: Mapping[str, Any]) -> Verdict:
    """A stored document's verdict, for every reader: PASS only for a complete run of the whole selection.
    Files from before PARTIAL and INCOMPLETE existed (PASS with ``partial``, or without ``complete``) read
    PARTIAL and INCOMPLETE, never PASS. A FAIL stands when the run ended or recorded a failure; a FAIL that a
    run still going (or killed) wrote before anything failed reads INCOMPLETE: nothing was judged yet."""
    stated = str(doc.get("verdict") or "FAIL").upper()
    if stated in ("PARTIAL", "INCOMPLETE"):
        return stated  # type: ignore[return-value]
    if stated != "PASS":
        return "FAIL" if doc.get("complete") or _failed_anything(doc) else "INCOMPLETE"
    if not doc.get("complete"):
        return "INCOMPLETE"
    return "PARTIAL" if doc.get("partial") else "PASS"
