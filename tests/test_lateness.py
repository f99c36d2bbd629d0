"""The collectives' spread pass: the lateness arithmetic and the rule from recorded per-rank call times, the
blocking loop's marks, and the whole pass in a real gloo group where one rank issues its calls late."""

from __future__ import annotations

import datetime
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import spawn

from acceptance.families.collectives import COLLECTIVES, Collectives, lateness, spread_cases
from acceptance.families.collectives.lateness import RankPlace, RankSpread, Spread
from acceptance.probes import collectives, windows
from acceptance.probes.rank import Ctx, Heartbeat
from acceptance.profile.metrics import builtin_bound, metric_problem
from acceptance.profile.model import ProfileModel
from acceptance.schema.collectives import OPS


def test_p99_is_nearest_rank_as_nccl_tests_reports_it() -> None:
    # percentileIndex(n, 99) = min(n - 1, (99 n + 99) / 100 - 1) (src/util.cu), worked out by hand
    values = [float(v) for v in range(1, 101)]  # 1 .. 100
    assert lateness.nearest_rank(values, 99) == 99  # index 98: the second largest of 100
    assert lateness.nearest_rank(values[:50], 99) == 50  # index 49: the largest of 50
    assert lateness.nearest_rank(values + [101.0] * 100, 99) == 101  # 200 values: index 197
    assert lateness.nearest_rank(list(reversed(values)), 99) == 99  # sorted first
    assert lateness.nearest_rank([7.0], 99) == 7


def test_the_cv_is_the_population_deviation_over_the_mean() -> None:
    assert lateness.cv([1.0, 3.0]) == pytest.approx(0.5)  # mean 2, population deviation 1
    assert lateness.cv([2.0, 2.0, 2.0]) == 0
    assert lateness.cv([0.0, 0.0]) == 0


def test_a_rank_s_lateness_is_how_much_longer_than_the_first_it_took_to_get_back_into_each_call() -> None:
    # call 1: rank 1 came back 2 s after rank 0; call 2: together; call 3: rank 0 came back 3 s after rank 1
    gaps = [[1.0, 1.0, 5.0], [3.0, 1.0, 2.0]]
    assert lateness.lateness(gaps) == [[0.0, 0.0, 3.0], [2.0, 0.0, 0.0]]


def test_every_rank_must_have_made_the_same_calls() -> None:
    with pytest.raises(ValueError):
        lateness.lateness([[1.0, 2.0], [1.0]])


def test_the_figures_of_each_rank_in_microseconds() -> None:
    # rank 1 gets back into the next call 400 us late 10 times in 100 calls: rank 0 waits for it there
    healthy = [100e-6] * 100
    rank0 = [500e-6 if i % 10 == 0 else 100e-6 for i in range(100)]
    back = [20e-6] * 99
    slow_back = [420e-6 if (i + 1) % 10 == 0 else 20e-6 for i in range(99)]
    found = lateness.spread("all_reduce", "1M", [rank0, healthy], [back, slow_back])
    assert (found["op"], found["size"], found["calls"]) == ("all_reduce", "1M", 100)
    waited, late = found["ranks"]
    assert late["lateness_p99_us"] == pytest.approx(400)
    assert late["lateness_mean_us"] == pytest.approx(400 * 9 / 99)
    assert waited["lateness_p99_us"] == 0 and waited["lateness_mean_us"] == 0
    assert waited["p99_us"] == pytest.approx(500) and waited["median_us"] == pytest.approx(100)
    assert waited["cv"] == pytest.approx(lateness.cv(rank0))
    assert late["cv"] == 0
    assert lateness.worst(found) == 1


def _rank(lateness_p99_us: float) -> RankSpread:
    return {"median_us": 50.0, "p99_us": 60.0, "cv": 0.1, "lateness_p99_us": lateness_p99_us, "lateness_mean_us": 1.0}


def _spread(*p99s: float, op: str = "all_reduce", size: str = "1M") -> Spread:
    return {"op": op, "size": size, "calls": 100, "ranks": [_rank(p) for p in p99s]}


def test_a_rank_late_beyond_its_peers_is_named_with_the_bound_it_missed() -> None:
    found = lateness.stands_out(_spread(8.0, 2_000.0, 12.0, 10.0), ratio=4, floor_us=100)
    assert [(x.rank, x.op, x.size) for x in found] == [(1, "all_reduce", "1M")]
    assert found[0].peers_us == 10  # the median of the others: 8, 10, 12
    assert found[0].bound_us == pytest.approx(140)


def test_healthy_ranks_are_not_named() -> None:
    assert lateness.stands_out(_spread(20.0, 35.0, 12.0, 28.0), ratio=4, floor_us=100) == []


def test_the_floor_keeps_microsecond_noise_from_naming_a_rank() -> None:
    # 40 us against peers that never waited is 40x them, and no news at a small size
    assert lateness.stands_out(_spread(0.0, 40.0), ratio=4, floor_us=50) == []
    assert [x.rank for x in lateness.stands_out(_spread(0.0, 60.0), ratio=4, floor_us=50)] == [1]


