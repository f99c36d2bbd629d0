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
    Each part is optional: a family writes what it has."""

    # its section from what was found and the metrics init bounds, each with the reference row it was written
    # from (None: a hardware floor); {}: none. ``place``: where the section stands in the file, ascending
    section: Callable[[InitialSetup, Mapping[str, RowFacts | None]], JSONObject] | None = None
    place: int = 0
    # the metrics a reference row of the family bounds: ``figure`` without its statistic or size, and
    # ``holds_at(bytes)``, whether the row describes a message of that size
    metrics: Callable[[str, Callable[[int], bool], InitialSetup], list[str]] | None = None
    # the collectives the profile sweeps and their sizes, which the hardware floors bound
    sweep: Callable[[InitialSetup], tuple[tuple[str, ...], tuple[str, ...]]] | None = None
    # what the header says of the family when the nodes meet over sockets: from its section as written (or as
    # the parent profile resolves it) and whether a metric is bounded
    note: Callable[[JSONObject, Callable[[str], bool]], str | None] | None = None
