"""The direct NCCL calls' timed loop in C (``nccl_loop.c``), built when the probe starts with the host's C
compiler (``$CC``, else ``cc``: torch.compile's Triton and DeepSpeed's CPU ops need one too).

nccl-tests issues its calls from a C loop; the same calls issued one by one from Python cost 2-3 us more
each on an H200 host (docs/measurements.md): the whole time of a small message. The library is built into a
folder that is removed at once (the loaded library stays mapped), so nothing is left behind by a probe that
is killed. Where no compiler can build it, the calls are issued from Python and the figure's label says why
(``probes.collectives``).
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from acceptance.schema.collectives import OPS, Prototype

SOURCE = "nccl_loop.c"
BUILD_TIMEOUT_S = 120  # a cold compiler on a busy node; a build takes well under a second
# nccl.h's prototypes, by the shape nccl_loop.c calls them through (its ``enum shape``): each collective's entry
# point as its definition names it, and the group and point-to-point calls its grouped form issues
SHAPES: dict[str, Prototype] = {
    "ncclGroupStart": Prototype.GROUP,
    "ncclGroupEnd": Prototype.GROUP,
    "ncclSend": Prototype.P2P,
    "ncclRecv": Prototype.P2P,
    **{c.nccl.entry: c.nccl.prototype for c in OPS.values() if c.nccl.entry is not None},
}


class Step(ctypes.Structure):
    """nccl_loop.c's ``struct step``: one entry point and its arguments."""

    _fields_ = [
        ("shape", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("arg", ctypes.c_int32),
        ("root", ctypes.c_int32),
        ("fn", ctypes.c_void_p),
        ("send", ctypes.c_void_p),
        ("recv", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("comm", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("send_slot", ctypes.c_size_t),
        ("recv_slot", ctypes.c_size_t),
        ("slots", ctypes.c_int64),
    ]


def _value(arg: object) -> int:
    """A ctypes argument's number (a null pointer's ``value`` is None)."""
    found = getattr(arg, "value", arg)
    return int(found) if isinstance(found, int) else 0


@dataclass(frozen=True)
class Slots:
    """Call ``i`` of a loop on its send and receive buffers moved on by ``send`` and ``recv`` bytes times
    ``i % count`` (nccl-tests' shift); a count of 1: every call on the same buffers."""

    send: int = 0
    recv: int = 0
    count: int = 1


def step(name: str, fn: int, args: Sequence[object], slots: Slots | None = None) -> Step:
    """The step that calls ``name`` (at address ``fn``) with ``args`` in nccl.h's order, moved on by ``slots``."""
    shape, moved = SHAPES[name], slots or Slots()
    v = [_value(a) for a in args]
    if shape is Prototype.GROUP:
        return Step(shape=shape, fn=fn)
    both = (moved.send, moved.recv, moved.count)
    if shape is Prototype.COLL7:  # send, recv, count, type, op or root, comm, stream
        return Step(shape, v[3], v[4], 0, fn, v[0], v[1], v[2], v[5], v[6], *both)
    if shape is Prototype.COLL6:  # send, recv, count, type, comm, stream
        return Step(shape, v[3], 0, 0, fn, v[0], v[1], v[2], v[4], v[5], *both)
    if shape is Prototype.REDUCE:  # send, recv, count, type, op, root, comm, stream
        return Step(shape, v[3], v[4], v[5], fn, v[0], v[1], v[2], v[6], v[7], *both)
    # buffer, count, type, peer, comm, stream: the buffer in ``send``, moved on as the buffer it is
    own = moved.recv if name == "ncclRecv" else moved.send
    return Step(shape, v[2], v[3], 0, fn, v[0], None, v[1], v[4], v[5], own, 0, moved.count)


class Looper:
    """The built loop: ``burst(steps)`` is a function that issues the steps back to back ``n`` times and returns
    the first result code other than 0 (or 0); its calls are numbered on from one burst to the next (the
    windows of one timed loop), as nccl-tests numbers a loop's iterations."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.fn = lib.nccl_loop
        self.fn.argtypes = [ctypes.POINTER(Step), ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        self.fn.restype = ctypes.c_int

    def burst(self, steps: Sequence[Step]) -> Callable[[int], int]:
        array = (Step * len(steps))(*steps)
        count, fn = len(steps), self.fn
        done = 0

        def issue(times: int) -> int:
            nonlocal done
            code = int(fn(array, count, done, times))
            done += times
            return code

        return issue


def compiler(environ: dict[str, str] | None = None) -> list[str] | str:
    """The C compiler's command (``$CC`` split as a shell would, else ``cc``), or why there is none."""
    env = os.environ if environ is None else environ
    words = shlex.split(env.get("CC", "")) or ["cc"]
    found = shutil.which(words[0])
    return [found, *words[1:]] if found else f"no C compiler ({words[0]!r} not on PATH)"


def build(environ: dict[str, str] | None = None) -> Looper | str:
    """The loop built and loaded, or why it could not be (the compiler's last line)."""
    cc = compiler(environ)
    if isinstance(cc, str):
        return cc
    with (
        tempfile.TemporaryDirectory(prefix="nccl-loop-") as folder,
        resources.as_file(resources.files("acceptance.probes") / SOURCE) as source,
    ):
        built = Path(folder) / "nccl_loop.so"
        try:
            done = subprocess.run(
                [*cc, "-O2", "-shared", "-fPIC", "-o", str(built), str(source)],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{Path(cc[0]).name} could not build {SOURCE}: {exc}"
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
            return f"{Path(cc[0]).name} could not build {SOURCE} (exit {done.returncode}): {last}"
        try:
            return Looper(ctypes.CDLL(str(built)))
        except OSError as exc:  # a temporary folder mounted noexec: TMPDIR names another
            return f"{SOURCE} built but not loadable from {folder} (TMPDIR): {str(exc)[:200]}"
