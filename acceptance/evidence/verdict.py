"""The facts an evidence document holds, for the one decision (``acceptance.verdicts.decide``).

The plugin, the sweep and bench_train decide their run's verdict from ``facts_of`` their document; every
document read back from a file is decided again by ``verdict_of`` (``read_evidence`` does it on read), so a
file's stated PASS is never trusted: a hand-edited PASS beside a failed figure, or a PASS that measured
nothing, reads FAIL in every reader.
"""

from __future__ import annotations

from collections.abc import Sequence

from acceptance.evidence.model import EvidenceDoc
from acceptance.verdicts import Facts, RunVerdict, decide


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


def stored_facts(doc: EvidenceDoc) -> Facts:
    """The facts of a document as stored: ``complete`` and ``partial`` say whether the run was interrupted
    or a subset; the stated verdict answers for what the file does not hold (the other nodes' verdicts) and
    may only make the decision worse. Files from before PARTIAL and INCOMPLETE existed (PASS with
    ``partial``, or without ``complete``) read PARTIAL and INCOMPLETE. A stated FAIL of a run still going
    (or killed) that recorded no failure reads INCOMPLETE: nothing was judged yet. A stated INCOMPLETE stays:
    that run's record is not whole (its evidence could not be written)."""
    stated = doc.verdict
    probe_failed = any(p.status == "failed" for p in doc.probes)
    unjudged_fail = stated == "FAIL" and not doc.complete and not probe_failed
    return Facts(
        outcomes=[t.outcome for t in doc.tests],
        check_verdicts=[c.verdict for t in doc.tests for c in t.checks],
        errors=list(doc.errors),
        interrupted=not doc.complete,
        subset=doc.partial,
        node_verdicts=[] if unjudged_fail else [stated],
        unrecorded=stated == "INCOMPLETE",
    )


def verdict_of(doc: EvidenceDoc) -> RunVerdict:
    """A stored document's verdict, decided again from its facts: PASS only for a complete run of the whole
    selection that measured something and failed nothing."""
    return decide(stored_facts(doc))
