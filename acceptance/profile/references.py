"""The reference table: what a healthy machine measures, per GPU model and fabric, each with its public
source (``references.yaml`` beside this module, validated here).

One question, "is this figure normal for this machine?", asked by two readers: ``cluster-acceptance init``,
which writes a profile's bounds from the rows that fit the node it finds, and the report, which shows the
row beside each figure it describes. A run is described by a ``Setup`` (GPU model, nodes, GPUs per node,
NVLS, NIC kind); a row applies when each of its keys that is set matches the setup.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from acceptance.numbers import fmt
from acceptance.profile.strict_yaml import ProfileError, read
from acceptance.schema.fields import PositiveInt, Size, Strict
from acceptance.schema.sizes import parse_size

TABLE = Path(__file__).with_name("references.yaml")
# the suffixes a figure carries beyond its reference's name: per-GPU statistics and the message size
_STATISTIC = re.compile(r"_(min|median)$")


class GpuModel(Strict):
    label: str  # as the report names it: "H100 SXM"
    name_pattern: str  # a regular expression matched against NVML's name, case-insensitive
    nvls: bool  # whether its NVSwitch systems offer NVLink SHARP (Hopper and later)

    @field_validator("name_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value

    def matches(self, gpu_name: str) -> bool:
        return re.search(self.name_pattern, gpu_name, re.IGNORECASE) is not None


class NicKind(Strict):
    label: str
    link_layer: Literal["InfiniBand", "Ethernet"]
    gbps: PositiveInt  # the port's signalling rate in Gb/s, as sysfs reports it


class Floor(Strict):
    """The bound ``init`` writes from a row, for the reason ``why``: ``fraction`` of its value as a minimum (a
    rate), or ``factor`` times its value as a maximum (a time, where lower is better)."""

    fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    factor: Annotated[float, Field(ge=1)] | None = None
    why: str

    @model_validator(mode="after")
    def _one_way(self) -> Floor:
        if (self.fraction is None) == (self.factor is None):
            raise ValueError("a floor has a fraction (of a rate: a minimum) or a factor (of a time: a maximum)")
        return self

    def share(self) -> str:
        """How the bound stands to the value: "80%", "1.5x"."""
        return f"{self.fraction:.0%}" if self.fraction is not None else f"{self.factor:g}x"


class Reference(Strict):
    figure: str  # a metric without its _min/_median statistic and @size: collectives.all_reduce.busbw_gbps
    gpu: str | None = None  # a key of ``gpus``; None: any GPU (a NIC's row)
    nodes: PositiveInt | None = None
    gpus_per_node: PositiveInt | None = None
    nvls: bool | None = None
    nic: str | None = None  # a key of ``nics``
    min_size: Size | None = None  # the row holds for messages of this size and up
    max_size: Size | None = None  # and of this size and below
    value: Annotated[float, Field(gt=0)]
    unit: str
    # typical: what healthy machines measure; peak: a datasheet's maximum; line_rate: a link's signalling rate;
    # bar: an acceptance bar used in the field
    kind: Literal["typical", "peak", "line_rate", "bar"] = "typical"
    basis: str  # the setup in words: "8x H100 SXM with NVLS"
    source: str  # where the figure is published
    floor: Floor

    @property
    def min_bytes(self) -> int:
        return parse_size(self.min_size) if self.min_size else 0

    @property
    def bound(self) -> Literal["min", "max"]:
        """min: the figure must stay above the bound (a rate: its floor a fraction); max: below it (a time,
        where lower is better: its floor a factor)."""
        return "min" if self.floor.fraction is not None else "max"

    def holds_at(self, size_bytes: int | None) -> bool:
        """Whether the row describes messages of ``size_bytes`` (None: a figure without a size)."""
        if self.min_size is not None and (size_bytes is None or size_bytes < self.min_bytes):
            return False
        return self.max_size is None or (size_bytes is not None and size_bytes <= parse_size(self.max_size))

    def limit(self) -> float:
        """The bound init writes: ``fraction`` of the value, or for a time ``factor`` times it, rounded up (a
        maximum no tighter than its factor says)."""
        digits = 1 if self.value > 10 else 3
        if self.floor.fraction is not None:  # a minimum
            return round(self.value * self.floor.fraction, digits)
        scale = 10**digits
        return math.ceil(self.value * (self.floor.factor or 1) * scale - 1e-6) / scale

    def share(self) -> str:
        """How the bound stands to the value, in words: "80% of", "1.5x"."""
        return f"{self.floor.share()} of" if self.bound == "min" else self.floor.share()

    def words(self) -> str:
        """The row as the report shows it beside a figure."""
        lead = {"typical": "normal for", "peak": "peak of", "line_rate": "line rate of", "bar": "the bar of"}[self.kind]
        about = "~" if self.kind == "typical" else ""
        unit = f" {self.unit}" if self.unit else ""
        return f"{lead} {self.basis}: {about}{fmt(self.value)}{unit} ({self.source})"

    def bound_source(self) -> str:
        """The words a bound written from this row carries as its source (``reference:`` first: the run's
        summary counts the figures it bounds as bounded by a reference row)."""
        return f"reference: {self.share()} {self.words()}; {self.floor.why}"


class ReferenceTable(Strict):
    gpus: dict[str, GpuModel]
    nics: dict[str, NicKind]
    floors: dict[str, Floor]
    references: list[Reference]

    @model_validator(mode="after")
    def _known_keys(self) -> ReferenceTable:
        for i, row in enumerate(self.references):
            if row.gpu is not None and row.gpu not in self.gpus:
                raise ValueError(f"references[{i}].gpu: {row.gpu!r} is not one of gpus: {', '.join(self.gpus)}")
            if row.nic is not None and row.nic not in self.nics:
                raise ValueError(f"references[{i}].nic: {row.nic!r} is not one of nics: {', '.join(self.nics)}")
        return self

    def gpu_of(self, gpu_name: str | None) -> str | None:
        """The table's key for a GPU named as NVML names it (``NVIDIA H100 80GB HBM3``), else None."""
        if not gpu_name:
            return None
        return next((key for key, model in self.gpus.items() if model.matches(gpu_name)), None)

    def nic_of(self, link_layer: str, gbps: float) -> str | None:
        """The table's key for a port of this link layer and rate (Gb/s), else None."""
        return next(
            (key for key, nic in self.nics.items() if nic.link_layer == link_layer and nic.gbps == round(gbps)), None
        )

    def for_figure(self, metric: str, setup: Setup) -> Reference | None:
        """The row that describes ``metric`` (a figure's full name, with its statistic and @size) on
        ``setup``, else None."""
        name, _, size = metric.partition("@")
        name = _STATISTIC.sub("", name)
        size_bytes = _bytes(size)
        for row in self.references:
            if row.figure != name or not setup.fits(row) or not row.holds_at(size_bytes):
                continue
            return row
        return None

    def rows_for(self, setup: Setup) -> list[Reference]:
        """Every row that holds for ``setup`` (``init`` writes a bound from each)."""
        return [row for row in self.references if setup.fits(row)]


@dataclass(frozen=True)
class Setup:
    """What a run was measured on, as the table's rows are keyed: None where it is not known."""

    gpu: str | None  # a key of the table's ``gpus``
    nodes: int
    gpus_per_node: int
    nvls: bool | None
    nics: Sequence[str] = ()  # keys of the table's ``nics`` found on the node

    def fits(self, row: Reference) -> bool:
        if row.gpu is not None and row.gpu != self.gpu:
            return False
        if row.nodes is not None and row.nodes != self.nodes:
            return False
        if row.gpus_per_node is not None and row.gpus_per_node != self.gpus_per_node:
            return False
        if row.nvls is not None and row.nvls != self.nvls:
            return False
        return row.nic is None or row.nic in self.nics


def _bytes(size: str) -> int | None:
    try:
        return parse_size(size) if size else None
    except ValueError:
        return None


@functools.lru_cache(maxsize=1)
def table() -> ReferenceTable:
    """The shipped table, validated (a broken table is a packaging error, named with its file and key)."""
    return load(TABLE)


def load(path: Path) -> ReferenceTable:
    raw, _ = read(path)
    try:
        return ReferenceTable.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors(include_url=False)
        )
        raise ProfileError(f"{path}: {problems}") from None
