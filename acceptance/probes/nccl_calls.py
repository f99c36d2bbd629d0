"""NCCL called the way nccl-tests calls it: one C call per collective, on a communicator of the probe's own.

A collective through ``torch.distributed`` costs tens of microseconds of host work per call (the work object,
its events, the Python layers), which is the whole time of a small message: timed that way a sweep measures
PyTorch, and timed as a CUDA graph it measures less than any real job pays. nccl-tests (src/common.cu,
``BenchTime``) enqueues ``ncclAllReduce`` & co. back to back from C. So does this module, through ``ctypes``
and the very ``libnccl`` that torch loaded (the one its jobs use), with the arguments of every call built
once: the figure is NCCL's time as nccl-tests prints it, at every size. vLLM's ``PyNcclCommunicator`` calls
NCCL the same way.

Each op's entry point and arguments are its definition's (``schema.collectives.NcclCall``); the enums are
nccl.h's (NCCL 2.19+ for bfloat16 ``ncclBfloat16 = 9``).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptance.probes import nccl_loop, windows
from acceptance.schema.collectives import OPS, ROOT

SONAME = "libnccl.so.2"
# ncclDataType_t (nccl.h): the profile's type names
NCCL_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9}
NCCL_SUM = 0  # ncclRedOp_t ncclSum
UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


class NcclCallError(RuntimeError):
    """A call into libnccl that returned an error, with NCCL's own words for it."""


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


def loaded_library(maps: Iterable[str] | None = None) -> str:
    """The libnccl this process already mapped (torch's, from ``/proc/self/maps``), else the soname for the
    loader to find: a second copy of NCCL beside torch's would be another library's figures."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text().splitlines()
        except OSError:
            maps = []
    for line in maps:
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith("libnccl.so"):
            return path
    return SONAME


class Library:
    """libnccl's entry points, each result checked; ``looper``: the timed loop in C (``nccl_loop``), or why
    the calls are issued from Python."""

    def __init__(self, lib: Any, looper: nccl_loop.Looper | str) -> None:
        self.lib = lib
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        self.looper = looper

    @classmethod
    def load(cls) -> Library:
        return cls(ctypes.CDLL(loaded_library()), nccl_loop.build())

    def address(self, name: str) -> int:
        """An entry point's address, for the C loop."""
        return int(ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value or 0)

    def check(self, name: str, result: int) -> None:
        if result != 0:
            text = self.lib.ncclGetErrorString(result)
            words = text.decode(errors="replace") if isinstance(text, bytes) else str(result)
            raise NcclCallError(f"{name} returned {result}: {words}")

    def unique_id(self) -> bytes:
        made = UniqueId()
        self.check("ncclGetUniqueId", self.lib.ncclGetUniqueId(ctypes.byref(made)))
        return bytes(made)

    def init_rank(self, ranks: int, uid: bytes, rank: int) -> int:
        comm = ctypes.c_void_p()
        given = UniqueId.from_buffer_copy(uid)
        self.check("ncclCommInitRank", self.lib.ncclCommInitRank(ctypes.byref(comm), ranks, given, rank))
        return int(comm.value or 0)

    def destroy(self, comm: int) -> None:
        self.check("ncclCommDestroy", self.lib.ncclCommDestroy(ctypes.c_void_p(comm)))


@dataclass(frozen=True)
class Buffers:
    """One rank's side of one call: its buffers' device addresses, element counts and its place."""

    inp: int
    out: int
    send: int  # elements of the input
    part: int  # elements of one rank's part
    elem: int  # bytes per element
    rank: int
    ranks: int
    # the timed loop's call i on buffers moved on by each buffer's slot x (i % slots) bytes (nccl-tests' shift:
    # each call on memory the previous ones did not leave in the GPU's cache); 1 slot: every call on the same
    send_slot: int = 0
    recv_slot: int = 0
    slots: int = 1


_Args = tuple[Any, ...]


@dataclass(frozen=True)
class Bound:
    """One call of an op, its arguments converted once: ``issue`` is the bare C call (or the group of them)
    returning NCCL's result code; ``burst(n)`` issues it ``n`` times back to back from the C loop
    (``nccl_loop``), or from Python where there is none, and returns a code other than 0 if any call failed
    (every call issued all the same: peers must not wait for calls never made), for a timed
    loop that checks the codes itself (``windows.timed_loop``), as lean as nccl-tests' loop; calling the
    object issues it once and raises on an error (warm-up, data check)."""

    lib: Library
    name: str
    issue: Callable[[], int]
    burst: Callable[[int], int | None]

    def __call__(self) -> None:
        self.lib.check(self.name, self.issue())


