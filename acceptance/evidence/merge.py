"""One evidence document from several: the nodes of one run, or several runs of one cluster."""

from __future__ import annotations

from acceptance.evidence.model import EvidenceDoc, MergedFrom
from acceptance.evidence.verdict import verdict_of
from acceptance.verdicts import worst


def merge(documents: list[EvidenceDoc]) -> EvidenceDoc:
    """Tests are concatenated, each nodeid prefixed by the host that ran it; the verdict is the worst of
    the documents' verdicts, so a merge is PASS only if every document passed whole."""
    if not documents:
        raise ValueError("nothing to merge")
    merged = documents[0].model_copy(deep=True)
    merged.tests, merged.probes, merged.merged_from, merged.selected = [], [], [], []
    for doc in documents:
        host = doc.topology.host
        # hosts can share a name (containers, loopback runs): the node rank tells the nodes apart in reports
        node = f"node{doc.topology.node_rank}-{host}"
        merged.merged_from.append(
            MergedFrom(
                host=host, node=node, verdict=doc.verdict, complete=doc.complete, profile_sha256=doc.profile.sha256
            )
        )
        merged.tests += [
            t.model_copy(deep=True, update={"nodeid": f"{host}::{t.nodeid}", "node": node}) for t in doc.tests
        ]
        merged.probes += [p.model_copy(deep=True, update={"node": node}) for p in doc.probes]
        merged.selected += [f"{host}::{n}" for n in doc.selected]
    merged.complete = all(d.complete for d in documents)
    merged.partial = any(d.partial for d in documents)
    merged.verdict = worst(verdict_of(d) for d in documents)
    return merged
