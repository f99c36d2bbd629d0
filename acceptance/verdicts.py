"""The verdict vocabulary, and the one function that decides a run's verdict from what the run knows.

A figure's verdict is decided by the judge (``acceptance.profile.judge``) and stored with the figure; a run's
verdict is decided here, from the stored figure verdicts, the tests' outcomes and the run's errors. Every
reader (the test outcome, the session's end, JUnit, the summary, the report, compare, merge, the drain list)
reads these words and asks ``decide``: none decides again by its own rule.

PASS only for a whole, uninterrupted run that measured something and held every gate. A known failure
outranks an interruption (it is the news a person must act on); an interruption outranks a subset.

Beside them, the words for whose fault a failure is (``Category``): the judge's figures, the preflight, the
drain list and the report all speak them, and ``acceptance.evidence.causes`` says what each one asks for.

A leaf: it imports nothing of the package, so every layer may name these words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

# the verdict of one figure, as the judge decides it
FigureVerdict = Literal["pass", "fail", "xfail", "info", "baseline_fail"]
# baseline_fail: the bound held, the figure is worse than --cluster-baseline's beyond the tolerance
FAILED_FIGURES: frozenset[FigureVerdict] = frozenset({"fail", "baseline_fail"})
INFORMATION: FigureVerdict = "info"  # recorded without a bound: it neither passes nor fails

# the verdict of a run (or of a merge of several), worst first
RunVerdict = Literal["PASS", "FAIL", "PARTIAL", "INCOMPLETE"]
ORDER: tuple[RunVerdict, ...] = ("FAIL", "INCOMPLETE", "PARTIAL", "PASS")

# the outcome of a test. interrupted: the test was running when the run was stopped; not_run: the run was
# stopped before it; recorded: the test ran and every figure it checked is information (no bound): nothing
# held, nothing passed
Outcome = Literal[
    "running", "passed", "recorded", "failed", "error", "skipped", "xfailed", "xpassed", "interrupted", "not_run"
]
# the outcomes of a test that fail the run
FAILED_OUTCOMES: tuple[Outcome, ...] = ("failed", "error")

# whose fault a failure is. The node's own: its hardware (a GPU missing or slow, a port down), the fabric
# across nodes (a link between nodes, which an isolation may blame on one of them), its configuration
# (another process on its GPUs); the run's environment: the suite's install (software), its settings
# (environment), another job's process on the run's GPU while a figure was timed (foreign load: the GPU is
# shared, not broken), the run itself (suite)
Category = Literal["hardware", "fabric", "configuration", "software", "environment", "foreign load", "suite"]
NODE_FAULTS: frozenset[Category] = frozenset({"hardware", "fabric", "configuration"})
# a failed figure measured across nodes, whose cause no one recorded: the links between the nodes it names
ACROSS_NODES: Category = "fabric"

NOTHING_MEASURED = "no figure was measured: every selected test was skipped or none ran"


def figure_failed(verdict: str) -> bool:
    return verdict in FAILED_FIGURES


@dataclass(frozen=True)
class Facts:
    """What a run knows at its end, as plain data."""

    outcomes: Sequence[str] = field(default_factory=list)  # each test's outcome
    check_verdicts: Sequence[str] = field(default_factory=list)  # each checked figure's verdict, the judge's
    errors: Sequence[str] = field(default_factory=list)  # run-level errors: a gate off, a node missing, ...
    interrupted: bool = False
    subset: bool = False  # only part of the suite was selected
    # verdicts decided elsewhere that this one answers for: the other nodes' (node 0 of several), or the
    # verdict a stored document recorded (it may only make the decision worse, never better)
    node_verdicts: Sequence[str] = field(default_factory=list)
    # the evidence could not be written (or a stored run said it was INCOMPLETE): what it knows is not on
    # record whole, so it is no verdict on the cluster, whatever else it says
    unrecorded: bool = False


def decide(facts: Facts) -> RunVerdict:
    """The verdict of ``facts``; a whole run that checked no figure at all is a FAIL (see ``problems``)."""
    if facts.unrecorded:
        return "INCOMPLETE"
    failed = (
        any(o in FAILED_OUTCOMES for o in facts.outcomes)
        or any(figure_failed(v) for v in facts.check_verdicts)
        or bool(facts.errors)
        or (not facts.check_verdicts and not facts.interrupted)  # stopped before a figure: INCOMPLETE says it
    )
    verdicts: list[RunVerdict] = ["FAIL" if failed else "PASS"]
    if facts.interrupted:
        verdicts.append("INCOMPLETE")
    if facts.subset:
        verdicts.append("PARTIAL")
    verdicts += [v for v in ORDER if v in facts.node_verdicts]
    verdicts += ["FAIL" for v in facts.node_verdicts if v not in ORDER]  # a garbled word is no PASS
    return worst(verdicts)


def worst(verdicts: Iterable[RunVerdict]) -> RunVerdict:
    return min(verdicts, key=ORDER.index, default="FAIL")


def problems(facts: Facts) -> list[str]:
    """Run-level reasons a person needs beside a FAIL that no single test carries."""
    return [] if facts.check_verdicts or facts.interrupted else [NOTHING_MEASURED]


def family_word(outcomes: Sequence[str], check_verdicts: Sequence[str]) -> str:
    """A family's word in the summary: FAIL or PASS as ``decide`` says of the family's own tests (PASS only
    where a figure was gated), else what its tests did: recorded (information only), skipped, passed, not run."""
    verdict = decide(Facts(outcomes=outcomes, check_verdicts=check_verdicts))
    # a family that checked nothing is no run of its own: "no figure measured" fails a run, not a family
    if verdict == "FAIL" and (check_verdicts or any(o in FAILED_OUTCOMES for o in outcomes)):
        return "FAIL"
    gated = [v for v in check_verdicts if v != INFORMATION]
    if gated:
        return "PASS"
    if check_verdicts:
        return "recorded"
    if all(o == "skipped" for o in outcomes):
        return "skipped"
    return "passed" if any(o == "passed" for o in outcomes) else "not run"


def turned_fail(before: str | None, after: str | None) -> bool:
    """Whether a figure's stored verdict turned to ``fail`` (its bound missed) between two runs; a
    ``baseline_fail`` is the baseline's news, not the bound's, and a figure not measured is ``None``."""
    return after == "fail" and before != "fail"
