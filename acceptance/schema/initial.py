"""A family's part of the first profile ``init`` writes (``acceptance.profile.initial``): its section from
what one node of the cluster is, the figures a reference row of the family bounds, and what the written
profile's header says of it when the nodes meet over TCP sockets.

``init`` reads the node (NVML, sysfs) and the reference table and hands each family what it found
(``InitialSetup``); the family says what to write (``Initial``, on its descriptor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from acceptance.json_types import JSONObject


@dataclass(frozen=True)
class RowFacts:
    """The reference row a bound was written from: its published value and where it is published."""

    value: float
    source: str


@dataclass(frozen=True)
class InitialSetup:
    """What init found, as a family's part of the first profile reads it."""

    nodes: int
    gpus_per_node: int
    gpu: str | None  # the reference table's key for the node's GPU; None: a GPU the table does not know
    # nodes with no RDMA port at all: NCCL's TCP sockets carry the traffic between them
    sockets: bool
    driver: str | None  # the NVIDIA driver's version
    nvlink_links: int | None  # the links each GPU must have up (``profile.initial``); None: none to gate
    gpu_figures: tuple[str, ...]  # the figures the reference table has rows for on this GPU, any setup

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Initial:
    """A family's part of init's first profile (the GPU path; a node without GPUs gets a child of local-cpu).

    ``place``: where its section stands in the written file, ascending. ``section(setup, bounds)``: its
    section, {} for none; ``bounds`` are the metrics init bounds, each with the reference row it was written
    from (None: a hardware floor). ``metrics(figure, holds_at, setup)``: the metrics a reference row of the
    family bounds (``figure`` without statistic or size; ``holds_at(bytes)``: whether the row describes a
    message of that size). ``sweep(setup)``: the collectives the profile sweeps and their sizes, which the
    hardware floors bound. ``note(section, bounded)``: what the header says of the family over sockets, from
    its section as written (or as the parent profile resolves it) and whether a metric is bounded."""

    place: int
    section: Callable[[InitialSetup, Mapping[str, RowFacts | None]], JSONObject]
    metrics: Callable[[str, Callable[[int], bool], InitialSetup], list[str]]
    sweep: Callable[[InitialSetup], tuple[tuple[str, ...], tuple[str, ...]]] | None = None
    note: Callable[[JSONObject, Callable[[str], bool]], str | None] | None = None


def no_section(_setup: InitialSetup, _bounds: Mapping[str, RowFacts | None]) -> JSONObject:
    """A family that writes no section of its own (its figures are bounded all the same)."""
    return {}


def no_metrics(_figure: str, _holds_at: Callable[[int], bool], _setup: InitialSetup) -> list[str]:
    """A family whose reference rows bound nothing at init."""
    return []
