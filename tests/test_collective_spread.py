"""The collectives' per-call spread and the rule that names a rank whose calls stand out
(``families.collectives``: ``iteration_stats``, ``own_times``, ``standout``), on recorded series and on a
real gloo job whose last rank comes late to every other call."""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from acceptance.families.collectives import (
    RANK_CV_EXCESS_MAX,
    RANK_P99_RATIO_MAX,
    Figures,
    Timed,
    figures,
    iteration_stats,
    nccl_percentile,
    own_times,
    standout,
)


def test_stats_are_nccl_tests_computeIterStats() -> None:
    # src/util.cu: p50 = sorted[n / 2]; p99 = sorted[min(n - 1, (n * 99 + 99) / 100 - 1)]: of 20, the slowest;
    # the standard deviation divides by n
    values = [float(v) for v in range(1, 21)]
    median, p99, cv = iteration_stats(values)
    assert median == 11.0 and p99 == 20.0
    assert cv == pytest.approx((sum((v - 10.5) ** 2 for v in values) / 20) ** 0.5 / 10.5)
    assert nccl_percentile([float(v) for v in range(200)], 99) == 197.0  # (200 * 99 + 99) / 100 - 1 = 197


def simulate(delays: list[list[float]], call: float = 1e-3) -> list[Timed]:
    """Marks of a collective on len(delays) ranks: rank r reaches call i delays[r][i] after the last call ended,
    and every rank leaves call i ``call`` after the last one arrived (a collective ends on all ranks together)."""
    ranks, iters = len(delays), len(delays[0])
    starts = [[0.0] * iters for _ in range(ranks)]
    ended = 0.0
    ends = []
    for i in range(iters):
        for r in range(ranks):
            starts[r][i] = ended + delays[r][i]
        ended = max(starts[r][i] for r in range(ranks)) + call
        ends.append(ended)
    out: list[Timed] = []
    for r in range(ranks):
        in_call = [ends[i] - starts[r][i] for i in range(iters)]
        calls = [starts[r][i + 1] - starts[r][i] for i in range(iters - 1)] + [in_call[-1]]
        out.append({"elapsed": ends[-1] / iters, "launched": 0.0, "calls": calls, "in_call": in_call})
    return out


def test_a_late_rank_keeps_its_delay_and_the_others_do_not() -> None:
    # rank 2 reaches call 3 5 ms late: each rank's iterations (nccl-tests' -I) hold one of 6 ms (rank 2's the
    # one before the call, the others' the call they waited in), so their p99 cannot say which rank it was;
    # the own times leave the 5 ms on rank 2 alone
    delays = [[0.0] * 6 for _ in range(3)]
    delays[2][3] = 5e-3
    timed = simulate(delays)
    assert [max(t["calls"]) for t in timed] == pytest.approx([6e-3, 6e-3, 6e-3])
    assert timed[2]["calls"][2] == pytest.approx(6e-3) and timed[0]["calls"][3] == pytest.approx(6e-3)
    own = own_times(timed)
    assert own[2][2] == pytest.approx(6e-3)
    assert own[0][2] == pytest.approx(1e-3) and own[1][2] == pytest.approx(1e-3)
    assert [o[3] for o in own] == pytest.approx([1e-3, 1e-3, 1e-3])


def _rows(delay_of: list[list[list[float]]]) -> list[Figures]:
    return [
        figures("all_reduce", 1 << 20, simulate(d), len(d), [("h", f"cuda:{r}") for r in range(len(d))])
        for d in delay_of
    ]


def _noise(seed: int, ranks: int, iters: int, rows: int) -> list[list[list[float]]]:
    """A healthy set: every rank reaches each call 0-50 us after the last ended, at random."""
    rng = random.Random(seed)
    return [[[rng.uniform(0, 50e-6) for _ in range(iters)] for _ in range(ranks)] for _ in range(rows)]


