"""Training in the report, the terminal and ``bench_train``: one table, the curves, scaling and the canary."""

from __future__ import annotations

from collections.abc import Sequence

from acceptance.families import training
from acceptance.json_types import JSONObject, JSONValue
from acceptance.numbers import fmt
from acceptance.schema.report import (
    Chart,
    Curves,
    Heading,
    Line,
    Plot,
    ReportedRun,
    ReportSection,
    Scaling,
    SectionBlock,
    Table,
    Text,
    number,
    object_of,
)

# label, a strategy's figures in the training probe's result (JSON: older files lack newer keys), wall time (s)
Run = tuple[str, JSONObject, float | None]


def _spread(result: JSONObject) -> str:
    """The spread of tokens/s: the timed windows' quartiles and range, or (evidence written before the
    windows) the per-step median and p10 - p90."""
    q1, q3, low, high = (number(result.get(f"tokens_per_s_per_gpu_{k}")) for k in ("q1", "q3", "min", "max"))
    if q1 is not None and q3 is not None:
        return f"{fmt(q1)} - {fmt(q3)} ({fmt(low)} - {fmt(high)})"
    median, p10, p90 = (number(result.get(k)) for k in ("tokens_per_s_per_gpu_median", "tokens_per_s_per_gpu_p10",
                                               "tokens_per_s_per_gpu_p90"))  # fmt: skip
    if median is None:
        return "-"
    return f"{fmt(median)} ({fmt(p10)} - {fmt(p90)})" if p10 is not None and p90 is not None else fmt(median)


def _skipped(result: JSONObject) -> str:
    """Optimizer steps DeepSpeed skipped on an fp16 overflow during the timed steps, of the timed steps."""
    scaling = object_of(result.get("loss_scaling"))
    if not scaling:
        return "-"
    after, before = (object_of(scaling.get(k)).get("skipped_steps") for k in ("after", "before_timed_steps"))
    count = int(number(after) or 0) - int(number(before) or 0)
    return f"{count}/{object_of(result.get('setup')).get('steps', '?')}"


def _percent(value: JSONValue) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else "-"


def tokens_per_dollar(tokens_per_s_per_gpu: float | None, usd: float | None) -> float | None:
    """Tokens one dollar of GPU time buys: tokens/s/GPU x 3600 s / price per GPU-hour."""
    if tokens_per_s_per_gpu is None or not usd:
        return None
    return tokens_per_s_per_gpu * 3600.0 / usd


def table(runs: Sequence[Run], usd_per_gpu_hour: float | None) -> tuple[list[str], list[list[object]]]:
    """One row per run: throughput (the median over timed windows, their quartiles and range), tokens per
    dollar where the profile names a price, MFU, memory, step time, utilisation, loss, fp16 overflow skips
    where a run has them, and wall time (a strategy's part of its job)."""
    skips = any(r.get("loss_scaling") and r.get("precision") == "fp16" for _, r, _ in runs)
    head = ["strategy", "precision", "world", "tokens/s/GPU", "IQR (min - max)"]
    head += ["tokens/$"] if usd_per_gpu_hour else []
    head += ["MFU", "peak GiB", "step ms (± std)", "GPU util %", "loss first -> last"]
    head += ["skipped steps"] if skips else []
    head += ["wall s"]
    rows: list[list[object]] = []
    for label, r, wall in runs:
        tps = r.get("tokens_per_s_per_gpu")
        step, std = number(r.get("step_time_s")), number(r.get("step_time_std_s"))
        row: list[object] = [label, r.get("precision", "-"), r.get("world_size", "-"), tps, _spread(r)]
        row += [tokens_per_dollar(number(tps), usd_per_gpu_hour)] if usd_per_gpu_hour else []
        row += [
            _percent(r.get("mfu")),
            f"{r['peak_mem_gib']:.1f}" if isinstance(r.get("peak_mem_gib"), (int, float)) else "-",
            f"{step * 1e3:.1f}" + (f" ± {std * 1e3:.1f}" if std is not None else "") if step is not None else "-",
            f"{r['gpu_util_pct']:.0f}" if isinstance(r.get("gpu_util_pct"), (int, float)) else "-",
            f"{r.get('loss_first', 0):.3f} -> {r.get('loss_last', 0):.3f}" if "loss_last" in r else "-",
        ]
        row += [_skipped(r)] if skips else []
        row += [f"{wall:.1f}" if wall is not None else "-"]
        rows.append(row)
    return head, rows


