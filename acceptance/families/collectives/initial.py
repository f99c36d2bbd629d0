"""The collectives' part of init's first profile: every operation from 64 B (its latency) up to 4 GiB (the
size the public busbw figures are measured at), in bf16, with the spread rule's bound written out; a
reference row bounds each size it holds at."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from acceptance.families import collectives
from acceptance.json_types import JSONObject, JSONValue
from acceptance.schema.initial import Initial, InitialSetup, RowFacts
from acceptance.schema.sizes import parse_size

GPU_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv")
# 64 B: a call bound by its launch, where the latency rows are measured; 1M and up: by the links
GPU_SIZES = ("64", "1M", "256M", "1G", "4G")
# Nodes with no active RDMA port talk over NCCL's TCP sockets: 3.4-3.8 GB/s all_reduce busbw at 256M-1G
# between two nodes of one host (docs/measurements.md, "The same host as two nodes"). At that pace six ops at
# 1G and 4G take minutes past the family's timeout; 256M is already bound by the network, not the launch.
SOCKET_SIZES = ("1M", "64M", "256M")


def sizes(setup: InitialSetup) -> tuple[str, ...]:
    return SOCKET_SIZES if setup.sockets else GPU_SIZES


def sweep(setup: InitialSetup) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every operation (on 2+ GPUs) at the sizes for the fabric: what the hardware floors bound."""
    return (GPU_OPS if setup.world >= 2 else ()), sizes(setup)


def section(setup: InitialSetup, _bounds: Mapping[str, RowFacts | None]) -> JSONObject:
    """The sweep, and the spread rule's bound (``collectives.late_ranks``), written out for any cluster: it
    judges a rank against its peers of the same run, so it needs no reference for the hardware."""
    if setup.world < 2:
        return {}
    rule = collectives.Collectives()
    swept: list[JSONValue] = list(sizes(setup))
    return {
        "ops": list(GPU_OPS),
        "sizes": swept,
        "dtype": "bfloat16",
        "spread_ratio": rule.spread_ratio,
        "spread_floor_us": rule.spread_floor_us,
        "spread_min_share": rule.spread_min_share,
    }


def metrics(figure: str, holds_at: Callable[[int], bool], setup: InitialSetup) -> list[str]:
    """A row of an operation swept on 2+ GPUs bounds it at each size the row holds at."""
    op = figure.split(".")[1]
    if setup.world < 2 or op not in GPU_OPS:
        return []
    return [f"{figure}@{s}" for s in sizes(setup) if holds_at(parse_size(s))]


def note(written: JSONObject, _bounded: Callable[[str], bool]) -> str:
    found = written.get("sizes")
    return f"collectives at {', '.join(str(s) for s in found) if isinstance(found, list) else ''}"


INITIAL = Initial(section, 30, metrics, sweep=sweep, note=note)
