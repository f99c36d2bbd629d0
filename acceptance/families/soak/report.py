"""The soak's section of the report: per GPU, TFLOP/s, SM clock, power and temperature against time, and the
table of each GPU's sustained speed, steady state and first slowdown."""

from __future__ import annotations

from typing import Literal, cast

from acceptance.families import soak as rules
from acceptance.families.answers import clock_events_text
from acceptance.numbers import fmt
from acceptance.schema import report

SampleKey = Literal["sm_mhz", "power_w", "temp_c", "mem_temp_c"]
SAMPLED: tuple[tuple[SampleKey, str, str], ...] = (
    ("sm_mhz", "SM clock", "MHz"),
    ("power_w", "power", "W"),
    ("temp_c", "GPU temperature", "°C"),
    ("mem_temp_c", "memory temperature", "°C"),
)


def _short(r: rules.RankSoak) -> str:
    return f"{r['host']} GPU {r['gpu']}" if r["gpu"] is not None else f"{r['host']} rank {r['rank']}"


def charts(result: rules.SoakResult) -> list[report.TimeChart]:
    """Each GEMM's TFLOP/s per window, then each NVML quantity per sample, a line per GPU."""
    ranks = sorted(result["ranks"], key=lambda r: r["rank"])
    out = []
    for dtype in rules.DTYPE_FIGURE:
        lines = [
            report.Line(_short(r), [w["t"] for w in g["windows"]], [w["tflops"] for w in g["windows"]])
            for r in ranks
            for g in r["gemm"]
            if g["dtype"] == dtype and g["windows"]
        ]
        if lines:
            out.append(report.TimeChart(f"{dtype} GEMM (with its checks)", "TFLOP/s", lines))
    for key, what, unit in SAMPLED:
        lines = []
        for r in ranks:
            samples = r["nvml"]["samples"] if r["nvml"] is not None else []
            have = [s for s in samples if s[key] is not None]
            if have:
                lines.append(report.Line(_short(r), [s["t"] for s in have], [s[key] for s in have]))
        if lines:
            out.append(report.TimeChart(what, unit, lines))
    return out


def _cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{fmt(value)}{unit}"


def section(run: report.ReportedRun) -> list[report.SectionBlock]:
    blocks: list[report.SectionBlock] = []
    for series in run.series("soak"):
        result = cast(rules.SoakResult, series.result)
        config = result["config"]
        label = series.label
        blocks.append(
            report.Text(
                f"{label + ': ' if label else ''}{len(result['ranks'])} ranks for {config['duration_s']:g} s, "
                f"GEMM {config['matmul_size']}^3; TFLOP/s per window of {config['window_s']:g} s"
            )
        )
        blocks.append(
            report.Plot(
                f"soak{label}", report.OverTime(charts(result)), "soak: TFLOP/s, clock, power, temperature per GPU"
            )
        )
        dtypes = [d for d in rules.DTYPE_FIGURE if any(d in line["tflops"] for line in rules.table(result))]
        head = [
            "GPU",
            *(f"{d} TFLOP/s (first / last minute)" for d in dtypes),
            "under node / cluster median",
            "steady °C (memory)",
            "steady W",
            "first slowdown s",
            "clock events",
        ]
        rows = []
        for line in rules.table(result):
            speeds = [
                f"{_cell(line['tflops'].get(d))} "
                f"({_cell(line['first_minute'].get(d))} / {_cell(line['last_minute'].get(d))})"
                for d in dtypes
            ]
            under = ", ".join(
                f"{line['below_node_median'][d]:.1%} / {line['below_cluster_median'][d]:.1%}"
                for d in dtypes
                if d in line["below_node_median"]
            )
            rows.append(
                [
                    line["gpu"],
                    *speeds,
                    under,
                    f"{_cell(line['steady_temp_c'])} ({_cell(line['steady_mem_temp_c'])})",
                    _cell(line["steady_power_w"]),
                    _cell(line["first_slowdown_s"]),
                    clock_events_text(line["clock_events"]) if line["clock_events"] else "-",
                ]
            )
        blocks.append(report.Table(head, rows))
        if result["injected"]:
            blocks.append(report.Text("injected (test-only fault knob): " + "; ".join(result["injected"]), note=True))
    return [report.Heading("Soak"), *blocks] if blocks else []


REPORT = report.ReportSection(60, section)
