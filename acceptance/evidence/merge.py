"""One evidence document from several: the nodes of one run, or several runs of one cluster."""

from __future__ import annotations

import copy
from typing import Any

from acceptance.evidence.verdict import verdict_of, worst


def merge(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Tests are concatenated, each nodeid prefixed by the host that ran it; the verdict is the worst of
    the documents' verdicts, so a merge is PASS only if every document passed whole."""
    if not documents:
        raise ValueError("nothing to merge")
    merged = copy.deepcopy(documents[0])
    merged["tests"], merged["probes"], merged["merged_from"], merged["selected"] = [], [], [], []
    for doc in documents:
        host = (doc.get("topology") or {}).get("host", "?")
        # hosts can share a name (containers, loopback runs): the node rank tells the nodes apart in reports
        node = f"node{(doc.get('topology') or {}).get('node_rank', len(merged['merged_from']))}-{host}"
        merged["merged_from"].append(
            {
                "host": host,
                "node": node,
                "verdict": doc.get("verdict"),
                "complete": doc.get("complete"),
                "profile_sha256": doc.get("profile", {}).get("sha256"),
            }
        )
        merged["tests"] += [{**t, "nodeid": f"{host}::{t['nodeid']}", "node": node} for t in doc.get("tests", [])]
        merged["probes"] += [{**p, "node": node} for p in doc.get("probes", [])]
        merged["selected"] += [f"{host}::{n}" for n in doc.get("selected") or []]
    merged["complete"] = all(d.get("complete") for d in documents)
    merged["partial"] = any(d.get("partial") for d in documents)
    merged["verdict"] = worst(verdict_of(d) for d in documents)
    return merged
