"""The torch half of each collective: its call, what each rank sends, what each rank must hold afterwards.

Keyed by the names of ``acceptance.schema.collectives.OPS``, which holds the other half (sizing and
busbw factor), like nccl-tests' ``src/<op>.cu`` (``RunColl``, ``InitData``). The values come from
``verifiable``: sums exact in every reduction order, so the check compares bit for bit at any world size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from acceptance.probes.rank import TORCH_DTYPES
from acceptance.probes.verifiable import count_wrong, summand, tag, target
from acceptance.schema.collectives import OPS
from acceptance.schema.dtypes import DTYPES

ROOT = 0  # broadcast's source and reduce's destination, as a rank of the group (nccl-tests' default -r 0)
CHECK_CHUNK = 1 << 25  # elements generated and compared at once: bounds the check's extra memory


@dataclass(frozen=True)
class Place:
    """Where this rank stands in one call: its rank and the rank count (of the group), the elements of
    one rank's part, and the largest sum the type holds exactly."""

    rank: int
    ranks: int
    part: int
    bound: int


Values = Callable[[Place, torch.Tensor], torch.Tensor]  # buffer positions -> the int64 values held there


@dataclass(frozen=True)
class Unit:
    call: Callable[[Op], None]
    sent: Values  # this rank's input
    expected: Callable[[Place, torch.Tensor], torch.Tensor | None]  # its output; None: no result defined here
    in_place: bool = False  # the result lands in the input buffer


def _all_reduce(op: Op) -> None:
    dist.all_reduce(op.inp, group=op.group)


def _all_gather(op: Op) -> None:
    dist.all_gather_into_tensor(op.out, op.inp, group=op.group)


def _reduce_scatter(op: Op) -> None:
    dist.reduce_scatter_tensor(op.out, op.inp, group=op.group)


def _all_to_all(op: Op) -> None:
    dist.all_to_all_single(op.out, op.inp, group=op.group)


def _broadcast(op: Op) -> None:
    dist.broadcast(op.inp, src=op.global_rank(ROOT), group=op.group)


def _reduce(op: Op) -> None:
    dist.reduce(op.inp, dst=op.global_rank(ROOT), group=op.group)


