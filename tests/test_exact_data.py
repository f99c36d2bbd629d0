"""The collectives' data check, without a process group: exact in every reduction order at any world size
and type, and still counting a lost contribution, a corrupted element or a misplaced part as wrong.

The replays add the ranks' contributions with tensors of the buffer's type, so every rounding step is the
type's own: sequentially, around the ring from every rank in both directions (NCCL's ring starts each
chunk's reduction at a different rank), as a balanced pairwise tree and as random trees.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

from acceptance.probes.ops import expected, sent
from acceptance.probes.rank import TORCH_DTYPES
from acceptance.probes.verifiable import count_wrong, summand, tag, target
from acceptance.schema.collectives import OPS, Place
from acceptance.schema.dtypes import DTYPE_NAMES, DTYPES

WORLD_SIZES = (2, 3, 7, 8, 64, 85, 96, 128, 256, 1000, 1024)
# element indices: the start of a buffer, and far into a 4 GiB one (past 2**31, where the hash folds)
INDEX = torch.cat([torch.arange(2048), torch.arange(2**31 - 1024, 2**31 + 1024), torch.arange(2**33, 2**33 + 64)])


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Thousands of small additions: intra-op threads only add hand-offs (tenfold on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def contributions(ranks: int, name: str, index: torch.Tensor = INDEX) -> torch.Tensor:
    """Every rank's summands, one row per rank, in the type itself (casting is exact: they are small)."""
    bound = DTYPES[name].exact_integers
    rows = summand(torch.arange(ranks)[:, None], ranks, index, bound)
    assert bool((rows >= 0).all()) and bool((rows.sum(0) == target(index, bound)).all())
    return rows.to(TORCH_DTYPES[name])


def ring_sums(rows: torch.Tensor, step: int) -> torch.Tensor:
    """Sums around the ring, one starting at each rank; step +1 or -1 is the direction."""
    ranks = rows.shape[0]
    ring = torch.cat([rows, rows]) if step > 0 else torch.cat([rows, rows]).flip(0)
    acc = ring[:ranks]
    for hop in range(1, ranks):  # row s of the slice is rank s + hop (or s - hop) around the ring
        acc = acc + ring[hop : hop + ranks]
    return acc


def pairwise_sum(rows: torch.Tensor) -> torch.Tensor:
    """A balanced binary tree: neighbours added level by level."""
    while rows.shape[0] > 1:
        pairs = rows.shape[0] // 2
        summed = rows[0 : 2 * pairs : 2] + rows[1 : 2 * pairs : 2]
        rows = torch.cat([summed, rows[2 * pairs :]]) if rows.shape[0] % 2 else summed
    return rows[0]


def random_tree_sum(rows: torch.Tensor, seed: int) -> torch.Tensor:
    """Random partial sums added together two at a time until one is left: any tree NCCL might build."""
    rng = random.Random(seed)
    parts = list(rows)
    while len(parts) > 1:
        i, j = rng.sample(range(len(parts)), 2)
        parts[i] = parts[i] + parts[j]
        parts.pop(j)
    return parts[0]


@pytest.mark.parametrize("name", DTYPE_NAMES)
@pytest.mark.parametrize("ranks", WORLD_SIZES)
def test_every_reduction_order_is_exact(ranks: int, name: str) -> None:
    bound = DTYPES[name].exact_integers
    rows = contributions(ranks, name)
    want = target(INDEX, bound)
    sequential = rows[0]
    for row in rows[1:]:
        sequential = sequential + row
    assert count_wrong(sequential, want) == 0
    assert count_wrong(pairwise_sum(rows), want) == 0
    for seed in range(3):
        assert count_wrong(random_tree_sum(rows, seed), want) == 0
    # every start and both directions: a few elements keep it quick at 1024 ranks
    few = torch.arange(0, INDEX.numel(), 17)
    for step in (1, -1):
        assert count_wrong(ring_sums(rows[:, few], step), want[few].expand(ranks, -1)) == 0


def test_the_replay_sees_rounding() -> None:
    """The pattern the check used before (values 1..5 per rank) is not exact in bfloat16 at 128 ranks."""
    ranks = 128
    rows = torch.stack([(INDEX + r) % 5 + 1 for r in range(ranks)])
    want = rows.sum(0)
    assert count_wrong(ring_sums(rows.to(torch.bfloat16)[:, :256], 1), want[:256].expand(ranks, -1)) > 0


