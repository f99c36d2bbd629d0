"""The collectives a profile may name, each defined once, the way nccl-tests defines one (``struct testColl`` in
src/common.h, filled in each ``src/<op>.cu``): how a message is laid over the ranks (``GetCollByteCount``), its
bus-bandwidth factor (``GetBw``), what each rank sends and must hold afterwards (``InitData`` and the check),
and its call: the libnccl entry point the C loop binds to (``RunColl``) and torch.distributed's function.

Torch-free: the profile's op list (``COLLECTIVE_OPS``) and the rules' busbw factors come from here without
torch; the probe (``acceptance.probes.ops``, ``probes.nccl_calls``, ``probes.nccl_loop``) reads the calls and
the data check from the same records. The data check's index maps are plain arithmetic on the positions of
a rank's buffer (a tensor of int64 on the probe's side); the values at those indices are ``verifiable``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the index maps' positions: the probe's tensors, arithmetic alone here
    from torch import Tensor

# How one rank's buffers hold the message: whole (every rank the whole message); gather (sends its
# part, receives every rank's); scatter (sends every rank's part, receives its own); exchange (a part
# for every peer each way).
Layout = Literal["whole", "gather", "scatter", "exchange"]
# nccl-tests rounds each rank's part down to 16 bytes (`(count/nranks) & ~(16/eltSize - 1)` in
# GetCollByteCount of all_gather.cu, reduce_scatter.cu, alltoall.cu); here at least one such grain, so
# a small message on many ranks still moves data
PART_ALIGN_BYTES = 16
ROOT = 0  # broadcast's source and reduce's destination, as a rank of the group (nccl-tests' default -r 0)


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
class Place:
    """Where a rank stands in one call: its rank and the rank count (of the group), the elements of one
    rank's part, and the largest sum the type holds exactly."""

    rank: int
    ranks: int
    part: int
    bound: int


IndexMap = Callable[[Place, "Tensor"], "Tensor"]  # positions in a rank's buffer -> element indices
RankMap = Callable[[Place, "Tensor"], "Tensor | int"]  # positions in a rank's output -> the rank that sent them


def _same(p: Place, pos: Tensor) -> Tensor:
    return pos


def _own_part(p: Place, pos: Tensor) -> Tensor:
    """A position of this rank's part, as an index of the whole message (the rank's part of it)."""
    return p.rank * p.part + pos


def _root(p: Place, pos: Tensor) -> int:
    return ROOT


@dataclass(frozen=True)
class DataCheck:
    """What a rank sends and must hold afterwards (nccl-tests' ``InitData`` and its check), exact at any world
    size (``probes.verifiable``). A reduction sends the rank's summands of the target at ``sent_at`` and must
    hold the target at ``got_at``; an op that only moves data sends the rank's tags at ``sent_at`` and must
    hold, at each position, the tag of rank ``got_from`` at ``got_at``. ``on_root_only``: only the root's
    output is defined (reduce)."""

    reduces: bool
    sent_at: IndexMap = _same
    got_at: IndexMap = _same
    got_from: RankMap = _root
    on_root_only: bool = False


class Prototype(IntEnum):
    """nccl.h's prototypes, by the shape the C loop calls them through (``nccl_loop.c``'s ``enum shape``)."""

    GROUP = 0  # ncclGroupStart, ncclGroupEnd
    COLL7 = 1  # send, recv, count, type, op or root, comm, stream
    COLL6 = 2  # send, recv, count, type, comm, stream
    REDUCE = 3  # send, recv, count, type, op, root, comm, stream
    P2P = 4  # buffer, count, type, peer, comm, stream


