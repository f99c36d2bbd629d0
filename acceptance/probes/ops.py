"""One collective's buffers and its call through torch.distributed, as its definition
(``acceptance.schema.collectives.OPS``: nccl-tests' ``struct testColl``) lays them out, fills them and checks
them. The values come from ``verifiable``: sums exact in every reduction order, so the check compares bit for
bit at any world size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from acceptance.probes.rank import TORCH_DTYPES
from acceptance.probes.verifiable import count_wrong, summand, tag, target
from acceptance.schema.collectives import OPS, ROOT, Collective, Place
from acceptance.schema.dtypes import DTYPES

CHECK_CHUNK = 1 << 25  # elements generated and compared at once: bounds the check's extra memory


def _torch_call(op: Op) -> Callable[[], object]:
    """The op's torch.distributed call in its form (``schema.collectives.TorchCall``), its arguments bound once:
    a timed loop of eager calls pays for the call alone. It holds the op's tensors, never the op (which holds
    it): the op's buffers are freed the moment the op is dropped, before the next size's are made."""
    how = op.collective.torch
    fn = getattr(dist, how.function)
    if how.form == "in_place":
        return functools.partial(fn, op.inp, group=op.group)
    if how.form == "out_in":
        return functools.partial(fn, op.out, op.inp, group=op.group)
    if how.form == "from_root":
        return functools.partial(fn, op.inp, src=op.global_rank(ROOT), group=op.group)
    if how.form == "to_root":
        return functools.partial(fn, op.inp, dst=op.global_rank(ROOT), group=op.group)
    # each rank sends to the next and receives from the previous (nccl-tests' sendrecv ring)
    rank, ranks = op.place.rank, op.place.ranks
    nxt, prev = op.global_rank((rank + 1) % ranks), op.global_rank((rank - 1) % ranks)
    inp, out, group = op.inp, op.out, op.group

    def ring() -> None:
        pair = [dist.P2POp(dist.isend, inp, nxt, group), dist.P2POp(dist.irecv, out, prev, group)]
        for work in fn(pair):
            work.wait()

    return ring


def sent(c: Collective, p: Place, pos: torch.Tensor) -> torch.Tensor:
    """The int64 values rank ``p`` sends at these positions of its input (``DataCheck``)."""
    at = c.check.sent_at(p, pos)
    return summand(p.rank, p.ranks, at, p.bound) if c.check.reduces else tag(p.rank, at, p.bound)


def expected(c: Collective, p: Place, pos: torch.Tensor) -> torch.Tensor | None:
    """The int64 values rank ``p`` must hold at these positions of its output; None: no result defined there."""
    check = c.check
    if check.on_root_only and p.rank != ROOT:
        return None
    at = check.got_at(p, pos)
    return target(at, p.bound) if check.reduces else tag(check.got_from(p, pos), at, p.bound)


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
        recv = None if OPS[name].in_place else torch.empty(recv_bytes, dtype=torch.uint8, device=device)
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
        self.name, self.group, self.collective = name, group, OPS[name]
        ranks = dist.get_world_size(group)
        self.sizing = self.collective.sizing(nbytes, ranks, DTYPES[dtype].nbytes)
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
                self.inp
                if self.collective.in_place
                else torch.empty(self.sizing.recv, dtype=torch_dtype, device=device)
            )
        self.issue = _torch_call(self)

    @property
    def send_bytes(self) -> int:
        return self.sizing.send * self.sizing.elem

    @property
    def recv_bytes(self) -> int:
        return self.sizing.recv * self.sizing.elem

    def global_rank(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def __call__(self) -> None:
        self.issue()

    def fill(self) -> None:
        """This rank's input: the values the check's expectations are computed from."""
        for start in range(0, self.inp.numel(), CHECK_CHUNK):
            pos = self._positions(start, self.inp.numel())
            self.inp[start : start + pos.numel()].copy_(sent(self.collective, self.place, pos))

    def wrong(self) -> int:
        """Elements of this rank's output that are not exactly what the call must have left there."""
        bad = 0
        for start in range(0, self.out.numel(), CHECK_CHUNK):
            pos = self._positions(start, self.out.numel())
            want = expected(self.collective, self.place, pos)
            if want is not None:
                bad += count_wrong(self.out[start : start + pos.numel()], want)
        return bad

    def _positions(self, start: int, total: int) -> torch.Tensor:
        return torch.arange(start, min(start + CHECK_CHUNK, total), dtype=torch.int64, device=self.inp.device)
