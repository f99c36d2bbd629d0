"""NCCL called directly (``probes.nccl_calls``), against a recording stand-in for libnccl: each op issues
nccl-tests' calls with the counts, buffers and peers of its sizing; the loop's host time is the figure."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist

from acceptance.families.collectives import figures
from acceptance.families.collectives.timing import TimingAsked
from acceptance.probes import collectives, nccl_calls, nccl_loop, ops, windows
from acceptance.schema.collectives import OPS


class FakeNccl:
    """libnccl's entry points as attributes that record their calls (ctypes values as Python numbers)."""

    def __init__(self, all_to_all: bool = True, fail: str = "") -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail = fail
        self.ncclGetErrorString = SimpleNamespace()
        for name in ("ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce",
                     "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd", "ncclCommDestroy"):  # fmt: skip
            setattr(self, name, self._entry(name))
        if all_to_all:
            self.ncclAlltoAll = self._entry("ncclAlltoAll")

    def _entry(self, name: str) -> Any:
        def call(*args: Any) -> int:
            self.calls.append((name, tuple(getattr(a, "value", a) for a in args)))
            return 3 if name == self.fail else 0

        return call


def _library(fake: FakeNccl) -> nccl_calls.Library:
    lib = nccl_calls.Library.__new__(nccl_calls.Library)
    lib.lib = fake
    lib.looper = "no C compiler ('cc' not on PATH)"  # the Python loop: the C loop's own tests, test_nccl_loop
    return lib


def _buffers(op: str, nbytes: int, rank: int, ranks: int) -> nccl_calls.Buffers:
    s = OPS[op].sizing(nbytes, ranks, 2)
    return nccl_calls.Buffers(1000, 9000, s.send, s.part, s.elem, rank, ranks)


@pytest.mark.parametrize(
    ("op", "name", "args"),
    [
        ("all_reduce", "ncclAllReduce", (1000, 1000, 512, 9, 0, 7, 8)),  # in place, every element, sum
        ("all_gather", "ncclAllGather", (1000, 9000, 128, 9, 7, 8)),  # one rank's part
        ("reduce_scatter", "ncclReduceScatter", (1000, 9000, 128, 9, 0, 7, 8)),  # the part each rank receives
        ("all_to_all", "ncclAlltoAll", (1000, 9000, 128, 9, 7, 8)),  # per peer
        ("broadcast", "ncclBroadcast", (1000, 1000, 512, 9, 0, 7, 8)),  # from rank 0, in place
        ("reduce", "ncclReduce", (1000, 1000, 512, 9, 0, 0, 7, 8)),
    ],
)
def test_each_op_is_nccl_tests_call_with_its_sizing(op: str, name: str, args: tuple[int, ...]) -> None:
    fake = FakeNccl()
    call = nccl_calls.bind(_library(fake), op, _buffers(op, 1024, 1, 4), "bfloat16", comm=7, stream=8)
    assert fake.calls == []  # built once, issued on each call
    call()
    call()
    assert fake.calls == [(name, args)] * 2


def test_sendrecv_sends_to_the_next_rank_and_receives_from_the_previous_in_one_group() -> None:
    fake = FakeNccl()
    nccl_calls.bind(_library(fake), "sendrecv", _buffers("sendrecv", 64, 0, 4), "float32", 7, 8)()
    assert fake.calls == [
        ("ncclGroupStart", ()),
        ("ncclSend", (1000, 32, 7, 1, 7, 8)),
        ("ncclRecv", (9000, 32, 7, 3, 7, 8)),
        ("ncclGroupEnd", ()),
    ]


def test_all_to_all_before_nccl_2_28_is_a_send_and_a_receive_per_peer() -> None:
    fake = FakeNccl(all_to_all=False)
    b = _buffers("all_to_all", 96, 2, 3)  # 16 elements a part: 32 bytes between two peers' parts
    nccl_calls.bind(_library(fake), "all_to_all", b, "float16", 7, 8)()
    sends = [args for name, args in fake.calls if name == "ncclSend"]
    recvs = [args for name, args in fake.calls if name == "ncclRecv"]
    assert [s[0] for s in sends] == [1000, 1032, 1064] and [r[0] for r in recvs] == [9000, 9032, 9064]
    assert [s[3] for s in sends] == [0, 1, 2] and {s[1] for s in sends} == {16}
    assert fake.calls[0][0] == "ncclGroupStart" and fake.calls[-1][0] == "ncclGroupEnd"