@dataclass(frozen=True)
class NcclCall:
    """The libnccl entry point of one call (nccl-tests' ``RunColl``) and what its arguments are: ``count`` the
    whole message's elements or one rank's part, ``arg`` the reduction (ncclSum), the root, or both (ncclReduce).
    ``grouped``: the call as sends and receives in one NCCL group where the entry point is absent (all_to_all
    before NCCL 2.28, src/alltoall.cu) or there is none (the sendrecv ring, src/sendrecv.cu)."""

    entry: str | None
    prototype: Prototype = Prototype.COLL7
    count: Literal["total", "part"] = "total"
    arg: Literal["sum", "root", "sum_root", "none"] = "sum"
    grouped: Literal["ring", "exchange"] | None = None


@dataclass(frozen=True)
class TorchCall:
    """torch.distributed's function for the op and how it is called: ``in_place`` (the input, the result in it),
    ``out_in`` (output, input), ``from_root``/``to_root`` (in place, the root as ``src``/``dst``), ``ring`` (a
    send to the next rank and a receive from the previous, ``batch_isend_irecv``)."""

    function: str
    form: Literal["in_place", "out_in", "from_root", "to_root", "ring"]


@dataclass(frozen=True)
class Collective:
    name: str
    nccl_tests: str  # nccl-tests' name of the op: its src/<name>.cu, built as <name>_perf
    layout: Layout
    busbw_factor: Callable[[int], float]  # busbw = algbw * factor(ranks)
    nccl: NcclCall
    torch: TorchCall
    check: DataCheck
    in_place: bool = False  # the result lands in the input buffer (no receive buffer)
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
def _all_reduce_factor(n: int) -> float:
    return 2 * (n - 1) / n


def _share_factor(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


OPS: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective(
            "all_reduce",
            "all_reduce",
            "whole",
            _all_reduce_factor,
            NcclCall("ncclAllReduce"),
            TorchCall("all_reduce", "in_place"),
            DataCheck(reduces=True),
            in_place=True,
            waits_for_all=True,
        ),
        Collective(
            "all_gather",
            "all_gather",
            "gather",
            _share_factor,
            NcclCall("ncclAllGather", Prototype.COLL6, "part", "none"),
            TorchCall("all_gather_into_tensor", "out_in"),
            # sends its part of the whole message; holds every rank's part in rank order
            DataCheck(reduces=False, sent_at=_own_part, got_from=lambda p, pos: pos // p.part),
            waits_for_all=True,
        ),
        Collective(
            "reduce_scatter",
            "reduce_scatter",
            "scatter",
            _share_factor,
            NcclCall("ncclReduceScatter", count="part"),
            TorchCall("reduce_scatter_tensor", "out_in"),
            DataCheck(reduces=True, got_at=_own_part),  # holds its own part of the sum
            waits_for_all=True,
        ),
        Collective(
            "all_to_all",
            "alltoall",
            "exchange",
            _share_factor,
            NcclCall("ncclAlltoAll", Prototype.COLL6, "part", "none", grouped="exchange"),
            TorchCall("all_to_all_single", "out_in"),
            # part s of its output is part r (this rank's) of rank s's input
            DataCheck(
                reduces=False,
                got_from=lambda p, pos: pos // p.part,
                got_at=lambda p, pos: p.rank * p.part + pos % p.part,
            ),
            waits_for_all=True,
        ),
        Collective(
            "broadcast",
            "broadcast",
            "whole",
            _one,
            NcclCall("ncclBroadcast", arg="root"),
            TorchCall("broadcast", "from_root"),
            DataCheck(reduces=False),  # the root's tags
            in_place=True,
        ),
        Collective(
            "reduce",
            "reduce",
            "whole",
            _one,
            NcclCall("ncclReduce", Prototype.REDUCE, arg="sum_root"),
            TorchCall("reduce", "to_root"),
            DataCheck(reduces=True, on_root_only=True),
            in_place=True,
        ),
        Collective(
            "sendrecv",
            "sendrecv",
            "whole",
            _one,
            NcclCall(None, grouped="ring"),
            TorchCall("batch_isend_irecv", "ring"),
            DataCheck(reduces=False, got_from=lambda p, pos: (p.rank - 1) % p.ranks),  # the previous rank's tags
        ),
    )
}
COLLECTIVE_OPS = tuple(OPS)
