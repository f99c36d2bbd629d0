"""Reading an evidence file for people: a Markdown report (with a busbw plot when matplotlib is there)
and a side-by-side comparison of two runs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from acceptance.numbers import fmt
from acceptance.profile.sizes import parse_size

# failing first: the reader came for what is wrong
VERDICT_ORDER = {"fail": 0, "xfail": 1, "pass": 2, "info": 3}


def sweep_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of every collective sweep that ran to the end, from the probes' results."""
    rows: list[dict[str, Any]] = []
    for probe in data.get("probes", []):
        if probe.get("name") == "collectives" and probe.get("status") == "ok":
            rows += (probe.get("result") or {}).get("rows", [])
    return rows


def plot_busbw(rows: list[dict[str, Any]], path: Path, title: str) -> bool:
    """busbw against message size, one line per op; False when matplotlib is not installed or no rows."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = sorted((r for r in rows if r["op"] == op), key=lambda r: r["size_bytes"])
        ax.plot([r["size_bytes"] for r in mine], [r["busbw_gbps"] for r in mine], marker="o", label=op)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s, 1 GB = 1e9 B)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def markdown(data: dict[str, Any], plot: str | None = None) -> str:
    profile, topo = data.get("profile", {}), data.get("topology", {})
    done = "complete" if data.get("complete") else "INCOMPLETE (interrupted or still running)"
    parts = [
        f"# Cluster acceptance: {data.get('verdict')}",
        "",
        _table(
            ("", ""),
            [
                ("verdict", f"**{data.get('verdict')}** ({done})"),
                ("profile", f"{profile.get('name')} (`{profile.get('path')}`), sha256 `{profile.get('sha256')}`"),
                ("topology", _topology(topo)),
                ("started / finished", f"{data.get('started')} / {data.get('finished')}"),
                ("command", f"`{' '.join(data.get('command') or [])}`"),
            ],
        ),
        *_cluster(data.get("cluster", {})),
        *_checks(data),
        *_problems(data),
        *_sweep(data, plot),
    ]
    return "\n".join(parts).rstrip() + "\n"


def _topology(topo: dict[str, Any]) -> str:
    return (
        f"{topo.get('nodes')} node(s) x {topo.get('ranks_per_node')} rank(s), world size {topo.get('world_size')}, "
        f"head {topo.get('head')} (from {topo.get('source')}); written on {topo.get('host')}"
    )


def _cluster(cluster: dict[str, Any]) -> list[str]:
    out = ["", "## Cluster", ""]
    nodes = cluster.get("nodes") or []
    if nodes:
        rows = [
            (
                n.get("host"),
                n.get("node_rank", ""),
                len(n.get("devices", [])),
                "; ".join(_device(d) for d in n.get("devices", [])),
            )
            for n in nodes
        ]
        out.append(_table(("host", "node rank", "ranks", "devices"), rows))
    else:
        out.append("No node inventory (the connectivity probe did not run to the end).")
    software = cluster.get("software") or {}
    out += ["", "Software: " + ", ".join(f"{k} {v}" for k, v in software.items() if v)]
    return out


def _device(device: dict[str, Any]) -> str:
    name = device.get("device_name") or device.get("device")
    uuid = f" {device['uuid']}" if device.get("uuid") else ""
    return f"rank {device.get('rank')}: {name}{uuid}"


def _checks(data: dict[str, Any]) -> list[str]:
    checks = [(c, t["nodeid"]) for t in data.get("tests", []) for c in t.get("checks", [])]
    checks.sort(key=lambda ct: VERDICT_ORDER.get(ct[0]["verdict"], 9))
    counts = {v: sum(1 for c, _ in checks if c["verdict"] == v) for v in VERDICT_ORDER}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    rows = [
        (c["verdict"].upper(), f"`{c['metric']}`", fmt(c["value"]), c["unit"], c.get("bound") or "-", f"`{nodeid}`")
        for c, nodeid in checks
    ]
    out = ["", f"## Checks ({summary or 'none'})", ""]
    out.append(_table(("verdict", "metric", "value", "unit", "bound", "test"), rows) if rows else "No checks.")
    return out


def _problems(data: dict[str, Any]) -> list[str]:
    bad = [t for t in data.get("tests", []) if t.get("outcome") not in ("passed", "skipped", "xfailed")]
    skipped = [t for t in data.get("tests", []) if t.get("outcome") in ("skipped", "xfailed")]
    out: list[str] = []
    if bad:
        rows = [(t["outcome"], f"`{t['nodeid']}`", _first_line(t.get("message", ""))) for t in bad]
        out += ["", "## Tests that did not pass", "", _table(("outcome", "test", "message"), rows)]
    if skipped:
        rows = [(t["outcome"], f"`{t['nodeid']}`", _first_line(t.get("message", ""))) for t in skipped]
        out += ["", "## Skipped and known issues", "", _table(("outcome", "test", "reason"), rows)]
    failed_probes = [p for p in data.get("probes", []) if p.get("status") != "ok"]
    if failed_probes:
        rows = [(p["name"], p["status"], _first_line(p.get("error", ""))) for p in failed_probes]
        out += ["", "## Probes that did not finish", "", _table(("probe", "status", "error"), rows)]
    if data.get("errors") or data.get("unchecked_thresholds"):
        out += ["", "## Session errors", ""]
        out += [f"- {e}" for e in data.get("errors", [])]
        if data.get("unchecked_thresholds"):
            out.append(f"- thresholds no test checked: {', '.join(data['unchecked_thresholds'])}")
    return out


def _sweep(data: dict[str, Any], plot: str | None) -> list[str]:
    rows = sweep_rows(data)
    if not rows:
        return []
    out = ["", "## Collective sweep", ""]
    if plot:
        out += [f"![busbw by message size]({plot})", ""]
    table_rows = [
        (r["op"], r["size"], f"{r['time_us']:.1f}", f"{r['algbw_gbps']:.2f}", f"{r['busbw_gbps']:.2f}", r["wrong"])
        for r in sorted(rows, key=lambda r: (r["op"], parse_size(r["size"])))
    ]
    out.append(_table(("op", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"), table_rows))
    return out


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(head: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def figures(data: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """metric -> (value, unit), the last check of each metric."""
    return {c["metric"]: (c["value"], c["unit"]) for t in data.get("tests", []) for c in t.get("checks", [])}


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, float | None, float | None, float | None, str]]:
    """Per metric in either run: value in A, value in B, B / A (None where it cannot be formed)."""
    fa, fb = figures(a), figures(b)
    out = []
    for metric in dict.fromkeys([*fa, *fb]):
        va, vb = fa.get(metric, (None, ""))[0], fb.get(metric, (None, ""))[0]
        ratio = vb / va if va not in (None, 0) and vb is not None else None
        out.append((metric, va, vb, ratio, (fa.get(metric) or fb.get(metric) or (0, ""))[1]))
    return out


def compare_text(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str]) -> str:
    rows = [
        (metric, _num(va), _num(vb), f"{ratio:.3f}" if ratio is not None else "-", unit)
        for metric, va, vb, ratio, unit in compare(a, b)
    ]
    head = ("metric", f"A: {names[0]}", f"B: {names[1]}", "B/A", "unit")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(5)]
    return "\n".join(
        "  ".join(
            str(c).rjust(w) if 0 < i < 4 else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in [head, *rows]
    )


def _num(value: float | None) -> str:
    return "-" if value is None else fmt(value)