def test_an_error_from_nccl_is_raised_with_nccl_s_words() -> None:
    fake = FakeNccl(fail="ncclAllReduce")
    lib = _library(fake)
    lib.lib.ncclGetErrorString = lambda result: b"unhandled system error"
    with pytest.raises(nccl_calls.NcclCallError, match="ncclAllReduce returned 3: unhandled system error"):
        nccl_calls.bind(lib, "all_reduce", _buffers("all_reduce", 64, 0, 2), "bfloat16", 7, 8)()


def test_the_library_is_the_one_this_process_mapped() -> None:
    maps = [
        "7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libc.so.6",
        "7f20-7f30 r-xp 00000000 08:01 2 /venv/nvidia/nccl/lib/libnccl.so.2",
        "7f40-7f50 rw-p 00000000 00:00 0",
    ]
    assert nccl_calls.loaded_library(maps) == "/venv/nvidia/nccl/lib/libnccl.so.2"
    assert nccl_calls.loaded_library(maps[:1]) == nccl_calls.SONAME  # linked in statically: the loader's


def test_one_communicator_per_group_from_the_first_rank_s_id_and_each_destroyed() -> None:
    fake, shared = FakeNccl(), list[tuple[bytes | None, Any]]()
    lib = _library(fake)
    made = iter([11, 12])
    lib.unique_id = lambda: b"u" * 128  # type: ignore[method-assign]
    lib.init_rank = lambda ranks, uid, rank: next(made)  # type: ignore[method-assign]

    def share(uid: bytes | None, group: Any) -> bytes:
        shared.append((uid, group))
        return b"u" * 128

    comms = nccl_calls.Communicators(lib, share)
    world, pair = object(), object()
    assert comms.of(world, 0, 4) == 11 and comms.of(world, 0, 4) == 11  # made once
    assert comms.of(pair, 1, 2) == 12
    assert shared == [(b"u" * 128, world), (None, pair)]  # only a group's first rank draws the id
    comms.close()
    assert [args for name, args in fake.calls if name == "ncclCommDestroy"] == [(11,), (12,)]


def _ctx(device: str) -> Any:
    return SimpleNamespace(is_cuda=device == "cuda", device=torch.device(device), backend="nccl")


def _timing(device: str, asked: TimingAsked, group: Any, nccl: Any) -> tuple[str, str | None, str]:
    """The mode, the reason's kind and the label ``timing_of`` gives."""
    t = collectives.timing_of(_ctx(device), asked, group, nccl)
    return t.mode, t.reason.kind if t.reason else None, t.label


def test_auto_is_direct_nccl_for_the_world_on_gpus_a_graph_in_subgroups_and_the_host_on_the_cpu() -> None:
    lib = _library(FakeNccl())
    comms = nccl_calls.Communicators(lib, lambda uid, group: b"")
    # issued from Python where the C loop could not be built: NCCL still called directly, and the label says why
    assert _timing("cuda", "auto", None, comms) == (
        "nccl",
        "from_python",
        "nccl (issued from Python: no C compiler ('cc' not on PATH))",
    )
    lib.looper = nccl_loop.Looper.__new__(nccl_loop.Looper)
    assert _timing("cuda", "auto", None, comms) == ("nccl", None, "nccl")
    assert _timing("cuda", "auto", object(), comms) == ("cuda_graph", None, "cuda_graph")
    assert _timing("cpu", "auto", None, "no NCCL on cpu") == ("eager", None, "eager")
    # asked for and not to be had: the mode it is timed in instead, and why
    assert _timing("cuda", "nccl", None, "libnccl not callable: x") == (
        "cuda_graph",
        "no_nccl",
        "cuda_graph (libnccl not callable: x)",
    )
    assert _timing("cpu", "nccl", None, "no NCCL on cpu") == ("eager", "no_nccl", "eager (no NCCL on cpu)")
    assert _timing("cuda", "eager", None, comms) == ("eager", None, "eager")
    assert collectives.direct_nccl(_ctx("cpu")) == "no NCCL on cpu"


def test_a_host_timed_rank_s_time_is_its_whole_loop_s_per_call() -> None:
    # one window disturbed: the loop's mean carries it, as nccl-tests' does; a graph's rank keeps its median
    windows = [[1e-3, 9e-3, 1e-3, 1e-3, 1e-3], [1e-3] * 5]
    assert figures("all_reduce", 4_000_000, windows, 2, [2.6e-3, 1e-3])["time_us"] == pytest.approx(1800)
    assert figures("all_reduce", 4_000_000, windows, 2)["time_us"] == pytest.approx(1000)
    assert figures("all_reduce", 4_000_000, windows, 2, [2.6e-3, None])["time_us"] == pytest.approx(1000)


def test_nccl_types_are_nccl_h_s() -> None:
    assert nccl_calls.NCCL_TYPES == {"float16": 6, "float32": 7, "bfloat16": 9}
    assert ctypes.sizeof(nccl_calls.UniqueId) == 128


