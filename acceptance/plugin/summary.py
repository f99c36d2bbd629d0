"""What the terminal shows of the run: the header lines and the closing table with the verdict."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from pathlib import Path

import acceptance
from acceptance.evidence.causes import action
from acceptance.evidence.drain import PREFLIGHT, DrainList, preflight_causes
from acceptance.evidence.model import Case, Check, EvidenceDoc
from acceptance.multinode.meeting import STORE_PORT_OFFSET
from acceptance.profile.registry import FAMILIES
from acceptance.reports import summary
from acceptance.run.cluster_run import ClusterRun
from acceptance.verdicts import FAILED_FIGURES, INFORMATION, family_word

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


NOT_JUDGED = "not judged"  # a family whose figures were all information: nothing held it to a bound
# where a gated figure's bound came from, in the order the family line names them
ORIGINS = ("profile", "reference row", "hardware floor", "built-in")
HARDWARE_FLOOR = "hardware floor"  # how init's floors begin their source (acceptance.profile.floors)
REFERENCE_ROW = "reference:"  # how init's bounds from a reference row begin theirs (Reference.bound_source)


def bound_origin(check: Check, profile_thresholds: Collection[str]) -> str:
    """Where a gated figure's bound came from: the profile (init's hardware floors and reference rows named
    apart, by the source init wrote), else the run or the metric's built-in bound."""
    if check.metric not in profile_thresholds:
        return "built-in"
    source = str((check.threshold or {}).get("source") or "")
    if source.startswith(HARDWARE_FLOOR):
        return "hardware floor"
    return "reference row" if source.startswith(REFERENCE_ROW) else "profile"


def _profile_thresholds(data: EvidenceDoc) -> set[str]:
    thresholds = data.profile.resolved.get("thresholds")
    return set(thresholds) if isinstance(thresholds, dict) else set()


def _family_state(tests: list[Case], profile_thresholds: Collection[str]) -> tuple[str, int, float, str]:
    """A family's word (FAIL, PASS, not judged, skipped), its gated figures, its tests' wall and where the
    gated figures' bounds came from: the word is the run's decision applied to the family's own tests."""
    checks = [c for t in tests for c in t.checks]
    word = family_word([t.outcome for t in tests], [c.verdict for c in checks])
    gated = [c for c in checks if c.verdict != INFORMATION]
    if not gated and word in ("recorded", "passed"):
        word = NOT_JUDGED
    wall = sum(t.duration_s for t in tests)
    origins = Counter(bound_origin(c, profile_thresholds) for c in gated)
    against = sum(1 for c in gated if c.baseline is not None)
    parts = [f"{origins[o]} {o}" for o in ORIGINS if origins[o]] + ([f"{against} baseline"] if against else [])
    return word, len(gated), wall, ", ".join(parts)


def family_lines(data: EvidenceDoc) -> list[tuple[str, str | None]]:
    """One line per family that ran, in the run's order: its word, its gated figures, its wall and where
    their bounds came from; the verdict of 120 rows in as many lines as families."""
    out: list[tuple[str, str | None]] = []
    profile_thresholds = _profile_thresholds(data)
    for family in FAMILIES:
        mine = [t for t in data.tests if Path(t.nodeid.split("::")[0]).stem == family.module]
        if not mine:
            continue
        word, gated, wall, origins = _family_state(mine, profile_thresholds)
        colour = "red" if word == "FAIL" else "green" if word == "PASS" else None
        line = f"{family.name:<13} {word:<10} {gated:>4} figure(s) gated  {wall:7.1f} s"
        out.append((line + (f"  bounds: {origins}" if origins else ""), colour))
    return out


def judged_words(data: EvidenceDoc) -> str:
    """How many of the tier's families (else of those that ran) held at least one figure to a bound."""
    ran = {Path(t.nodeid.split("::")[0]).stem for t in data.tests}
    names = data.tier.families + data.tier.added if data.tier is not None else []
    families = [f for f in FAMILIES if f.name in names] if names else [f for f in FAMILIES if f.module in ran]
    judged = [
        f.name
        for f in families
        if any(c.verdict != INFORMATION for t in data.tests if Path(t.nodeid.split("::")[0]).stem == f.module
               for c in t.checks)
    ]  # fmt: skip
    return f"{len(judged)} of {len(families)} families judged"


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