def _sendrecv(op: Op) -> None:
    """Each rank sends to the next and receives from the previous (nccl-tests' sendrecv ring)."""
    rank, ranks = op.place.rank, op.place.ranks
    ops = [
        dist.P2POp(dist.isend, op.inp, op.global_rank((rank + 1) % ranks), op.group),
        dist.P2POp(dist.irecv, op.out, op.global_rank((rank - 1) % ranks), op.group),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


def _summands(p: Place, pos: torch.Tensor) -> torch.Tensor:
    return summand(p.rank, p.ranks, pos, p.bound)


def _own_tags(p: Place, pos: torch.Tensor) -> torch.Tensor:
    return tag(p.rank, pos, p.bound)


# Reductions send summands and must give the target; the other ops send tags and must deliver them to
# the right place. Positions are indices into this rank's buffer.
UNITS: dict[str, Unit] = {
    "all_reduce": Unit(_all_reduce, _summands, lambda p, pos: target(pos, p.bound), in_place=True),
    "all_gather": Unit(
        _all_gather,
        lambda p, pos: tag(p.rank, p.rank * p.part + pos, p.bound),
        lambda p, pos: tag(pos // p.part, pos, p.bound),
    ),
    "reduce_scatter": Unit(_reduce_scatter, _summands, lambda p, pos: target(p.rank * p.part + pos, p.bound)),
    "all_to_all": Unit(
        _all_to_all, _own_tags, lambda p, pos: tag(pos // p.part, p.rank * p.part + pos % p.part, p.bound)
    ),
    "broadcast": Unit(_broadcast, _own_tags, lambda p, pos: tag(ROOT, pos, p.bound), in_place=True),
    "reduce": Unit(_reduce, _summands, lambda p, pos: target(pos, p.bound) if p.rank == ROOT else None, in_place=True),
    "sendrecv": Unit(_sendrecv, _own_tags, lambda p, pos: tag((p.rank - 1) % p.ranks, pos, p.bound)),
}


@dataclass(frozen=True)
class Arena:
    """One op's buffers for a whole sweep, each as large as the op's largest size needs it: nccl-tests
    allocates its buffers once at ``maxbytes`` and moves each timed call on into them (``Op.slots``). Each
    buffer at its own largest size (all_gather's input is 1/n of its output), so the sweep needs no more memory
    than its largest size alone; no receive buffer for an op whose result lands in its input."""

    send: torch.Tensor
    recv: torch.Tensor | None

    @classmethod
    def for_sweep(
        cls, name: str, sizes: list[int], dtype: str, device: torch.device, ranks: int | None = None
    ) -> Arena:
        """``ranks``: the world's by default."""
        elem, ranks = DTYPES[dtype].nbytes, ranks or dist.get_world_size()
        sizings = [OPS[name].sizing(n, ranks, elem) for n in sizes]
        send = torch.empty(max(s.send for s in sizings) * elem, dtype=torch.uint8, device=device)
        recv_bytes = max(s.recv for s in sizings) * elem
        recv = None if UNITS[name].in_place else torch.empty(recv_bytes, dtype=torch.uint8, device=device)
        return cls(send, recv)

    def slots(self, send_bytes: int, recv_bytes: int) -> int:
        """How many calls of these buffers' sizes find buffers of their own here before the first is used
        again (nccl-tests' ``maxbytes / totalnbytes``); 0: they do not fit."""
        fits = self.send.numel() // send_bytes
        return fits if self.recv is None else min(fits, self.recv.numel() // recv_bytes)


class Op:
    """This rank's buffers for one collective, and one call of it.

    ``group`` (default: every rank) lets a probe measure inside a subset, e.g. one node; ranks and
    sizes are then the group's, and only its members may build the op."""

    def __init__(
        self, name: str, nbytes: int, dtype: str, device: torch.device, group: Any = None, arena: Arena | None = None
    ) -> None:
        self.name, self.group, self.unit = name, group, UNITS[name]
        ranks = dist.get_world_size(group)
        self.sizing = OPS[name].sizing(nbytes, ranks, DTYPES[dtype].nbytes)
        self.place = Place(dist.get_rank(group), ranks, self.sizing.part, DTYPES[dtype].exact_integers)
        torch_dtype = TORCH_DTYPES[dtype]
        # in an arena, the buffers are its first bytes and the rest is the timed loop's to move on into; slots:
        # how many calls in turn find buffers of their own there (1: every call on the same buffers)
        fits = arena.slots(self.send_bytes, self.recv_bytes) if arena is not None else 0
        self.slots = max(1, fits)
        if arena is not None and fits > 0:
            self.inp = arena.send[: self.send_bytes].view(torch_dtype)
            self.out = self.inp if arena.recv is None else arena.recv[: self.recv_bytes].view(torch_dtype)
        else:
            self.inp = torch.empty(self.sizing.send, dtype=torch_dtype, device=device)
            self.out = (
                self.inp if self.unit.in_place else torch.empty(self.sizing.recv, dtype=torch_dtype, device=device)
            )

    @property
    def send_bytes(self) -> int:
        return self.sizing.send * self.sizing.elem

    @property
    def recv_bytes(self) -> int:
        return self.sizing.recv * self.sizing.elem

    def global_rank(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def __call__(self) -> None:
        self.unit.call(self)

    def fill(self) -> None:
        """This rank's input: the values the check's expectations are computed from."""
        for start in range(0, self.inp.numel(), CHECK_CHUNK):
            pos = self._positions(start, self.inp.numel())
            self.inp[start : start + pos.numel()].copy_(self.unit.sent(self.place, pos))

    def wrong(self) -> int:
        """Elements of this rank's output that are not exactly what the call must have left there."""
        bad = 0
        for start in range(0, self.out.numel(), CHECK_CHUNK):
            pos = self._positions(start, self.out.numel())
            want = self.unit.expected(self.place, pos)
            if want is not None:
                bad += count_wrong(self.out[start : start + pos.numel()], want)
        return bad

    def _positions(self, start: int, total: int) -> torch.Tensor:
        return torch.arange(start, min(start + CHECK_CHUNK, total), dtype=torch.int64, device=self.inp.device)
