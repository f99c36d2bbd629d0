"""One evidence document from several: the nodes of one run, or several runs of one cluster.

Documents of different profiles are refused: one verdict against two sets of bounds is no verdict. Two
documents of one node (the same run given twice, or two runs of one host) are merged labelled apart, the
second ``node0-vm~2``, so no test id is counted twice; ``notes`` says so for the command's output.
"""

from __future__ import annotations

from collections import Counter

from acceptance.evidence.model import EvidenceDoc, MergedFrom
from acceptance.evidence.verdict import verdict_of
from acceptance.verdicts import worst


class MergeError(ValueError):
    """Documents that cannot be merged into one verdict; the message names them."""


def _labels(documents: list[EvidenceDoc]) -> list[str]:
    """``node<rank>-<host>`` per document (hosts can share a name: containers, loopback runs), a repeat
    of one suffixed ``~2``, ``~3``."""
    seen: Counter[str] = Counter()
    labels = []
    for doc in documents:
        label = f"node{doc.topology.node_rank}-{doc.topology.host}"
        seen[label] += 1
        labels.append(label if seen[label] == 1 else f"{label}~{seen[label]}")
    return labels


def notes(documents: list[EvidenceDoc]) -> list[str]:
    """What a person merging ``documents`` should know: the nodes given more than once, and their labels."""
    labels = _labels(documents)
    out = []
    for base, count in Counter(label.partition("~")[0] for label in labels).items():
        if count > 1:
            shown = ", ".join(label for label in labels if label.partition("~")[0] == base)
            out.append(f"{count} documents of one node ({base}): labelled {shown}")
    return out


def _refuse_mixed_profiles(documents: list[EvidenceDoc]) -> None:
    profiles = {(d.profile.name, d.profile.sha256) for d in documents}
    if len(profiles) > 1:
        shown = ", ".join(f"{name} (sha256 {sha[:12]})" for name, sha in sorted(profiles))
        raise MergeError(f"documents of different profiles: {shown}; merge the runs of one profile")


def merge(documents: list[EvidenceDoc]) -> EvidenceDoc:
    """Tests are concatenated, each nodeid prefixed by the host that ran it (``host~2`` for a node's second
    document); the verdict is the worst of the documents' verdicts, so a merge is PASS only if every
    document passed whole. An error every document holds is kept once, any other prefixed by its node."""
    if not documents:
        raise MergeError("nothing to merge")
    _refuse_mixed_profiles(documents)
    merged = documents[0].model_copy(deep=True)
    merged.tests, merged.probes, merged.merged_from, merged.selected = [], [], [], []
    shared = [e for e in documents[0].errors if all(e in d.errors for d in documents)]
    merged.errors = list(shared)
    for doc, node in zip(documents, _labels(documents), strict=True):
        host = doc.topology.host + node.partition("~")[1] + node.partition("~")[2]
        merged.merged_from.append(
            MergedFrom(
                host=doc.topology.host,
                node=node,
                verdict=doc.verdict,
                complete=doc.complete,
                profile_sha256=doc.profile.sha256,
            )
        )
        merged.tests += [
            t.model_copy(deep=True, update={"nodeid": f"{host}::{t.nodeid}", "node": node}) for t in doc.tests
        ]
        merged.probes += [p.model_copy(deep=True, update={"node": node}) for p in doc.probes]
        merged.selected += [f"{host}::{n}" for n in doc.selected]
        merged.errors += [f"{node}: {e}" for e in doc.errors if e not in shared]
    merged.complete = all(d.complete for d in documents)
    merged.partial = any(d.partial for d in documents)
    merged.verdict = worst(verdict_of(d) for d in documents)
    return merged