def cause_lines(data: EvidenceDoc) -> list[str]:
    """A failed preflight stopped the run before anything was measured: its line is the cause, said first with
    the action the drain list gives it (a CPU-only torch under a GPU profile: fix the install)."""
    causes = preflight_causes(data).items()
    return [f"cause ({action(category)}): {line.removeprefix(PREFLIGHT)}" for line, category in causes]


# the families whose figures are measured per message size (a metric with a ``size`` domain): after one
# fails, `cluster-acceptance sweep` measures the collectives across sizes
SWEPT = tuple(f.prefix for f in FAMILIES if any("size" in m.domains for m in f.metrics))


def next_lines(data: EvidenceDoc, path: str, drain: DrainList | None) -> list[str]:
    """After a FAIL: where to look and what to run next; the drain list and what was done with it."""
    out: list[str] = []
    if drain is not None:
        folder = Path(path).parent
        for node in drain["nodes"]:
            gpus = f" GPU {', '.join(node['gpus'])}" if node["gpus"] else ""
            # a drained node's action is in its GPUs (none: the node); one for review says what to do instead
            plain = node["severity"] == "drain" or node["action"] == "review"
            said = node["severity"] if plain else f"review: {node['action']}"
            out.append(f"drain: {node['scheduler_name']}{gpus} ({said}): {node['reason']}")
        out += [f"drain applied: {line}" for line in drain["applied"]]
        out.append(f"drain list: {folder / 'drain.json'}")
    if data.verdict == "FAIL":
        out.append(_what_next(data, Path(path).parent))
    return out


def _what_next(data: EvidenceDoc, folder: Path) -> str:
    causes = set(preflight_causes(data).values())
    if causes:  # nothing was measured: neither the report nor a sweep has anything to add
        return f"what next: {', '.join(sorted(action(c) for c in causes))} (the cause above), then run again"
    line = (
        f"what next: the probes' logs are under {folder / 'probes'}; `cluster-acceptance report {folder}` "
        "writes the report, failing figures first"
    )
    failed = [c.metric for t in data.tests for c in t.checks if c.verdict in FAILED_FIGURES]
    if any(metric.startswith(SWEPT) for metric in failed):
        line += "; `cluster-acceptance sweep` measures the collectives across sizes, as nccl-tests does"
    return line


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
    skips' reasons, the errors, the verdict, and after a FAIL the drain list and what to do next; a failed
    preflight's cause comes first."""
    out: list[tuple[str, str | None]] = [(line, "red") for line in cause_lines(data)]
    out += family_lines(data)
    out += [("", None)] if out else []
    out += [(line, None) for line in summary.lines(data)]
    # the enforced ones are those the session's error names; the rest belong to tests not selected
    gate_off = next((e for e in data.errors if e.startswith(UNCHECKED)), "")
    enforced = set(gate_off.removeprefix(UNCHECKED).split(", ")) if gate_off else set()
    ignored = [m for m in data.unchecked_thresholds if m not in enforced]
    if enforced:
        out.append((f"thresholds no test checked [ERROR]: {', '.join(sorted(enforced))}", "red"))
    causes = cause_lines(data)
    if ignored and causes:  # the cause above says why; the names would bury it
        out.append((f"thresholds no test checked: {len(ignored)} thresholds, the preflight failed first", None))
    elif ignored:
        kind = "not enforced: their tests were not selected, or the run was interrupted"
        out.append((f"thresholds no test checked [{kind}]: {', '.join(ignored)}", None))
    out += [(line, None) for line in skip_lines(data)]
    out.append((summary.counts(data), None))
    tier = tier_line(data)
    out += [(tier, None)] if tier else []
    said = set(preflight_causes(data))  # the cause line said it first
    out += [(e.splitlines()[0], "red") for e in data.errors if e.splitlines()[0] not in said]
    out += [(line, "red") for line in next_lines(data, path, drain)]
    verdict = data.verdict
    line = f"verdict: {VERDICT_WORDS[verdict]}; {judged_words(data)}; evidence: {path}"
    out.append((line, "green" if verdict == "PASS" else "red"))
    return out
