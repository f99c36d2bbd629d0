"""Data for the collectives' check whose expected result is exact in every reduction order, at any world size.

The model is NVIDIA/nccl-tests ``verifiable/verifiable.cu`` (``genInOutFloatSum``, ``genSumXY``): per
element it first picks the sum y the reduction must give, then splits y over the ranks into non-negative
integers. Every partial sum, of any subset of ranks in any order or tree, is then an integer in [0, y];
with y <= 2**p (p: the type's significand bits, 8 for bfloat16) each one is exactly representable, so
every rounding step is exact and the result must equal y bit for bit. Any change to it is a wrong element.

* ``target``: y per element, a hashed integer in [bound/2, bound]: never 0, so a zeroed element is wrong.
* ``summand``: rank r's share of y. The ranks are rotated by a per-element hash, then the share of
  position p is floor((p+1)y/n) - floor(py/n): these telescope to y and differ by at most 1, so a rank
  holds a part of about y/n of every element (at least 1 while n <= y): a rank whose contribution is
  lost changes every element it had a share of (all of them up to 128 ranks in bfloat16).
* ``tag``: what a rank sends in the ops that only move data: a hashed integer in [bound/2, bound] per
  (rank, element), so a part from the wrong rank or the wrong offset differs almost everywhere.

Every value is an int64 tensor; the probe casts it into the buffer's type, where it is exact.
"""

from __future__ import annotations

import torch

_MASK = (1 << 31) - 1  # hashing keeps values under 2**31 so that products with the 30-bit constants never wrap
_TARGET_KEY, _ROTATION_KEY = -1, -2  # hash keys of the reductions' streams; tags use the rank (>= 0)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 31-bit integer hash: xor-shift-multiply rounds (the shape of murmur3's finaliser), with odd
    multipliers under 2**30 so that int64 arithmetic, on the CPU and on GPUs alike, never wraps."""
    x = ((x ^ (x >> 16)) * 0x21F0AAAD) & _MASK
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) & _MASK
    return x ^ (x >> 15)


def _hash(key: int | torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """A hash of (key, element index) in [0, 2**31); indices past 2**31 fold their high bits in."""
    folded = (index & _MASK) ^ _mix((index >> 31) & _MASK)
    return _mix((_mix(folded) + (key + 3) * 0x9E3779B) & _MASK)


def _between(h: torch.Tensor, bound: int) -> torch.Tensor:
    """An integer in [bound // 2, bound] from a hash."""
    low = bound // 2
    return low + h % (bound - low + 1)


def target(index: torch.Tensor, bound: int) -> torch.Tensor:
    """The sum every reduction must give at these element indices."""
    return _between(_hash(_TARGET_KEY, index), bound)


def summand(rank: int | torch.Tensor, ranks: int, index: torch.Tensor, bound: int) -> torch.Tensor:
    """Rank ``rank``'s share (of ``ranks``) of ``target(index)``: non-negative, summing to it exactly."""
    y = target(index, bound)
    position = (rank + _hash(_ROTATION_KEY, index)) % ranks
    return (position + 1) * y // ranks - position * y // ranks


def tag(rank: int | torch.Tensor, index: torch.Tensor, bound: int) -> torch.Tensor:
    """What ``rank`` sends at these element indices in an op that only moves data."""
    return _between(_hash(rank, index), bound)


def count_wrong(got: torch.Tensor, want: torch.Tensor) -> int:
    """Elements of ``got`` not exactly ``want`` (a NaN never equals anything, so it counts)."""
    return int((got.to(torch.float64) != want.to(torch.float64)).sum().item())
