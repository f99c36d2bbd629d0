"""Training in the report, the terminal and ``bench_train``: one table, the curves, scaling and the canary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceptance.families.training import canary
from acceptance.numbers import fmt
from acceptance.reports import plots, view
from acceptance.reports.blocks import Block, Heading, Table, Text
from acceptance.reports.measured import image, lower_bound

Run = tuple[str, Mapping[str, Any], float | None]  # label, the training probe's result, wall time (s)


def _spread(result: Mapping[str, Any]) -> str:
    median, p10, p90 = (result.get(k) for k in ("tokens_per_s_per_gpu_median", "tokens_per_s_per_gpu_p10",
                                               "tokens_per_s_per_gpu_p90"))  # fmt: skip
    if median is None:
        return "-"
    return f"{fmt(median)} ({fmt(p10)} - {fmt(p90)})" if p10 is not None and p90 is not None else fmt(median)


def _percent(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else "-"


def table(runs: Sequence[Run], usd_per_gpu_hour: float | None) -> tuple[list[str], list[list[object]]]:
    """One row per run: throughput (mean, per-step median and p10 - p90), tokens per dollar where the
    profile names a price, MFU, memory, step time, utilisation, loss and wall time."""
    head = ["strategy", "precision", "world", "tokens/s/GPU", "per-step median (p10 - p90)"]
    head += ["tokens/$"] if usd_per_gpu_hour else []
    head += ["MFU", "peak GiB", "step ms (± std)", "GPU util %", "loss first -> last", "wall s"]
    rows: list[list[object]] = []
    for label, r, wall in runs:
        tps = r.get("tokens_per_s_per_gpu")
        step, std = r.get("step_time_s"), r.get("step_time_std_s")
        row: list[object] = [label, r.get("precision", "-"), r.get("world_size", "-"), tps, _spread(r)]
        row += [view.tokens_per_dollar(tps, usd_per_gpu_hour)] if usd_per_gpu_hour else []
        row += [
            _percent(r.get("mfu")),
            f"{r['peak_mem_gib']:.1f}" if isinstance(r.get("peak_mem_gib"), (int, float)) else "-",
            f"{step * 1e3:.1f}" + (f" ± {std * 1e3:.1f}" if std is not None else "") if step is not None else "-",
            f"{r['gpu_util_pct']:.0f}" if isinstance(r.get("gpu_util_pct"), (int, float)) else "-",
            f"{r.get('loss_first', 0):.3f} -> {r.get('loss_last', 0):.3f}" if "loss_last" in r else "-",
            f"{wall:.1f}" if wall is not None else "-",
        ]
        rows.append(row)
    return head, rows


def runs(data: Mapping[str, Any]) -> list[Run]:
    out: list[Run] = []
    for s in view.series(data, "training"):
        label = str(s.result.get("strategy") or s.key.removeprefix("training-"))
        label += " (scaling baseline)" if s.key.endswith("-baseline") else ""
        out.append((label + (f" [{s.label}]" if s.label else ""), s.result, s.wall_s))
    return out


def _line(label: str, values: list[float], scale: float = 1.0) -> plots.Line:
    return plots.Line(label, list(range(1, len(values) + 1)), [v * scale for v in values])


def _canary(data: Mapping[str, Any]) -> plots.Chart | None:
    """Each strategy's loss against the reference strategy's, step by step, under the canary's bound."""
    curves: dict[str, list[float]] = {}
    for _, found in view.measurements(data, "curves"):
        if isinstance(found, Mapping):
            curves.update({str(k): list(v) for k, v in found.items() if isinstance(v, list)})
    if len(curves) < 2:
        return None
    reference, *others = curves
    training = view.resolved(data).get("training") or {}
    rtol = float(training.get("canary_rtol", 0.02))
    lines = []
    for name in others:
        steps = min(len(curves[reference]), len(curves[name]))
        found = canary(curves[reference], curves[name], steps, rtol)
        lines.append(_line(name, found["rel_diff"]))
    title = f"canary: relative loss difference to {reference}"
    return plots.Chart(title, "|loss - reference| / reference", lines, rtol)


def _scaling(data: Mapping[str, Any], done: list[Run]) -> list[Block]:
    baseline = [r for r in done if "(scaling baseline)" in r[0]]
    strategy = (view.resolved(data).get("training") or {}).get("scaling_strategy", "ddp")
    full = [r for r in done if r[0].split(" ")[0] == strategy and "(scaling baseline)" not in r[0]]
    if not baseline or not full:
        return []
    figure = next((f for f in view.figures(data) if f.metric == "training.scaling_efficiency"), None)
    base, whole = baseline[0][1], full[0][1]
    labels = [f"baseline: {base.get('world_size')} rank(s)", f"full: {whole.get('world_size')} rank(s)"]
    values = [float(base.get("tokens_per_s_per_gpu") or 0), float(whole.get("tokens_per_s_per_gpu") or 0)]
    bound = lower_bound(data, "training.scaling_efficiency")
    png = plots.scaling(labels, values, figure.value if figure else None, bound)
    return image("scaling", png, f"{strategy} per-GPU throughput, baseline and full world")


def section(data: Mapping[str, Any]) -> list[Block]:
    done = runs(data)
    if not done:
        return []
    usd = view.usd_per_gpu_hour(data)
    head, rows = table(done, usd)
    blocks: list[Block] = [Heading("Training"), Table(head, rows)]
    if usd:
        source = (view.resolved(data).get("cost") or {}).get("source")
        blocks.append(Text(f"tokens/$ at {usd:g} USD per GPU-hour" + (f" ({source})" if source else ""), note=True))
    main = [(label, r) for label, r, _ in done if "(scaling baseline)" not in label]
    charts = [
        plots.Chart("loss", "loss (nats)", [_line(label, r["losses"]) for label, r in main if r.get("losses")]),
        plots.Chart("step time (timed steps)", "ms",
                    [_line(label, r["step_times_s"], 1e3) for label, r in main if r.get("step_times_s")]),
    ]  # fmt: skip
    found = _canary(data)
    charts += [found] if found else []
    blocks += image("training", plots.curves(charts), "loss and step time per strategy, canary")
    return blocks + _scaling(data, done)
