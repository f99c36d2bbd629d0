"""The collectives a profile may name, torch-free: per op how a message is laid over the ranks (buffer
sizing) and its busbw factor.

Shaped like NVIDIA/nccl-tests, where each ``src/<op>.cu`` holds ``GetCollByteCount`` (buffer sizing) and
``GetBw`` (the bus-bandwidth factor). The torch half of each op (its call, its inputs, the result it must
give) is ``acceptance.probes.ops``, keyed by the same names; a test holds both to the same list. The
profile's op list (``COLLECTIVE_OPS``) is this table's keys; ``acceptance.families.collectives`` turns
measured times into figures with these factors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# How one rank's buffers hold the message: whole (every rank the whole message); gather (sends its
# part, receives every rank's); scatter (sends every rank's part, receives its own); exchange (a part
# for every peer each way).
Layout = Literal["whole", "gather", "scatter", "exchange"]
# nccl-tests rounds each rank's part down to 16 bytes (`(count/nranks) & ~(16/eltSize - 1)` in
# GetCollByteCount of all_gather.cu, reduce_scatter.cu, alltoall.cu); here at least one such grain, so
# a small message on many ranks still moves data
PART_ALIGN_BYTES = 16


@dataclass(frozen=True)
class Sizing:
    """Element counts of one call on one rank, as nccl-tests' GetCollByteCount sets them."""

    send: int  # elements in this rank's input
    recv: int  # elements in this rank's output
    part: int  # elements of one rank's part (gather, scatter, exchange); the whole message otherwise
    elem: int  # bytes per element

    @property
    def count(self) -> int:
        """The message in elements: the larger buffer, nccl-tests' printed ``count``."""
        return max(self.send, self.recv)

    @property
    def nbytes(self) -> int:
        """The bytes the call moves (nccl-tests' printed ``size``): the requested size rounded to the parts."""
        return self.count * self.elem


@dataclass(frozen=True)
class Collective:
    name: str
    layout: Layout
    busbw_factor: Callable[[int], float]  # busbw = algbw * factor(ranks)
    # every rank's result needs every rank's input, so the call ends on every rank about when the last rank
    # arrives: who waited for whom is then read from each rank's time in the call (``collectives.lateness``).
    # Not so for broadcast (the root waits for nobody's data), reduce (only the root needs everyone's) and
    # the sendrecv ring (a rank waits for its two neighbours only, so a late rank's far peers wait as little
    # as it does and it would not stand out)
    waits_for_all: bool = False

    def sizing(self, nbytes: int, ranks: int, elem: int) -> Sizing:
        """Buffers for a message of ``nbytes`` over ``ranks`` ranks, ``elem`` bytes per element."""
        if self.layout == "whole":
            count = max(1, nbytes // elem)
            return Sizing(count, count, count, elem)
        grain = max(1, PART_ALIGN_BYTES // elem)
        part = max(grain, nbytes // elem // ranks // grain * grain)
        send = part if self.layout == "gather" else part * ranks
        recv = part if self.layout == "scatter" else part * ranks
        return Sizing(send, recv, part, elem)


# Factors: NVIDIA/nccl-tests doc/PERFORMANCE.md ("Bus bandwidth") and GetBw in src/<op>.cu: all_reduce
# 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1.
OPS: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective("all_reduce", "whole", lambda n: 2 * (n - 1) / n, waits_for_all=True),
        Collective("all_gather", "gather", lambda n: (n - 1) / n, waits_for_all=True),
        Collective("reduce_scatter", "scatter", lambda n: (n - 1) / n, waits_for_all=True),
        Collective("all_to_all", "exchange", lambda n: (n - 1) / n, waits_for_all=True),
        Collective("broadcast", "whole", lambda n: 1.0),
        Collective("reduce", "whole", lambda n: 1.0),
        Collective("sendrecv", "whole", lambda n: 1.0),
    )
}
COLLECTIVE_OPS = tuple(OPS)
