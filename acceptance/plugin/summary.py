"""What the terminal shows of the run: the header lines and the closing table with the verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import acceptance
from acceptance.multinode.meeting import STORE_PORT_OFFSET
from acceptance.reports import summary
from acceptance.run.cluster_run import ClusterRun

UNCHECKED = "thresholds that no test checked: "  # the session's error when a selected module left one
VERDICT_WORDS = {
    "PASS": "PASS",
    "FAIL": "FAIL",
    "PARTIAL": "PARTIAL: only part of the suite was selected; not a verdict on the cluster",
    "INCOMPLETE": "INCOMPLETE: the run was interrupted; not a verdict on the cluster",
}


def header_lines(run: ClusterRun, meets: bool) -> list[str]:
    p, place, topo = run.profile, run.placement, run.topology
    lines = [
        f"cluster-acceptance {acceptance.__version__} ({Path(acceptance.__file__).parent})",
        f"cluster profile: {p.name} ({p.path}) sha256 {p.sha256[:16]}",
        f"cluster topology: {place.nodes} node(s) x {topo.nproc_per_node} rank(s), {topo.device}/{topo.backend}, "
        f"node rank {place.node_rank}, head {place.endpoint} (from {place.source})",
        f"cluster evidence: {run.evidence_dir}",
    ]
    if meets:
        lines.append(f"cluster plan: the nodes meet at {place.head}:{place.port + STORE_PORT_OFFSET} after collection")
    return lines


def summary_lines(data: dict[str, Any], path: str) -> list[tuple[str, str | None]]:
    """(line, colour) pairs: every checked figure, the unchecked thresholds, the errors, the verdict."""
    out: list[tuple[str, str | None]] = [(line, None) for line in summary.lines(data)]
    # the enforced ones are those the session's error names; the rest belong to tests not selected
    gate_off = next((e for e in data["errors"] if e.startswith(UNCHECKED)), "")
    enforced = set(gate_off.removeprefix(UNCHECKED).split(", ")) if gate_off else set()
    ignored = [m for m in data["unchecked_thresholds"] if m not in enforced]
    if enforced:
        out.append((f"thresholds no test checked [ERROR]: {', '.join(sorted(enforced))}", "red"))
    if ignored:
        kind = "not enforced: their tests were not selected, or the run was interrupted"
        out.append((f"thresholds no test checked [{kind}]: {', '.join(ignored)}", None))
    out.append((summary.counts(data), None))
    out += [(e.splitlines()[0], "red") for e in data["errors"]]
    verdict = data["verdict"]
    out.append((f"verdict: {VERDICT_WORDS[verdict]}; evidence: {path}", "green" if verdict == "PASS" else "red"))
    return out