def _made(lib: Library, name: str, b: Buffers, calls: list[tuple[str, _Args]], issue: Callable[[], int]) -> Bound:
    """The call's ``Bound``: its burst from the C loop where there is one (each call on its slot of the
    buffers); from Python, every call on the first slot."""
    if isinstance(lib.looper, nccl_loop.Looper):
        slots = nccl_loop.Slots(b.send_slot, b.recv_slot, b.slots)
        steps = [nccl_loop.step(entry, lib.address(entry), args, slots) for entry, args in calls]
        return Bound(lib, name, issue, lib.looper.burst(steps))
    return Bound(lib, name, issue, windows.repeat(issue))


def _grouped(lib: Library, calls: list[tuple[str, _Args]]) -> Callable[[], int]:
    """Sends and receives in one NCCL group, as nccl-tests' sendrecv and pre-2.28 alltoall issue them; the
    first result code that is not 0."""
    entries = [functools.partial(getattr(lib.lib, name), *args) for name, args in calls]
    start, end = lib.lib.ncclGroupStart, lib.lib.ncclGroupEnd

    def issue() -> int:
        failed = start()
        for entry in entries:
            code = entry()
            failed = failed or code
        ended = end()  # a group once started is always ended, whatever its calls returned
        return int(failed or ended)

    return issue


def bind(lib: Library, op: str, b: Buffers, dtype: str, comm: int, stream: int) -> Bound:
    """One call of ``op`` over ``b`` as its definition's ``NcclCall`` says (nccl-tests' ``<op>RunColl``), ready to
    be issued back to back. In place where the op's result lands in its input (all_reduce, broadcast, reduce)."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}")
    c = OPS[op]
    how = c.nccl
    t, com, s = ctypes.c_int(NCCL_TYPES[dtype]), ctypes.c_void_p(comm), ctypes.c_void_p(stream)
    inp, size = ctypes.c_void_p(b.inp), ctypes.c_size_t
    out = inp if c.in_place else ctypes.c_void_p(b.out)
    total, part, root, red = size(b.send), size(b.part), ctypes.c_int(ROOT), ctypes.c_int(NCCL_SUM)
    count = total if how.count == "total" else part
    if how.entry is not None and (how.grouped is None or hasattr(lib.lib, how.entry)):
        extra: dict[str, _Args] = {"sum": (red,), "root": (root,), "sum_root": (red, root), "none": ()}
        call = (how.entry, (inp, out, count, t, *extra[how.arg], com, s))
        return _made(lib, how.entry, b, [call], functools.partial(getattr(lib.lib, how.entry), *call[1]))
    calls: list[tuple[str, _Args]] = []
    if how.grouped == "ring":
        nxt, prev = ctypes.c_int((b.rank + 1) % b.ranks), ctypes.c_int((b.rank - 1) % b.ranks)
        calls = [("ncclSend", (inp, total, t, nxt, com, s)), ("ncclRecv", (out, total, t, prev, com, s))]
    else:
        step = b.part * b.elem  # a send and a receive per peer, in one group
        for peer in range(b.ranks):
            calls.append(("ncclSend", (ctypes.c_void_p(b.inp + peer * step), part, t, ctypes.c_int(peer), com, s)))
            calls.append(("ncclRecv", (ctypes.c_void_p(b.out + peer * step), part, t, ctypes.c_int(peer), com, s)))
    group: list[tuple[str, _Args]] = [("ncclGroupStart", ()), *calls, ("ncclGroupEnd", ())]
    return _made(lib, "ncclSend/ncclRecv", b, group, _grouped(lib, calls))


class Communicators:
    """The probe's own NCCL communicators, one per process group asked for, made the way torch makes its
    own (``ncclGetUniqueId`` on the group's first rank, ``ncclCommInitRank`` on every rank) and destroyed at
    ``close``. Every rank of a group must ask for its communicator at the same point, as for any collective."""

    def __init__(self, lib: Library, share: Callable[[bytes | None, Any], bytes]) -> None:
        self.lib = lib
        self.share = share  # rank 0's unique id to every rank of the group (``None`` on the others)
        self.made: dict[int, int] = {}

    def of(self, group: Any, rank: int, ranks: int) -> int:
        key = id(group)
        if key not in self.made:
            uid = self.share(self.lib.unique_id() if rank == 0 else None, group)
            self.made[key] = self.lib.init_rank(ranks, uid, rank)
        return self.made[key]

    def close(self) -> None:
        for comm in self.made.values():
            self.lib.destroy(comm)
        self.made.clear()