def _strategies(result: JSONObject) -> list[tuple[str, JSONObject]]:
    """A training job's strategies: under ``strategies`` (``parts`` in a failed job's partial result), or
    the job itself in evidence written with a job per strategy."""
    found = result.get("strategies") or result.get("parts")
    if isinstance(found, dict):
        return [(str(name), r) for name, r in found.items() if isinstance(r, dict) and not r.get("error")]
    return [(str(result.get("strategy") or "?"), result)]


def runs(run: ReportedRun) -> list[Run]:
    """Every strategy that produced figures, with its part of the job's wall time (the job's, in evidence
    written with a job per strategy); a failed job's finished strategies too."""
    found = [(s.key, s.label, s.result, s.wall_s) for s in run.series("training")]
    found += [(p.key, "", p.result, None) for p in run.failed("training")]
    out: list[Run] = []
    for key, label, result, wall in found:
        for name, r in _strategies(result):
            text = (
                name + (" (scaling baseline)" if key.endswith("-baseline") else "") + (f" [{label}]" if label else "")
            )
            part = number(r.get("wall_s")) if "wall_s" in r else wall  # a strategy's part of its job's wall
            out.append((text, r, part if "strategies" in result or "parts" in result else wall))
    return out


def _numbers(values: JSONValue) -> list[float]:
    """A curve as the evidence holds it (a JSON list of numbers)."""
    return [float(v) for v in values if isinstance(v, (int, float))] if isinstance(values, list) else []


def _line(label: str, values: list[float], scale: float = 1.0) -> Line:
    return Line(label, list(range(1, len(values) + 1)), [v * scale for v in values])


def _canary(run: ReportedRun) -> Chart | None:
    """Each strategy's loss against the reference strategy's, step by step, under the canary's bound."""
    curves: dict[str, list[float]] = {}
    for _, found in run.measurements("curves"):
        if isinstance(found, dict):
            curves.update({str(k): _numbers(v) for k, v in found.items() if isinstance(v, list)})
    if len(curves) < 2:
        return None
    reference, *others = curves
    rtol = number(run.section("training").get("canary_rtol", 0.02))
    rtol = 0.02 if rtol is None else rtol
    lines = []
    for name in others:
        steps = min(len(curves[reference]), len(curves[name]))
        lines.append(_line(name, training.canary(curves[reference], curves[name], steps, rtol)["rel_diff"]))
    title = f"canary: relative loss difference to {reference}"
    return Chart(title, "|loss - reference| / reference", lines, rtol)


def _scaling(run: ReportedRun, done: list[Run]) -> list[SectionBlock]:
    baseline = [r for r in done if "(scaling baseline)" in r[0]]
    strategy = str(run.section("training").get("scaling_strategy", "ddp"))
    full = [r for r in done if r[0].split(" ")[0] == strategy and "(scaling baseline)" not in r[0]]
    if not baseline or not full:
        return []
    base, whole = baseline[0][1], full[0][1]
    labels = [f"baseline: {base.get('world_size')} rank(s)", f"full: {whole.get('world_size')} rank(s)"]
    values = [number(base.get("tokens_per_s_per_gpu")) or 0.0, number(whole.get("tokens_per_s_per_gpu")) or 0.0]
    drawing = Scaling(
        labels,
        values,
        run.value_of("training.scaling_efficiency"),
        run.lower_bound("training.scaling_efficiency"),
    )
    return [Plot("scaling", drawing, f"{strategy} per-GPU throughput, baseline and full world")]


def section(run: ReportedRun) -> list[SectionBlock]:
    done = runs(run)
    if not done:
        return []
    usd = run.usd_per_gpu_hour()
    head, rows = table(done, usd)
    blocks: list[SectionBlock] = [Heading("Training"), Table(head, rows)]
    if usd:
        source = run.section("cost").get("source")
        blocks.append(Text(f"tokens/$ at {usd:g} USD per GPU-hour" + (f" ({source})" if source else ""), note=True))
    main = [(label, r) for label, r, _ in done if "(scaling baseline)" not in label]
    charts = [
        Chart("loss", "loss (nats)",
              [_line(label, _numbers(r["losses"])) for label, r in main if r.get("losses")]),
        Chart("step time (timed steps)", "ms",
              [_line(label, _numbers(r["step_times_s"]), 1e3) for label, r in main if r.get("step_times_s")]),
    ]  # fmt: skip
    found = _canary(run)
    charts += [found] if found else []
    blocks.append(Plot("training", Curves(charts), "loss and step time per strategy, canary"))
    return blocks + _scaling(run, done)


def terminal(run: ReportedRun) -> list[tuple[list[str], list[list[object]]]]:
    """The training table, for the terminal's end-of-session summary and ``bench_train``."""
    done = runs(run)
    return [table(done, run.usd_per_gpu_hour())] if done else []


REPORT = ReportSection(50, section, terminal=terminal)
