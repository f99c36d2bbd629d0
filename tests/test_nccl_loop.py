"""The timed loop in C (``probes.nccl_loop``), against a stand-in libnccl built from ``data/fake_nccl.c`` that
logs every call: the C loop issues, for every op, exactly the calls the Python path issues, as many times as
asked, and stops on the first error once its group is ended; a compiler that is missing or fails is said."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from acceptance.probes import nccl_calls, nccl_loop
from acceptance.probes.ops import Arena
from acceptance.schema.collectives import OPS

FAKE = Path(__file__).parent / "data" / "fake_nccl.c"
pytestmark = pytest.mark.e2e  # the compiler runs


def _stand_in(folder: Path, *flags: str) -> ctypes.CDLL:
    cc = nccl_loop.compiler()
    if isinstance(cc, str):
        pytest.skip(cc)
    built = folder / f"libfake{''.join(flags)}.so"
    subprocess.run([*cc, "-O1", "-shared", "-fPIC", *flags, "-o", str(built), str(FAKE)], check=True)
    lib = ctypes.CDLL(str(built))
    lib.fake_log.restype = ctypes.c_char_p
    lib.fake_reset.argtypes = [ctypes.c_long, ctypes.c_int]
    return lib


@pytest.fixture(scope="module")
def looper() -> nccl_loop.Looper:
    built = nccl_loop.build()
    if isinstance(built, str):
        pytest.skip(built)
    return built


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, ctypes.CDLL]]:
    folder = tmp_path_factory.mktemp("fake-nccl")
    yield {True: _stand_in(folder), False: _stand_in(folder, "-DNO_ALLTOALL")}


def _log(fake: ctypes.CDLL) -> list[str]:
    text = fake.fake_log()
    assert isinstance(text, bytes)
    return text.decode().splitlines()


def _bound(fake: ctypes.CDLL, looper: nccl_loop.Looper | str, op: str, rank: int = 1) -> nccl_calls.Bound:
    s = OPS[op].sizing(4096, 4, 2)
    b = nccl_calls.Buffers(0x10000, 0x90000, s.send, s.part, s.elem, rank, 4)
    return nccl_calls.bind(nccl_calls.Library(fake, looper), op, b, "bfloat16", comm=0x77, stream=0x88)


@pytest.mark.parametrize("all_to_all", [True, False], ids=["nccl-2.28", "before-2.28"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_the_c_loop_issues_the_python_path_s_calls_as_many_times_as_asked(
    fakes: dict[bool, ctypes.CDLL], looper: nccl_loop.Looper, op: str, all_to_all: bool
) -> None:
    fake = fakes[all_to_all]
    fake.fake_reset(-1, 0)
    python = _bound(fake, "a test of the Python path", op)
    assert python.burst(3) is None
    issued = _log(fake)
    assert issued and len(issued) % 3 == 0
    fake.fake_reset(-1, 0)
    assert _bound(fake, looper, op).burst(3) == 0
    assert _log(fake) == issued
    calls = [line for line in issued if not line.startswith("ncclGroup")]
    assert calls and all(line.endswith(" 119 136") for line in calls)  # every call's communicator and stream


def test_the_c_loop_issues_every_call_after_one_failed_and_returns_the_first_code(
    fakes: dict[bool, ctypes.CDLL], looper: nccl_loop.Looper
) -> None:
    """A rank that stopped short would leave its peers waiting in collectives it never joins."""
    fake = fakes[True]
    fake.fake_reset(5, 7)  # the 6th entry point called: the second call's ncclRecv (start, send, recv, end)
    assert _bound(fake, looper, "sendrecv").burst(4) == 7
    names = [line.split()[0] for line in _log(fake)]
    assert names == ["ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd"] * 4
    fake.fake_reset(0, 2)
    assert _bound(fake, looper, "all_reduce").burst(100) == 2 and len(_log(fake)) == 100


def test_a_missing_or_failing_compiler_is_said() -> None:
    assert nccl_loop.build({"CC": "no-such-cc-here"}) == "no C compiler ('no-such-cc-here' not on PATH)"
    failing = nccl_loop.build({"CC": "false"})
    assert isinstance(failing, str) and failing.startswith("false could not build nccl_loop.c (exit 1)")
    assert nccl_loop.compiler({"CC": "sh -x 'a b'"}) == [shutil.which("sh"), "-x", "a b"]  # split as a shell would


def test_each_call_of_a_loop_moves_on_one_slot_across_bursts_as_nccl_tests_shifts_its_buffers(
    fakes: dict[bool, ctypes.CDLL], looper: nccl_loop.Looper
) -> None:
    fake = fakes[True]
    fake.fake_reset(-1, 0)
    b = nccl_calls.Buffers(0x10000, 0x90000, 8, 8, 2, 0, 2, send_slot=0x100, recv_slot=0x100, slots=3)
    burst = nccl_calls.bind(nccl_calls.Library(fake, looper), "sendrecv", b, "bfloat16", comm=1, stream=2).burst
    assert burst(2) == 0 and burst(3) == 0  # one loop's windows: its calls 0, 1 then 2, 3, 4
    sends = [int(line.split()[1]) for line in _log(fake) if line.startswith("ncclSend")]
    recvs = [int(line.split()[1]) for line in _log(fake) if line.startswith("ncclRecv")]
    assert sends == [0x10000 + 0x100 * (i % 3) for i in range(5)]
    assert recvs == [0x90000 + 0x100 * (i % 3) for i in range(5)]
    fake.fake_reset(-1, 0)
    python = nccl_calls.bind(nccl_calls.Library(fake, "from Python"), "sendrecv", b, "bfloat16", 1, 2)
    python.burst(2)  # issued from Python: every call on the first slot (said in the figure's label)
    assert {line.split()[1] for line in _log(fake) if line.startswith("ncclSend")} == {str(0x10000)}


def _bytes(name: str, which: str, count: int, ranks: int) -> int:
    """The bytes a logged call reaches from one of its pointers: counts are elements, of one rank's part for
    all_gather's input, reduce_scatter's output and all_to_all (per peer)."""
    whole = {"ncclAllGather": "recv", "ncclReduceScatter": "send", "ncclAlltoAll": "send recv"}
    return count * ELEM * (ranks if which in whole.get(name, "") else 1)


# each entry point's logged buffers: (the field of the line, the buffer it is: send or recv)
COLLECTIVES = ("ncclAllReduce", "ncclReduceScatter", "ncclBroadcast", "ncclAllGather", "ncclAlltoAll", "ncclReduce")
BUFFERS = {
    **{name: ((1, "send"), (2, "recv")) for name in COLLECTIVES},
    "ncclSend": ((1, "send"),),
    "ncclRecv": ((1, "recv"),),
}
ELEM = 2  # bfloat16


@pytest.mark.parametrize("all_to_all", [True, False], ids=["nccl-2.28", "before-2.28"])
@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("op", sorted(OPS))
def test_no_call_of_a_shifted_loop_reaches_past_its_arena(
    fakes: dict[bool, ctypes.CDLL], looper: nccl_loop.Looper, op: str, ranks: int, all_to_all: bool
) -> None:
    """Every op at sizes from one part to the largest, at 2, 3 and 8 ranks: each call's buffers, each moved
    on by its own slot, lie inside the arena ``Arena.for_sweep`` makes for the sweep, and every one moves."""
    fake = fakes[all_to_all]
    sizes = [16, 1000, 4096, 96 * 1024, 1 << 20]
    arena = Arena.for_sweep(op, sizes, "bfloat16", torch.device("cpu"), ranks)
    recv = arena.send if arena.recv is None else arena.recv
    spans = {"send": (arena.send.data_ptr(), arena.send.numel()), "recv": (recv.data_ptr(), recv.numel())}
    for nbytes in sizes:
        s = OPS[op].sizing(nbytes, ranks, ELEM)
        slots = arena.slots(s.send * ELEM, s.recv * ELEM)
        assert slots >= 1
        b = nccl_calls.Buffers(
            spans["send"][0], spans["recv"][0], s.send, s.part, s.elem, ranks - 1, ranks, s.send * ELEM,
            s.recv * ELEM, slots,
        )  # fmt: skip
        fake.fake_reset(-1, 0)
        bound = nccl_calls.bind(nccl_calls.Library(fake, looper), op, b, "bfloat16", comm=1, stream=2)
        calls = min(2 * slots + 3, 40)  # round the slots twice where there are few (the log holds 64 KiB)
        assert bound.burst(calls) == 0
        starts: dict[tuple[str, str], set[int]] = {}
        for text in _log(fake):
            line = text.split()
            for field, which in BUFFERS.get(line[0], ()):
                base, size = spans[which]
                start = int(line[field]) - base
                count = int(line[2] if line[0] in ("ncclSend", "ncclRecv") else line[3])
                assert start >= 0 and start + _bytes(line[0], which, count, ranks) <= size, (op, nbytes, text)
                starts.setdefault((line[0], which), set()).add(start)
        # the calls did move on, each of their buffers
        assert slots == 1 or all(len(found) >= min(slots, calls) for found in starts.values())