def test_the_ratio_scales_the_bound_where_every_rank_waits_long() -> None:
    assert lateness.stands_out(_spread(1_000.0, 3_000.0), ratio=4, floor_us=100) == []
    assert [x.rank for x in lateness.stands_out(_spread(1_000.0, 4_200.0), ratio=4, floor_us=100)] == [1]


def test_one_rank_has_no_peers_to_stand_out_from() -> None:
    assert lateness.stands_out(_spread(5_000.0), ratio=4, floor_us=0) == []


def test_late_ranks_over_every_case_in_order() -> None:
    cases = [_spread(0.0, 900.0), _spread(10.0, 12.0, size="16M"), _spread(700.0, 0.0, op="all_gather")]
    found = lateness.late_ranks(cases, ratio=4, floor_us=100)
    assert [(x.rank, x.op, x.size) for x in found] == [(1, "all_reduce", "1M"), (0, "all_gather", "1M")]


PLACES: list[RankPlace] = [
    {"rank": 0, "node": 0, "host": "gpu-a", "gpu": 0, "uuid": "GPU-0000"},
    {"rank": 1, "node": 1, "host": "gpu-b", "gpu": 3, "uuid": "GPU-3f2a"},
]


def test_a_late_rank_is_named_by_node_host_gpu_and_uuid_with_its_figures() -> None:
    found = lateness.late_ranks([_spread(0.0, 900.0), _spread(0.0, 800.0, size="16M")], ratio=4, floor_us=100)
    text = lateness.late_text(found, PLACES, 4, 100)
    lines = text.splitlines()
    assert lines[0] == "rank 1 (node 1: gpu-b GPU 3, GPU-3f2a) arrived late at 2 op/size case(s):"
    assert lines[1].startswith("  all_reduce 1M: lateness p99 900 us (mean 1 us); its calls median 50 us")
    assert "bound 4 x 0 + 100 = 100 us" in lines[1]
    assert lines[2].startswith("  all_reduce 16M: lateness p99 800 us")
    # the drain list takes a node's GPU from "<host> GPU <n>" (acceptance.evidence.drain)
    assert "gpu-b GPU 3" in text and "gpu-a" not in text


def test_a_rank_on_the_cpu_or_without_a_recorded_place() -> None:
    cpu: list[RankPlace] = [{"rank": 1, "node": 0, "host": "box", "gpu": None, "uuid": None}]
    assert lateness.place_text(1, cpu) == "rank 1 (node 0: box, cpu)"
    assert lateness.place_text(2, cpu) == "rank 2"
    assert (
        lateness.place_text(0, [{"rank": 0, "node": 0, "host": "h", "gpu": 1, "uuid": None}])
        == "rank 0 (node 0: h GPU 1)"
    )


