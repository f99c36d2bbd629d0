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

from acceptance.probes import nccl_calls, nccl_loop
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
    b = nccl_calls.Buffers(0x10000, 0x90000, 8, 8, 2, 0, 2, slot=0x100, slots=3)
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


# each entry point's logged buffers: (the field of the line, the buffer it is: send or recv)
BUFFERS = {
    "ncclAllReduce": [(1, "send"), (2, "recv")],
    "ncclReduceScatter": [(1, "send"), (2, "recv")],
    "ncclBroadcast": [(1, "send"), (2, "recv")],
    "ncclAllGather": [(1, "send"), (2, "recv")],
    "ncclAlltoAll": [(1, "send"), (2, "recv")],
    "ncclReduce": [(1, "send"), (2, "recv")],
    "ncclSend": [(1, "send")],
    "ncclRecv": [(1, "recv")],
}
ELEM = 2  # bfloat16
SEND, RECV = 1 << 40, 2 << 40  # the arenas' addresses, far apart


def _bytes(name: str, line: list[str], ranks: int) -> int:
    """The bytes a logged call reads or writes from its pointer: counts are elements (of one rank's part for
    all_gather's input, reduce_scatter's output and all_to_all's per peer)."""
    count = int(line[3] if name not in ("ncclSend", "ncclRecv") else line[2])
    per_rank = name in ("ncclAllGather", "ncclReduceScatter", "ncclAlltoAll")
    return count * ELEM * (ranks if per_rank else 1)


@pytest.mark.parametrize("all_to_all", [True, False], ids=["nccl-2.28", "before-2.28"])
@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("op", sorted(OPS))
def test_no_call_of_a_shifted_loop_reaches_past_its_arena(
    fakes: dict[bool, ctypes.CDLL], looper: nccl_loop.Looper, op: str, ranks: int, all_to_all: bool
) -> None:
    """Every op at sizes from one part to the largest, at 2, 3 and 8 ranks: each call's buffers, moved on by
    their slot, lie inside the arena sized for the sweep (as ``Arena.for_sweep`` sizes it)."""
    fake = fakes[all_to_all]
    sizes = [16, 1000, 4096, 96 * 1024, 1 << 20]
    size = max(OPS[op].sizing(n, ranks, ELEM).count * ELEM for n in sizes)
    for nbytes in sizes:
        s = OPS[op].sizing(nbytes, ranks, ELEM)
        footprint = s.count * ELEM
        out = SEND if op in ("all_reduce", "broadcast", "reduce") else RECV
        b = nccl_calls.Buffers(SEND, out, s.send, s.part, s.elem, ranks - 1, ranks, footprint, size // footprint)
        fake.fake_reset(-1, 0)
        bound = nccl_calls.bind(nccl_calls.Library(fake, looper), op, b, "bfloat16", comm=1, stream=2)
        calls = min(2 * b.slots + 3, 40)  # round the slots twice where there are few (the log holds 64 KiB)
        assert bound.burst(calls) == 0
        starts: dict[tuple[str, str], set[int]] = {}
        for text in _log(fake):
            line = text.split()
            for field, which in BUFFERS.get(line[0], []):
                start = int(line[field]) - (SEND if which == "send" or out == SEND else RECV)
                end = start + _bytes(line[0], line, ranks)  # the larger buffer's bytes for both: on the safe side
                assert start >= 0 and end <= size, (op, nbytes, text)
                starts.setdefault((line[0], which), set()).add(start)
        # the calls did move on, each of their buffers
        assert b.slots == 1 or all(len(found) >= min(b.slots, calls) for found in starts.values())
