"""The one place a verdict is decided: the plugin, the sweep, bench_train and a merge all ask here.

PASS only for a whole, uninterrupted run that measured something and held every gate. A known failure
outranks an interruption (it is the news a person must act on); an interruption outranks a subset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acceptance.evidence.model import Verdict

FAILED_OUTCOMES = ("failed", "error")
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


def decide(facts: Facts) -> Verdict:
    """The verdict of ``facts``; a whole run that checked no figure at all is a FAIL (see ``problems``)."""
    failed = (
        any(o in FAILED_OUTCOMES for o in facts.outcomes)
        or any(v in ("fail", "baseline_fail") for v in facts.check_verdicts)
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


def effective(doc: Mapping[str, Any]) -> Verdict:
    """A document's verdict as the model defines it, also for evidence written before PARTIAL and
    INCOMPLETE existed (PASS with ``complete: false`` or ``partial: true`` there)."""
    verdict = doc.get("verdict")
    if verdict not in ORDER:
        return "FAIL"
    if verdict == "PASS" and not doc.get("complete"):
        return "INCOMPLETE"
    if verdict == "PASS" and doc.get("partial"):
        return "PARTIAL"
    return verdict  # type: ignore[no-any-return]