def test_the_pass_is_made_for_the_ops_that_end_on_every_rank_together_at_its_own_sizes() -> None:
    assert [op for op in OPS if OPS[op].waits_for_all] == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
    assert lateness.applies("all_reduce", 100)
    assert not lateness.applies("all_reduce", 0)  # spread_iters 0: no pass
    assert not lateness.applies("broadcast", 100)
    # the sweep's sizes start at 256M: the pass keeps its own
    section = Collectives(
        ops=["all_reduce", "broadcast", "all_to_all"], sizes=["256M", "1G"], spread_sizes=["1M", "64M"]
    )
    assert spread_cases(section) == [
        ("all_reduce", "1M"),
        ("all_reduce", "64M"),
        ("all_to_all", "1M"),
        ("all_to_all", "64M"),
    ]
    assert spread_cases(Collectives(spread_iters=0)) == []
    assert len(spread_cases(Collectives(ops=["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]))) == 16


def test_the_figures_are_named_only_where_the_pass_is_made_and_late_ranks_is_gated() -> None:
    profile = ProfileModel.model_validate(
        {"name": "p", "collectives": {"ops": ["all_reduce", "broadcast"], "sizes": ["1M", "1G"], "spread_ratio": 3}}
    )
    assert metric_problem("collectives.all_reduce.lateness_p99_us@1M", profile) is None
    assert "broadcast" in str(metric_problem("collectives.broadcast.lateness_p99_us@1M", profile))
    assert "1G" in str(metric_problem("collectives.all_reduce.lateness_p99_us@1G", profile))
    bound = builtin_bound("collectives.late_ranks", profile)
    assert bound is not None and bound.eq == 0
    assert "spread_ratio 3 " in str(bound.source) and "spread_floor_us 100" in str(bound.source)
    assert builtin_bound("collectives.all_reduce.lateness_p99_us@1M", profile) is None  # information
    assert COLLECTIVES.section_of(profile).spread_iters == 100


def test_a_rank_is_named_only_where_it_stands_out_in_its_share_of_the_cases() -> None:
    # rank 1 stands out in 1 of 4 cases (a healthy host's lone stall), rank 0 in 3 of 4 (a shared core)
    cases = [_spread(900.0, 5.0), _spread(800.0, 5.0, size="4M"), _spread(5.0, 700.0, size="16M"),
             _spread(950.0, 5.0, op="all_gather")]  # fmt: skip
    assert {x.rank for x in lateness.late_ranks(cases, ratio=4, floor_us=100)} == {0, 1}
    found = lateness.late_ranks(cases, ratio=4, floor_us=100, share=0.5)
    assert [(x.rank, x.size) for x in found] == [(0, "1M"), (0, "4M"), (0, "1M")]
    assert lateness.late_ranks(cases, ratio=4, floor_us=100, share=1.0) == []
    # one case: a rank that stands out there is named whatever the share
    assert [x.rank for x in lateness.late_ranks(cases[:1], ratio=4, floor_us=100, share=0.25)] == [0]


def test_one_call_or_a_size_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        Collectives(spread_iters=1)
    with pytest.raises(ValueError, match="1M more than once"):
        Collectives(spread_sizes=["1M", "4M", "1M"])
    assert Collectives(spread_iters=0).spread_iters == 0


def test_blocking_calls_on_the_cpu_time_each_call_and_the_way_back_into_the_next_on_the_host_clock() -> None:
    pauses = itertools.cycle([0.0, 0.002])
    ticks = itertools.count()

    def progress() -> None:  # the host held back before every third call but the first
        if next(ticks) % 3 == 2:
            time.sleep(0.003)

    ctx: Any = SimpleNamespace(is_cuda=False, progress=progress)
    found = windows.blocking_calls(ctx, lambda: time.sleep(next(pauses)), 6)
    assert len(found.seconds) == 6 and len(found.gaps) == 5
    assert all(s >= 0.002 for s in found.seconds[1::2])  # each call's own time, whatever the host did between them
    assert found.gaps[1] >= 0.003 and found.gaps[4] >= 0.003  # the way back into calls 3 and 6


def test_a_call_that_fails_fails_the_pass() -> None:
    ctx: Any = SimpleNamespace(is_cuda=False, progress=lambda: None)

    def fail() -> None:
        raise RuntimeError("ncclAllReduce returned 3: internal error")

    with pytest.raises(RuntimeError, match="returned 3"):
        windows.blocking_calls(ctx, fail, 3)


# ---- the whole pass in a real gloo group of two ranks --------------------------------------------------------

RATIO, FLOOR_US = 4.0, 50_000.0  # local-cpu's: a loaded two-core machine delays a healthy rank by milliseconds
LATE_S = 0.2  # well beyond the floor and 4x a healthy peer's waits
CALLS = 100


@dataclass
class _Stalling(Ctx):
    """A rank's context whose host stalls for LATE_S before every ``every``-th call (0: never): the blocking
    loop ticks the heartbeat before each call, and this rank's tick sleeps, as a host core taken by another
    task holds a rank back between its calls."""

    every: int = 0
    ticks: int = 0

    def progress(self) -> None:
        super().progress()
        self.ticks += 1
        if self.every and self.ticks % self.every == 0:
            time.sleep(LATE_S)


def _member(rank: int, folder: str, late: int | None) -> None:
    """One rank: the probe's spread pass over a real all_reduce, rank ``late`` stalling before every tenth
    call; rank 0 writes every rank's figures."""
    out = Path(folder)
    dist.init_process_group(
        "gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=120)
    )
    beat = Heartbeat(out / f"beat{rank}", {"rank": rank, "node_rank": 0, "local_rank": rank, "host": "here"})
    try:
        every = 10 if rank == late else 0
        ctx = _Stalling(rank, 2, rank, 2, 0, "here", torch.device("cpu"), "gloo", {}, out, beat, every=every)
        cfg: Any = {"dtype": "float32", "timing": "eager", "warmup_iters": 2, "spread_iters": CALLS}
        found = collectives.spread_case(ctx, "all_reduce", "64K", cfg, None)
        if rank == 0:
            (out / "result.json").write_text(json.dumps({"spread": [found]}))
    finally:
        beat.state["status"] = "done"
        dist.destroy_process_group()


def _pass(tmp_path: Path, late: int | None) -> Spread:
    for rank in (0, 1):
        (tmp_path / f"beat{rank}").mkdir()
    spawn(_member, args=(str(tmp_path), late), nprocs=2, join=True)
    found = json.loads((tmp_path / "result.json").read_text())
    assert len(found["spread"]) == 1
    spread: Spread = found["spread"][0]
    assert spread["calls"] == CALLS and len(spread["ranks"]) == 2
    return spread


@pytest.mark.e2e  # starts two processes
def test_a_rank_that_issues_late_is_named_and_its_waiting_peer_is_not(tmp_path: Path) -> None:
    spread = _pass(tmp_path, late=1)
    found = lateness.stands_out(spread, RATIO, FLOOR_US)
    assert [x.rank for x in found] == [1], spread
    assert spread["ranks"][1]["lateness_p99_us"] >= LATE_S * 1e6 / 2  # its peer waited in the call while it stalled
    assert lateness.worst(spread) == 1


@pytest.mark.e2e  # starts two processes
def test_with_no_rank_late_nobody_is_named(tmp_path: Path) -> None:
    spread = _pass(tmp_path, late=None)
    assert lateness.stands_out(spread, RATIO, FLOOR_US) == [], spread
