"""What the terminal shows of the run: the header lines and the closing table with the verdict."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import acceptance
from acceptance.evidence.drain import DrainList
from acceptance.evidence.model import Case, EvidenceDoc
from acceptance.multinode.meeting import STORE_PORT_OFFSET
from acceptance.profile.registry import FAMILIES
from acceptance.reports import summary
from acceptance.run.cluster_run import ClusterRun
from acceptance.verdicts import INFORMATION, family_word

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


def _family_state(tests: list[Case]) -> tuple[str, int, float]:
    """A family's word (FAIL, PASS, recorded, skipped), its gated figures and its tests' wall: the word is
    the run's decision applied to the family's own tests."""
    verdicts = [c.verdict for t in tests for c in t.checks]
    word = family_word([t.outcome for t in tests], verdicts)
    wall = sum(t.duration_s for t in tests)
    return word, sum(1 for v in verdicts if v != INFORMATION), wall


def family_lines(data: EvidenceDoc) -> list[tuple[str, str | None]]:
    """One line per family that ran, in the run's order: its word, its gated figures, its wall; the verdict
    of 120 rows in as many lines as families."""
    out: list[tuple[str, str | None]] = []
    for family in FAMILIES:
        mine = [t for t in data.tests if Path(t.nodeid.split("::")[0]).stem == family.module]
        if not mine:
            continue
        word, gated, wall = _family_state(mine)
        colour = "red" if word == "FAIL" else "green" if word == "PASS" else None
        out.append((f"{family.name:<13} {word:<9} {gated:>4} figure(s) gated  {wall:7.1f} s", colour))
    return out


def skip_lines(data: EvidenceDoc) -> list[str]:
    """Why tests were skipped, one line per reason with how many tests it skipped and their families."""
    found: Counter[str] = Counter()
    families: dict[str, set[str]] = {}
    for test in data.tests:
        if test.outcome != "skipped":
            continue
        reason = (test.message or "no reason given").splitlines()[0]
        found[reason] += 1
        module = Path(test.nodeid.split("::")[0]).stem
        families.setdefault(reason, set()).add(module.removeprefix("test_"))
    return [f"skipped {n} ({', '.join(sorted(families[r]))}): {r}" for r, n in found.most_common()]


def next_lines(data: EvidenceDoc, path: str, drain: DrainList | None) -> list[str]:
    """After a FAIL: where to look and what to run next; the drain list and what was done with it."""
    out: list[str] = []
    if drain is not None:
        folder = Path(path).parent
        for node in drain["nodes"]:
            gpus = f" GPU {', '.join(node['gpus'])}" if node["gpus"] else ""
            out.append(f"drain: {node['scheduler_name']}{gpus} ({node['severity']}): {node['reason']}")
        out += [f"drain applied: {line}" for line in drain["applied"]]
        out.append(f"drain list: {folder / 'drain.json'}")
    if data.verdict == "FAIL":
        folder = Path(path).parent
        out.append(
            f"what next: the probes' logs are under {folder / 'probes'}; `cluster-acceptance report {folder}` "
            "writes the report, failing figures first; `cluster-acceptance sweep` measures the collectives "
            "across sizes, as nccl-tests does"
        )
    return out


def tier_line(data: EvidenceDoc) -> str | None:
    tier = data.tier
    if tier is None:
        return None
    budget, wall = tier.budget_s, tier.wall_s
    within = ""
    if budget is not None and wall is not None:
        within = f" of its {budget:g} s budget" + (" (OVER)" if wall > budget else "")
    name = " + ".join([tier.name, *tier.added])
    return f"tier {name}: {wall} s{within}" if wall is not None else f"tier {name}"


def summary_lines(data: EvidenceDoc, path: str, drain: DrainList | None = None) -> list[tuple[str, str | None]]:
    """(line, colour) pairs: one line per family, every checked figure, the unchecked thresholds, the
    skips' reasons, the errors, the verdict, and after a FAIL the drain list and what to do next."""
    out = family_lines(data)
    out += [("", None)] if out else []
    out += [(line, None) for line in summary.lines(data)]
    # the enforced ones are those the session's error names; the rest belong to tests not selected
    gate_off = next((e for e in data.errors if e.startswith(UNCHECKED)), "")
    enforced = set(gate_off.removeprefix(UNCHECKED).split(", ")) if gate_off else set()
    ignored = [m for m in data.unchecked_thresholds if m not in enforced]
    if enforced:
        out.append((f"thresholds no test checked [ERROR]: {', '.join(sorted(enforced))}", "red"))
    if ignored:
        kind = "not enforced: their tests were not selected, or the run was interrupted"
        out.append((f"thresholds no test checked [{kind}]: {', '.join(ignored)}", None))
    out += [(line, None) for line in skip_lines(data)]
    out.append((summary.counts(data), None))
    tier = tier_line(data)
    out += [(tier, None)] if tier else []
    out += [(e.splitlines()[0], "red") for e in data.errors]
    out += [(line, "red") for line in next_lines(data, path, drain)]
    verdict = data.verdict
    out.append((f"verdict: {VERDICT_WORDS[verdict]}; evidence: {path}", "green" if verdict == "PASS" else "red"))
    return out