@pytest.mark.parametrize("ranks", [2, 8, 96, 1024])
def test_a_lost_contribution_is_wrong(ranks: int) -> None:
    bound = DTYPES["bfloat16"].exact_integers
    rows = contributions(ranks, "bfloat16")
    lost = ranks // 2
    partial = pairwise_sum(torch.cat([rows[:lost], rows[lost + 1 :]]))
    had_a_share = int((rows[lost] != 0).sum())
    assert count_wrong(partial, target(INDEX, bound)) == had_a_share
    if ranks <= bound // 2:  # y >= bound / 2 >= n: every rank has a share of every element
        assert had_a_share == INDEX.numel()
    else:  # a share of about y/n of them, y in [128, 256]: about 19% at 1024 ranks
        assert had_a_share > 0.1 * INDEX.numel()


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_a_corrupted_element_is_wrong(name: str) -> None:
    bound = DTYPES[name].exact_integers
    result = pairwise_sum(contributions(96, name))
    want = target(INDEX, bound)
    assert count_wrong(result, want) == 0
    bits = result.clone().view(torch.int16 if DTYPES[name].nbytes == 2 else torch.int32)
    bits[7] ^= 1  # the lowest mantissa bit of one element
    assert count_wrong(bits.view(result.dtype), want) == 1
    for bad in (0.0, float("nan"), float("inf")):
        broken = result.clone()
        broken[11] = bad
        assert count_wrong(broken, want) == 1


def test_a_part_from_the_wrong_rank_or_offset_is_wrong() -> None:
    bound = DTYPES["bfloat16"].exact_integers
    mine = tag(5, INDEX, bound)
    assert count_wrong(tag(6, INDEX, bound), mine) > 0.97 * INDEX.numel()
    assert count_wrong(tag(5 + 256, INDEX, bound), mine) > 0.97 * INDEX.numel()
    assert count_wrong(tag(5, INDEX + 1, bound), mine) > 0.97 * INDEX.numel()


def simulate(name: str, inputs: list[torch.Tensor], part: int) -> list[torch.Tensor]:
    """What each rank's output holds after the op, computed from every rank's input without communication."""
    ranks = len(inputs)
    total = pairwise_sum(torch.stack(inputs))  # used by the reductions only
    blocks = [x.split(part) for x in inputs]
    outputs = {
        "all_reduce": lambda r: total,
        "reduce": lambda r: total if r == 0 else inputs[r],
        "reduce_scatter": lambda r: total[r * part : (r + 1) * part],
        "all_gather": lambda r: torch.cat(inputs),
        "all_to_all": lambda r: torch.cat([blocks[s][r] for s in range(ranks)]),
        "broadcast": lambda r: inputs[0],
        "sendrecv": lambda r: inputs[(r - 1) % ranks],
    }
    return [outputs[name](r) for r in range(ranks)]


def run_unit(name: str, ranks: int, dtype: str, moved: bool) -> int:
    """Wrong elements over every rank of one op, its output as the op leaves it (or untouched: ``moved`` off)."""
    spec = DTYPES[dtype]
    sizing = OPS[name].sizing(1000 * spec.nbytes, ranks, spec.nbytes)
    places = [Place(r, ranks, sizing.part, spec.exact_integers) for r in range(ranks)]
    op = OPS[name]
    inputs = [sent(op, p, torch.arange(sizing.send)).to(TORCH_DTYPES[dtype]) for p in places]
    untouched = [x if op.in_place else torch.zeros(sizing.recv, dtype=x.dtype) for x in inputs]
    outputs = simulate(name, inputs, sizing.part) if moved else untouched
    wrong = 0
    for place, out in zip(places, outputs, strict=True):
        assert out.numel() == sizing.recv
        want = expected(op, place, torch.arange(sizing.recv))
        wrong += 0 if want is None else count_wrong(out, want)
    return wrong


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("ranks", [1, 2, 3, 8])
@pytest.mark.parametrize("name", list(OPS))
def test_each_op_expects_what_it_delivers(name: str, ranks: int, dtype: str) -> None:
    assert run_unit(name, ranks, dtype, moved=True) == 0
    if ranks > 1:
        assert run_unit(name, ranks, dtype, moved=False) > 0  # a call that moved nothing is caught