def test_auto_without_communicators_asked_is_a_graph_and_says_nothing_more() -> None:
    assert _timing("cuda", "auto", None, None) == ("cuda_graph", None, "cuda_graph")  # the internode probe's world
    assert _timing("cuda", "auto", None, "libnccl not callable: x") == (
        "cuda_graph",
        "no_nccl",
        "cuda_graph (libnccl not callable: x)",
    )


def test_the_timed_loop_fails_on_a_result_code_and_takes_any_other_return() -> None:
    cpu = _ctx("cpu")
    codes = iter([0, 0, 5, 0])
    with pytest.raises(RuntimeError, match="a timed call returned 5"):
        windows.timed_loop(cpu, windows.repeat(lambda: next(codes)), [2, 2])
    # a tensor is no result code
    per_window, whole = windows.timed_loop(cpu, windows.repeat(lambda: torch.ones(3)), [2, 1])
    assert len(per_window) == 2 and whole > 0


def test_an_error_in_a_group_is_its_first_code() -> None:
    fake = FakeNccl(fail="ncclRecv")
    bound = nccl_calls.bind(_library(fake), "sendrecv", _buffers("sendrecv", 64, 0, 2), "float32", 7, 8)
    assert bound.issue() == 3
    assert [name for name, _ in fake.calls] == ["ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd"]


def test_a_host_timed_loop_fills_its_least_time_with_more_calls_than_iters() -> None:
    """Calls of a few microseconds: the loop runs as many more as fill ``min_timed_s``, so its marks and its
    start are a small part of the time per call; without the setting (an isolation round's) ``iters``."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        issued: list[int] = []
        timed = collectives.HostTimed(lambda: None, windows.repeat(lambda: issued.append(1)), lambda: None)
        ctx = SimpleNamespace(is_cuda=False, device=torch.device("cpu"), sync=lambda: None, progress=lambda: None)
        cfg: Any = {"dtype": "float32", "timing": "eager", "warmup_iters": 3, "iters": 5, "min_timed_s": 0.05}
        collectives.time_eager(timed, ctx, None, cfg)  # type: ignore[arg-type]
        assert len(issued) > 5 * 100  # a Python no-op takes well under 0.1 us: 0.05 s is far more than 5 calls
        issued.clear()
        cfg["min_timed_s"] = 0
        collectives.time_eager(timed, ctx, None, cfg)  # type: ignore[arg-type]
        assert len(issued) == 5
        del cfg["min_timed_s"]
        issued.clear()
        collectives.time_eager(timed, ctx, None, cfg)  # type: ignore[arg-type]
        assert len(issued) == 5
    finally:
        dist.destroy_process_group()


def test_an_op_in_an_arena_holds_its_buffers_at_the_start_and_counts_the_calls_that_fit_after() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        cpu = torch.device("cpu")
        # each buffer at its own largest size: at 4 ranks all_gather's input is a quarter of its output
        wide = ops.Arena.for_sweep("all_gather", [64, 1024], "bfloat16", cpu, ranks=4)
        assert wide.send.numel() == 256 and wide.recv is not None and wide.recv.numel() == 1024
        assert wide.slots(16, 64) == 16 and wide.slots(256, 1024) == 1 and wide.slots(512, 2048) == 0
        arena = ops.Arena.for_sweep("all_gather", [64, 1024], "bfloat16", cpu)
        small = ops.Op("all_gather", 64, "bfloat16", cpu, arena=arena)
        assert arena.recv is not None
        assert small.inp.data_ptr() == arena.send.data_ptr() and small.out.data_ptr() == arena.recv.data_ptr()
        assert small.send_bytes == small.recv_bytes == 64 and small.slots == 16
        small.fill()
        small()
        assert small.wrong() == 0
        assert ops.Op("all_gather", 1024, "bfloat16", cpu, arena=arena).slots == 1
        bigger = ops.Op("all_gather", 4096, "bfloat16", cpu, arena=arena)  # does not fit: buffers of its own
        assert bigger.slots == 1 and bigger.inp.data_ptr() != arena.send.data_ptr()
        in_place = ops.Arena.for_sweep("all_reduce", [256], "float32", cpu)
        assert in_place.recv is None
        reduced = ops.Op("all_reduce", 128, "float32", cpu, arena=in_place)
        assert reduced.out.data_ptr() == reduced.inp.data_ptr() == in_place.send.data_ptr() and reduced.slots == 2
        assert ops.Op("all_gather", 64, "bfloat16", cpu).slots == 1  # no arena: every call on its own buffers
    finally:
        dist.destroy_process_group()
