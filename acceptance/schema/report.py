"""A family's part of the report, as data: what its section says (headings, text, tables, and plots as the
figures to draw), drawn from a run's evidence as the section reads it (``ReportedRun``).

A family owns what its section shows (``Behaviour.report``, in the family's package); the report
(``acceptance.reports``) owns how: it hands each family the run, draws the plots (matplotlib, or a note where
it is not installed), writes HTML and Markdown, and exports the families' per-unit figures as CSV rows.
The evidence holds each probe's result as JSON (older files lack newer keys): a section reads what it knows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from acceptance.json_types import JSONObject, JSONValue

EVERY_NODE = "every node"  # a series' label where the nodes of a merged file measured the same


def object_of(value: JSONValue) -> JSONObject:
    """A JSON object; empty where the value is not one (a section an older file lacks)."""
    return value if isinstance(value, dict) else {}


def objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a JSON list (a probe's rows); none where it is not a list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def number(value: JSONValue) -> float | None:
    """A JSON number as a float; None for anything else (a missing figure, a not-measured answer)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# ---- the blocks a section is made of ----------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Text:
    text: str
    note: bool = False  # small print: where a figure comes from, why something is missing


@dataclass(frozen=True)
class Table:
    head: Sequence[str]
    rows: Sequence[Sequence[object]]
    align: Sequence[str] | None = None  # l/r/c per column; default: numbers right, text left
    folded: str = ""  # HTML: folded under this line until opened (always open in print); Markdown: a caption


# ---- the plots, as the figures to draw ---------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    label: str
    x: Sequence[float]
    y: Sequence[float | None]


@dataclass(frozen=True)
class Panel:
    """One small chart: lines, optional lower bounds at x positions, and points that failed their bound."""

    title: str
    lines: list[Line]
    bounds: dict[float, float]
    failing: list[tuple[float, float]]


@dataclass(frozen=True)
class Bars:
    """One per-GPU figure: (label, value) per GPU, the median and the lowest value the tolerance allows."""

    title: str
    unit: str
    bars: list[tuple[str, float]]
    median: float
    floor: float


@dataclass(frozen=True)
class Chart:
    """A line chart over steps; ``limit`` draws a dashed bound (the canary's tolerance)."""

    title: str
    ylabel: str
    lines: list[Line]
    limit: float | None = None


@dataclass(frozen=True)
class TimeChart:
    """One quantity against time, a line per GPU (the soak's TFLOP/s, clock, power, temperature)."""

    title: str
    ylabel: str
    lines: list[Line]  # x: seconds from the start


@dataclass(frozen=True)
class Matrix:
    """A pair matrix: what each pair of nodes or GPUs measured (``acceptance.reports.pairs`` finds them)."""

    title: str
    labels: list[str]
    cells: list[list[float | None]]  # cells[i][j]: from labels[i] to labels[j]; None where not measured
    unit: str
    rows: str = ""  # what a row stands for (the sender), and a column (the receiver)
    columns: str = ""

    @property
    def what(self) -> str:
        """The figure in words: ``busbw_gbps`` -> ``busbw GB/s``."""
        for suffix, unit in (("_gbps", " GB/s"), ("_us", " us"), ("_s", " s")):
            if self.unit.endswith(suffix) or self.unit == suffix[1:]:
                return (self.unit.removesuffix(suffix).removesuffix(suffix[1:]) + unit).strip()
        return self.unit


@dataclass(frozen=True)
class Busbw:
    """busbw against message size, a panel per op."""

    panels: list[Panel]
    ylabel: str


@dataclass(frozen=True)
class PerGpu:
    """Each per-GPU figure as bars, with its median and tolerance."""

    charts: list[Bars]


@dataclass(frozen=True)
class Curves:
    """Line charts over steps, side by side."""

    charts: list[Chart]


@dataclass(frozen=True)
class Scaling:
    """Per-GPU throughput on the baseline world and the full world, with the efficiency and its bound."""

    labels: list[str]
    values: list[float]
    efficiency: float | None
    bound: float | None


@dataclass(frozen=True)
class OverTime:
    """Quantities against time, a chart each."""

    charts: list[TimeChart]


@dataclass(frozen=True)
class Heatmap:
    matrix: Matrix


Drawing = Busbw | PerGpu | Curves | Scaling | OverTime | Heatmap


@dataclass(frozen=True)
class Plot:
    """A plot of the section: drawn as a PNG named ``name`` (``<stem>-<name>.png`` beside the Markdown)."""

    name: str
    drawing: Drawing
    alt: str


SectionBlock = Heading | Text | Table | Plot


# ---- the run as a section reads it -------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One probe run's result; ``label`` names the node(s) that measured it ("" in one node's file)."""

    key: str
    label: str
    result: JSONObject  # the probe's result as the evidence holds it (JSON): a section reads what it knows
    wall_s: float | None = None  # as the launcher measured it: start-up and rendezvous included


class ReportedRun(Protocol):
    """A run's evidence as a family's section reads it (``acceptance.reports.view.Reported``)."""

    def series(self, name: str) -> list[Series]:
        """The finished runs of probe ``name``, one per key and distinct result."""
        ...

    def failed(self, name: str) -> list[Series]:
        """The runs of probe ``name`` that failed with a partial result (labelled "", no wall time)."""
        ...

    def measurements(self, key: str) -> Iterator[tuple[str, JSONValue]]:
        """(node, value) of every test measurement named ``key``."""
        ...

    def section(self, name: str) -> JSONObject:
        """A section of the run's resolved profile; empty where it has none."""
        ...

    def value_of(self, metric: str) -> float | None:
        """The figure ``metric`` as the run checked it; None where it did not."""
        ...

    def failing(self) -> set[str]:
        """The figures the run failed."""
        ...

    def lower_bound(self, metric: str) -> float | None:
        """The lower bound the run's profile set on ``metric``, else None."""
        ...

    def usd_per_gpu_hour(self) -> float | None:
        """The price the profile names for a GPU-hour (``cost``), else None."""
        ...

    def pair_matrices(self) -> list[Matrix]:
        """Every pair matrix in the tests' measurements, once."""
        ...


# ---- a family's section, and its figures per unit for the export -----------------------------------------


@dataclass(frozen=True)
class UnitFigure:
    """One unit's figure (a GPU's), one row of the export: ``node`` the host, ``unit`` the GPU in words."""

    metric: str
    value: float
    unit_of_measure: str
    node: str
    unit: str


@dataclass(frozen=True)
class Culprit:
    """The unit a run's figure names (the slowest GPU of ``compute.<figure>_min``), as the export shows it."""

    node: str
    unit: str


@dataclass(frozen=True)
class ReportSection:
    """A family's section of the report. ``place``: where it stands among the families' sections, ascending:
    the fabric (10-29: the collectives, the links across nodes), the GPUs (30-49: per GPU, their inventory),
    the workloads (50 and up: training, the soak)."""

    place: int
    blocks: Callable[[ReportedRun], list[SectionBlock]]
    # its figures of one unit each (per GPU), one export row each
    units: Callable[[ReportedRun], list[UnitFigure]] | None = None
    # the unit each of its run's figures names, for that figure's export row
    culprits: Callable[[ReportedRun], dict[str, Culprit]] | None = None
    # the tables (head, rows) the terminal's end-of-session summary prints after the figures
    terminal: Callable[[ReportedRun], list[tuple[list[str], list[list[object]]]]] | None = None