@pytest.mark.parametrize("seed", range(5))
def test_a_steady_set_never_stands_out(seed: int) -> None:
    found = standout(_rows(_noise(seed, ranks=4, iters=20, rows=8)))
    assert found is not None
    assert found.p99_ratio < RANK_P99_RATIO_MAX and found.cv_excess < RANK_CV_EXCESS_MAX


def test_one_hiccup_in_one_row_is_not_a_jittery_rank() -> None:
    delays = _noise(1, ranks=4, iters=20, rows=8)
    delays[3][1][7] = 20e-3  # rank 1, once, 20 ms late (a page-cache flush): its p99 in that row alone
    rows = _rows(delays)
    assert rows[3]["ranks_spread"][1]["p99_us"] > 10 * rows[3]["ranks_spread"][0]["p99_us"]
    found = standout(rows)
    assert found is not None and found.p99_ratio < RANK_P99_RATIO_MAX


def test_a_jittery_rank_is_named_with_its_host_and_gpu() -> None:
    delays = _noise(2, ranks=4, iters=20, rows=8)
    for row in delays:
        for i in range(0, 20, 4):
            row[2][i] += 3e-3  # rank 2 reaches every fourth call 3 ms late, at every size
    found = standout(_rows(delays), [f"all_reduce {n}" for n in range(8)])
    assert found is not None
    assert (found.rank, found.host, found.gpu) == (2, "h", "cuda:2")
    assert found.p99_ratio > RANK_P99_RATIO_MAX
    assert found.cv_excess > RANK_CV_EXCESS_MAX
    assert found.worst.startswith("all_reduce ") and found.rows == 8


def test_two_ranks_each_compare_with_the_other() -> None:
    delays = _noise(3, ranks=2, iters=20, rows=4)
    for row in delays:
        row[0][5] += 4e-3
        row[0][15] += 4e-3
    found = standout(_rows(delays))
    assert found is not None and found.rank == 0 and found.p99_ratio > RANK_P99_RATIO_MAX


def test_no_rule_without_two_ranks() -> None:
    assert standout([]) is None
    assert standout(_rows([[[0.0] * 5]])) is None


# a real job: two gloo ranks on this host, the last reaching every other call SLEEP_S late (outside its
# marks, as a rank whose CPU core or GPU is shared comes late); calls of 4 KiB take tens of microseconds
RANKS, SIZES, ITERS, SLEEP_S = 2, (1024, 4096, 16384), 20, 0.05


def _rank(rank: int, store: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from acceptance.probes.collectives import timed_calls

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=RANKS)
    ctx = SimpleNamespace(is_cuda=False)
    slow = rank == RANKS - 1

    def late(i: int) -> None:
        if slow and i % 2:
            time.sleep(SLEEP_S)

    rows = []
    for elements in SIZES:
        data = torch.ones(elements)
        for _ in range(3):
            dist.all_reduce(data)
        rows.append(timed_calls(ctx, lambda d=data: dist.all_reduce(d), ITERS, between=late))  # type: ignore[arg-type, misc]
    every: list[object] = [None] * RANKS
    dist.all_gather_object(every, rows)
    if rank == 0:
        Path(out).write_text(json.dumps(every))
    dist.destroy_process_group()


@pytest.mark.e2e
def test_a_rank_slowed_on_purpose_is_named_on_gloo(tmp_path: Path) -> None:
    spawn = multiprocessing.get_context("spawn")
    out = tmp_path / "timed.json"
    procs = [spawn.Process(target=_rank, args=(r, str(tmp_path / "store"), str(out))) for r in range(RANKS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * RANKS
    every = json.loads(out.read_text())
    rows = [
        figures("all_reduce", 4 * n, [every[r][s] for r in range(RANKS)], RANKS, [("here", "cpu")] * RANKS)
        for s, n in enumerate(SIZES)
    ]
    found = standout(rows)
    assert found is not None and found.rank == RANKS - 1
    assert found.p99_ratio > RANK_P99_RATIO_MAX, found
    # nccl-tests' time is the whole loop: the late calls are in it, ten of twenty at 20 ms
    assert all(r["time_us"] >= 10 * SLEEP_S * 1e6 / ITERS for r in rows)
