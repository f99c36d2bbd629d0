"""The isolation's verdict in words: the one line that names the culprit, the rail that stands below the
others or the direction that is slow, and the evidence the line rests on."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from acceptance.families.connectivity import Link, endpoint, matrices
from acceptance.families.internode import pair_statistics as stats
from acceptance.families.internode.isolation_judge import Judge
from acceptance.families.internode.isolation_records import (
    BETA,
    MESSAGE_NAMES,
    WITNESS_ALPHA,
    IsolationEvidence,
    Status,
)


def message(iso: Judge) -> str:
    """One line: who is to blame, on what evidence, and the rail that stands below the others."""
    st = iso.status()
    head = f"isolation ({len(iso.rounds)} round{'s' * (len(iso.rounds) != 1)}"
    if iso.pairs and not math.isnan(st.level):
        head += (
            f"; healthy pair {st.level:.3g} GB/s, noise {st.sigma:.0%} a reading, "
            f"naming {math.exp(st.scale.effect):.2g}x and slower"
        )
    head += "): "
    parts: list[str] = []
    if iso.nodes == 2 and iso.pairs:
        parts.append(pair_of_two(iso))
    else:
        culprits = iso.culprits
        if len(culprits) <= 3:
            parts += [culprit(iso, node, st) for node in culprits]
        else:
            parts.append(
                f"{len(culprits)} nodes slow with two or more cleared partners each: "
                + _names([f"{iso.label(n)} {node_gbps(iso, n, st):.3g} GB/s" for n in culprits])
            )
        if len(st.paths) <= 3:
            parts += [
                f"the path {iso.label(a)} <-> {iso.label(b)} at {path_gbps(iso, a, b):.3g} GB/s "
                "while both are fast with others" + rail_text(iso, a, b)
                for a, b in st.paths
            ]
        else:
            parts.append(
                f"{len(st.paths)} paths slow between nodes fast with others: "
                + _names([f"{a} <-> {b}" for a, b in st.paths])
            )
        left = st.held + st.untested
        if left and iso.pairs:
            parts.append(
                f"not resolved in {len(iso.rounds)} rounds (slow pairs, too few cleared witnesses): "
                + _names([iso.label(n) for n in left])
            )
        noisy = {n: s for n, s in st.scale.noise.noisy.items() if n not in culprits}
        if noisy:
            # wider spread, not slower: judged at its own noise, never named or drained for it
            parts.append(
                _names([f"{iso.label(n)} noisy ({s:.0%} a reading)" for n, s in sorted(noisy.items())])
                + f" against {st.sigma:.0%} for the rest: judged at its own noise, not slow"
            )
        if st.too_noisy and iso.pairs:
            # leaning slow on evidence no stronger than the noise gives a healthy node: nobody to list
            parts.append(
                f"too noisy to judge {len(st.too_noisy)} node{'s' * (len(st.too_noisy) != 1)} in "
                f"{len(iso.rounds)} rounds (noise {st.sigma:.0%} a reading; none slow past its witnesses)"
            )
        if not parts and iso.pairs:
            parts.append(nobody(iso, st))
    if iso.error is not None:
        parts.append(f"round {len(iso.rounds)} failed: {iso.error}")
    return head + (" | ".join(parts) or "nothing measured")


def node_gbps(iso: Judge, node: int, st: Status) -> float:
    mine = [j.pair.gbps for j in st.judged if j.pair.has(node) and j.pair.other(node) in st.witnesses.get(node, [])]
    return stats.median(mine) if mine else math.nan


def path_gbps(iso: Judge, a: int, b: int) -> float:
    return min((p.gbps for p in iso.pairs if {p.a, p.b} == {a, b}), default=math.nan)


def culprit(iso: Judge, node: int, st: Status) -> str:
    mine = [j for j in st.judged if j.pair.has(node) and j.pair.other(node) in st.cleared]
    slow = [j.pair.gbps for j in mine if j.verdict == "slow"]
    partners = ", ".join(str(n) for n in st.witnesses[node])
    # none slow on its own at high noise, all of them together past the node's share of the budget: their
    # figures, and that it is their sum that names it
    figures = (
        f"at {_span(slow)} GB/s" if slow else f"none slow alone, together at {_span([j.pair.gbps for j in mine])} GB/s"
    )
    return (
        f"{iso.label(node)}: {len(slow)} of {len(mine)} pairs with cleared partners ({partners}) "
        f"{figures} against {st.level:.3g} healthy" + rail_text(iso, node)
    )


def pair_of_two(iso: Judge) -> str:
    figures = [f for p in iso.pairs for f in p.figures]
    return (
        f"{iso.label(0)} and {iso.label(1)}: their pair at {_span(figures)} GB/s; "
        "two nodes can only blame their pair, not one node: which end is slow takes a third node's "
        "reading" + rail_text(iso, 0, 1)
    )


def nobody(iso: Judge, st: Status) -> str:
    figures = [p.gbps for p in iso.pairs]
    line = (
        f"no node stands out: {len(figures)} pairs at {_span(figures)} GB/s, none named at "
        f"{iso.fraction:g} x the healthy level; every node shares the fault (a switch, the fabric) "
        "or the bound is too high"
    )
    ends = sorted({n for k in iso.rails for n in (k["src_node"], k["dst_node"])})
    below = [set(slow_rails(iso, n)) for n in ends]
    if ends and below[0] and all(b == below[0] for b in below):
        # the same rail below the others on every node measured, while every pair reads alike
        gpus = ", ".join(f"GPU {g} <-> GPU {g}" for g in sorted(below[0]))
        line += f"; rail {gpus} below the other rails on every node measured ({len(ends)}): that rail on every node"
    return line + rail_text(iso, *ends) if ends and not below[0] else line


def slow_rails(iso: Judge, node: int) -> dict[int, float]:
    """The rails of ``node`` (GPU index -> its slower direction's GB/s) that stand below its other
    rails: both directions under the midpoint to ``fraction`` x the others' median, by the same test as
    a pair (one reading a direction)."""
    per_rail: dict[int, list[float]] = {}
    for k in iso.rails:
        if node in (k["src_node"], k["dst_node"]):
            per_rail.setdefault(int(k["src_gpu"]), []).append(float(k["gbps"]))
    if len(per_rail) < 2:
        return {}
    sigma, effect = iso.status().sigma, iso.effect
    out: dict[int, float] = {}
    threshold = math.log((1 - BETA) * len(per_rail) / WITNESS_ALPHA)
    for gpu, figures in per_rail.items():
        others = [f for g, fs in per_rail.items() if g != gpu for f in fs if f > 0 and math.isfinite(f)]
        if not others:
            continue
        ref = math.log(stats.median(others))
        bad = [f for f in figures if not (f > 0 and math.isfinite(f))]
        logs = [math.log(f) - ref for f in figures if f > 0 and math.isfinite(f)]
        llr = math.inf if bad else sum(stats.llr(x, sigma**2, effect) for x in logs)
        if llr >= threshold:
            out[gpu] = min(figures)
    return out


def rail_text(iso: Judge, *nodes: int) -> str:
    mine = [k for k in iso.rails if {k["src_node"], k["dst_node"]} & set(nodes)]
    if not mine:
        return ""
    worst = min(mine, key=lambda k: k["gbps"] if not math.isnan(k["gbps"]) else -1.0)
    where = f"{endpoint(worst, 'src')} -> {endpoint(worst, 'dst')}"
    gpus = {int(k["src_gpu"]) for k in mine}
    if len(gpus) == 1:
        rail = f"GPU {worst['src_gpu']} <-> GPU {worst['dst_gpu']}"
        return f"; rail {rail} at {worst['gbps']:.3g} GB/s ({where}), the only rail"
    below = {g: f for n in nodes for g, f in slow_rails(iso, n).items()}
    way = direction(iso, nodes[0], mine) if nodes else ""
    if below and len(below) < len(gpus):
        named = ", ".join(f"GPU {g} <-> GPU {g} ({f:.3g} GB/s)" for g, f in sorted(below.items()))
        others = stats.median(float(k["gbps"]) for k in mine if int(k["src_gpu"]) not in below)
        return f"; rail {named} below the node's other rails ({others:.3g} GB/s median; slowest {where})" + way
    return (
        f"; rail GPU {worst['src_gpu']} <-> GPU {worst['dst_gpu']} slowest ({worst['gbps']:.3g} GB/s, {where}) "
        "but not below the others" + way
    )


def direction(iso: Judge, node: int, mine: Sequence[Link]) -> str:
    """Where the node's rails are slow one way only: sending or receiving, by the test of a pair (the
    median of each direction's rails against the other's). Two nodes: the slow direction between them,
    which of the two ends it is takes a third node."""
    sent = [math.log(k["gbps"]) for k in mine if k["src_node"] == node and k["gbps"] > 0 and math.isfinite(k["gbps"])]
    got = [math.log(k["gbps"]) for k in mine if k["dst_node"] == node and k["gbps"] > 0 and math.isfinite(k["gbps"])]
    if not sent or not got:
        return ""
    gap = stats.median(got) - stats.median(sent)  # > 0: its sends slower than what it receives
    sigma = iso.status().sigma
    variance = math.pi / 2 * sigma**2 * (1 / len(sent) + 1 / len(got))
    if stats.llr(-abs(gap), variance, iso.effect) < iso.witness_llr:
        return ""
    out, into = math.exp(stats.median(sent)), math.exp(stats.median(got))
    if iso.nodes == 2:
        return f"; slow one way only: {out:.3g} GB/s from node {node}, {into:.3g} GB/s to it"
    return f"; slow when it {'sends' if gap > 0 else 'receives'} ({out:.3g} GB/s out, {into:.3g} GB/s in)"


def evidence(iso: Judge) -> IsolationEvidence:
    st = iso.status()
    cells: dict[frozenset[int], float] = {}
    for p in iso.pairs:
        key = frozenset((p.a, p.b))
        cells[key] = min(p.gbps, cells.get(key, math.inf))
    return {
        "message": message(iso),
        "rounds": [r.spec() for r in iso.rounds],
        "pairs": [
            {
                "a": j.pair.a,
                "b": j.pair.b,
                "gbps": j.pair.gbps,
                "repeats_gbps": list(j.pair.figures),
                "wrong": j.pair.wrong,
                "round": j.pair.round,
                "log_ratio": j.log_ratio,
                "outliers": j.outliers,
                "llr": j.llr,
                "verdict": j.verdict,
            }
            for j in st.judged
        ],
        "pair_matrix": {
            "labels": [iso.label(n) for n in range(iso.nodes)],
            "matrix": [[cells.get(frozenset((a, b))) for b in range(iso.nodes)] for a in range(iso.nodes)],
            "unit": "busbw_gbps",
        },
        "healthy_gbps": st.level,
        "slow_under_gbps": st.level * math.exp(st.scale.effect / 2),
        "slow_pair_fraction": iso.fraction,
        "noise_sigma": st.sigma,
        "noise_dof": st.scale.dof,
        "noisy": {str(n): s for n, s in sorted(st.scale.noise.noisy.items())},
        "flapping_nodes": sorted(st.scale.noise.flapping),
        "outliers": sum(j.outliers for j in st.judged),
        "outlier_cut": st.scale.noise.cut,
        "noise_by_round": list(iso.noise_by_round),
        "named_fraction": math.exp(st.scale.effect),
        "resolution": math.exp(st.scale.resolution),
        "repeats": iso.repeats,
        "alpha": iso.alpha,
        "name_llr": iso.name_llr,
        "witness_llr": iso.witness_llr,
        "clear_llr": iso.clear_llr,
        "cleared": st.cleared,
        "culprits": iso.culprits,
        "hosts": {str(n): h for n, h in sorted(iso.hosts.items())},
        "witnesses": {str(n): w for n, w in st.witnesses.items()},
        "paths": [list(p) for p in st.paths],
        "flapping": [[j.pair.a, j.pair.b] for j in st.flapping],
        "undecided": st.undecided,
        "suspects": st.suspects,
        "too_noisy": st.too_noisy,
        "untested": st.untested,
        "hint": [list(p) for p in iso.hint],
        "rails": iso.rails,
        "rail_matrices": matrices(iso.rails, "gpu"),
        "slow_rails": {
            str(n): sorted(slow_rails(iso, n)) for n in sorted({*iso.culprits, *(x for p in st.paths for x in p)})
        },
        "error": iso.error,
    }


def _names(items: Iterable[str]) -> str:
    listed = list(items)
    shown = ", ".join(listed[:MESSAGE_NAMES])
    return shown + (
        f" and {len(listed) - MESSAGE_NAMES} more (all in the evidence)" if len(listed) > MESSAGE_NAMES else ""
    )


def _span(values: list[float]) -> str:
    usable = [v for v in values if not math.isnan(v)]
    if not usable:
        return "nan"
    lo, hi = min(usable), max(usable)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"
