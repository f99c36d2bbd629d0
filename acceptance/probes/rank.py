"""The contract between the ranks of a probe and the plugin that launched them.

Every probe is ``python -m acceptance.probes.NAME --spec SPEC.json --out DIR`` under torchrun. ``main``
initialises the process group, runs the probe's function on every rank, broadcasts rank 0's result so
that every node's pytest sees the same figures, and writes:

* ``DIR/rank-<r>.json`` on every rank, its heartbeat: pid, host, GPU, the phase it is in, how far it got
  (``progress``, counted by ``Ctx.progress`` in the probes' loops, and ``progress_at``), the time of the
  last beat (``beat_at``, rewritten every BEAT_S by a thread), and ``"status": "done"`` at the end. A rank
  whose progress stopped while its beat goes on is stuck; one whose beat stopped too is stopped or dead;
  the launcher names the one that stopped first;
* ``DIR/result.json`` on local rank 0 of every node: the probe's result for the whole cluster.

``acceptance.probes.worker`` runs probe after probe in one process group through the same steps
(``identity``, ``connect``, ``serve``), each with its own Heartbeat and Ctx on the probe's folder. A staged
job's ranks (a ``gate`` in the spec) wait at the gate for their words (``wait_at_gate``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from typing_extensions import TypedDict

from acceptance.atomic_file import write_atomic
from acceptance.families import staging
from acceptance.families.heartbeat import RankIdentity, RankState
from acceptance.json_types import JSONObject
from acceptance.probes.nccl_log import enable as enable_nccl_log
from acceptance.schema.dtypes import DTYPE_NAMES

# the profile's type names as torch types, for every probe (the names are torch's attribute names)
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
# test-only knob: "crash@RANK", "ecc@RANK" (a device fault's error), "hang@RANK[:PHASE]" (sleeps),
# "stop@RANK[:PHASE]" (SIGSTOPs itself)
FAULT_ENV = "ACCEPTANCE_TEST_FAULT"
MAX_PHASES = 500  # a probe names a few dozen (a sweep: one per operation and size); a bound all the same
BEAT_S = 1.0  # heartbeat period: a stopped rank's beat is at most this old when it stopped


class ProbeSpec(TypedDict, total=False):
    """A probe's ``--spec``: the process group's settings, the world it expects, and what a probe of its own
    asks for; each probe reads the keys it needs. Besides these keys the spec carries JSON objects that a
    probe reads with ``section``: the profile's section for the probe, under its family's name
    (``ClusterRun.spec``: ``"collectives": {...}``), and a probe's own part (``isolation``, a training job's
    ``baseline``)."""

    backend: str
    device: str
    pg_timeout_s: float
    gate: str  # a staged job's gate file
    let_import: str  # the gate of a job staged beside this probe, told IMPORT by it (``let_staged_import``)
    preload: list[str]  # a probe worker's: the probes whose modules it imports before its first request
    expected_world_size: int
    ranks_per_node: int
    nodes: int
    scopes: list[str]  # the internode probe's
    strategies: list[str]  # the training job's parts
    deepspeed_user: dict[str, JSONObject | None]  # per strategy, the user's DeepSpeed JSON


C = TypeVar("C", bound=Mapping[str, object])


def section(spec: ProbeSpec, name: str, shape: type[C]) -> C:
    """The JSON object under ``name`` in the spec (a family's section, ``collectives``; a probe's own part,
    ``isolation``) as ``shape``, the probe's own config type: a TypedDict beside the family's section model,
    which ``tests/test_registry.py`` holds to the model's fields. The plugin wrote it from the validated
    profile, so ``shape`` types it for the type checker and checks nothing here; a missing one is a KeyError,
    as ``spec[name]`` was."""
    return cast(C, cast(Mapping[str, object], spec)[name])


# a probe's result: its own TypedDict, written as JSON
ProbeResult = Mapping[str, object]


def write_json(path: Path, data: Any, durable: bool = True) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True, default=str), durable)


class Heartbeat:
    """This rank's ``rank-<r>.json``. ``phase`` writes at once; ``tick`` only counts, so it is cheap enough
    for a timed loop, and a thread writes the count with the beat every BEAT_S."""

    def __init__(self, out: Path, ident: RankIdentity, phase: str = "init process group") -> None:
        now = time.time()
        self.path = out / f"rank-{ident['rank']}.json"
        self.started = now
        # the identity's keys as they come, then the beat's own (mypy cannot follow NotRequired keys through **)
        self.state = cast(
            RankState,
            {
                **ident,
                "pid": os.getpid(),
                "phase": phase,
                "status": "running",
                "progress": 0,
                "progress_at": now,
                # each phase and the second it began, from this heartbeat's start: where a probe's time went
                "phases": [[phase, 0.0]],
            },
        )
        self.lock = threading.Lock()
        self.write()
        threading.Thread(target=self._beat, name="heartbeat", daemon=True).start()

    def tick(self) -> None:
        self.state["progress"] += 1
        self.state["progress_at"] = time.time()

    def update(self, **changes: object) -> None:
        """Set keys of the state (RankState's: ``phase``, ``status``, ``gpu_uuid`` ...) and write it."""
        with self.lock:  # the beat thread copies the state under it
            if "phase" in changes and len(self.state["phases"]) < MAX_PHASES:
                self.state["phases"].append([cast(str, changes["phase"]), round(time.time() - self.started, 3)])
            self.state.update(cast(RankState, changes))
        self.tick()
        self.write()

    def write(self) -> None:
        with self.lock:  # the beat thread writes too, through the same temporary file
            now = time.time()
            self.state["beat_at"], self.state["elapsed_s"] = now, round(now - self.started, 3)
            write_json(self.path, dict(self.state), durable=False)

    def _beat(self) -> None:
        while True:
            time.sleep(BEAT_S)
            if self.state["status"] != "running":  # the last write was the rank's own, at its end
                return
            self.write()


@dataclass
class Ctx:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    host: str
    device: torch.device
    backend: str
    spec: ProbeSpec
    out: Path
    beat: Heartbeat
    init_s: float = 0.0
    # the process groups this probe created: released at its end, so the next probe of a worker starts
    # from the world group alone (an NCCL communicator holds GPU memory until it is destroyed)
    groups: list[Any] = field(default_factory=list)
    # the process group a part of the probe runs on where it is smaller than the world (a training job's
    # scaling baseline); ``rank`` and ``world_size`` are then this rank's place in it. None: the world.
    within: Any = None
    # this rank's NCCL debug report, where the transports it chose are read (``probes.nccl_log``); None: not
    # NCCL, or the user's own NCCL_DEBUG_FILE
    nccl_log: Path | None = None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.within)
        return out

    def phase(self, name: str) -> None:
        """Record what this rank is doing, so a hang can be located while it lasts and afterwards."""
        self.beat.update(phase=name)
        _maybe_fault(self.rank, name)

    def progress(self) -> None:
        """Count one step of the current phase (a block of collective calls, a training step, a
        measurement). Call it before work that needs the other ranks: a rank that stops short of a
        collective then shows less progress than the peers that wait in it."""
        self.beat.tick()

    def group(self, ranks: list[int]) -> Any:
        """``dist.new_group(ranks)``, released when the probe ends (every rank must call it)."""
        made = dist.new_group(ranks)
        self.groups.append(made)
        return made

    def subgroups(self, ranks: list[list[int]]) -> Any:
        """This rank's group of ``dist.new_subgroups_by_enumeration(ranks)`` (None where it is in none);
        every group is released when the probe ends."""
        mine, every = dist.new_subgroups_by_enumeration(ranks)
        self.groups += every
        return mine

    def release(self) -> None:
        """Free what the probe held: its process groups, its tensors, the CUDA cache, so that the next probe
        in the same process measures as a fresh process would."""
        for made in reversed(self.groups):
            dist.destroy_process_group(made)
        self.groups.clear()
        gc.collect()
        if self.is_cuda:
            torch.cuda.empty_cache()


def _maybe_fault(rank: int, phase: str) -> None:
    knob = os.environ.get(FAULT_ENV, "")
    if not knob:
        return
    mode, _, where = knob.partition("@")
    target, _, at_phase = where.partition(":")
    if str(rank) != target or (at_phase and at_phase != phase) or (not at_phase and phase != "start"):
        return
    if mode == "crash":
        raise RuntimeError(f"injected crash on rank {rank} ({FAULT_ENV}={knob})")
    if mode == "ecc":  # the words torch raises for a GPU's uncorrectable memory error (cudaErrorECCUncorrectable)
        raise RuntimeError(f"CUDA error: uncorrectable ECC error encountered (injected on rank {rank}, {FAULT_ENV})")
    if mode == "hang":
        while True:
            time.sleep(3600)
    if mode == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)


def identity() -> RankIdentity:
    """This rank's place, from torchrun's variables: written before the process group exists, so that a
    rank that hangs in its rendezvous is still found and killed by pid."""
    env = os.environ
    return {
        "rank": int(env["RANK"]),
        "node_rank": int(env["GROUP_RANK"]),
        "local_rank": int(env["LOCAL_RANK"]),
        "host": socket.gethostname(),
    }


def connect(spec: ProbeSpec, out: Path, beat: Heartbeat) -> Ctx:
    """Join the process group (``spec``: backend, device, pg_timeout_s) and return the probe's context."""
    rank, local_rank = beat.state["rank"], beat.state["local_rank"]
    backend = spec["backend"]
    device = torch.device("cuda", local_rank) if spec["device"] == "cuda" else torch.device("cpu")
    timeout = datetime.timedelta(seconds=float(spec.get("pg_timeout_s", 600)))
    # NCCL reads its debug settings at its first message: before the process group, or never
    nccl_log = enable_nccl_log(out.parent / "nccl") if backend == "nccl" else None
    t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        beat.update(gpu_uuid=f"GPU-{torch.cuda.get_device_properties(device).uuid}")
        dist.init_process_group(backend, timeout=timeout, device_id=device)
    else:
        dist.init_process_group(backend, timeout=timeout)
    init_s = time.perf_counter() - t0
    return Ctx(
        init_s=init_s,
        rank=rank,
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        local_world_size=int(os.environ["LOCAL_WORLD_SIZE"]),
        node_rank=beat.state["node_rank"],
        host=beat.state["host"],
        device=device,
        backend=backend,
        spec=spec,
        out=out,
        beat=beat,
        nccl_log=nccl_log,
    )


def parse_args(argv: list[str] | None = None) -> tuple[ProbeSpec, Path]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return json.loads(args.spec.read_text()), args.out


def main(
    run: Callable[[Ctx], ProbeResult],
    argv: list[str] | None = None,
    preload: Callable[[ProbeSpec], None] | None = None,
) -> None:
    """``preload``: what a staged job (a spec with a ``gate``) imports before it waits (see ``wait_at_gate``)."""
    record(_main)(run, argv, preload)


def _main(
    run: Callable[[Ctx], ProbeResult], argv: list[str] | None, preload: Callable[[ProbeSpec], None] | None
) -> None:
    spec, out = parse_args(argv)
    gate = spec.get("gate")
    beat = Heartbeat(out, identity(), phase=staging.WAIT_TO_IMPORT if gate else "init process group")
    if gate and not wait_at_gate(Path(gate), beat, lambda: preload(spec) if preload else None):
        return
    t0 = time.perf_counter()
    serve(run, connect(spec, out, beat), t0)
    dist.destroy_process_group()


def wait_at_gate(gate: Path, beat: Heartbeat, preload: Callable[[], None]) -> bool:
    """A staged job (``acceptance.run.launcher.stage``), started while other probes still have the node: wait
    for the plugin's word in ``gate`` (``acceptance.families.staging``), touching no GPU and no process group:
    ``IMPORT`` (import what the probe needs, then wait again) or ``GO`` (the node is free: import if not yet,
    and go on); ``CANCEL``: the run ended without this job (False)."""
    if _word(gate, (staging.IMPORT, staging.GO)) == staging.CANCEL:
        beat.update(phase="end", status="cancelled")
        return False
    beat.update(phase=staging.IMPORTING)
    preload()
    # whether an import initialised CUDA in this process (the evidence that waiting touched no GPU)
    beat.update(phase=staging.WAIT_FOR_NODE, cuda_at_gate=torch.cuda.is_initialized())
    if _word(gate, (staging.GO,)) == staging.CANCEL:
        beat.update(phase="end", status="cancelled")
        return False
    beat.update(phase="init process group")
    return True


def let_staged_import(ctx: Ctx) -> None:
    """Once every rank has measured what host activity moves: the word IMPORT to the job staged beside this
    probe (``let_import`` in its spec: the job's gate, ``acceptance.families.staging``), whose ranks then
    import while this probe measures on the GPU's clock. Nothing where the spec names no gate."""
    gate = ctx.spec.get("let_import")
    if not isinstance(gate, str):
        return
    dist.barrier()
    if ctx.rank != 0:
        return
    word = Path(gate).with_name(f".{staging.GATE}.{os.getpid()}")
    try:
        word.write_text(staging.IMPORT)
        os.link(word, gate)  # the first word only: never over a GO or CANCEL the plugin wrote
    except FileExistsError:
        pass
    except OSError as exc:  # the job imports at GO instead; this probe's figures stand
        print(f"could not tell the staged job to import ({gate}): {exc}", file=sys.stderr)
    finally:
        word.unlink(missing_ok=True)


def _word(gate: Path, wanted: tuple[str, ...]) -> str:
    """The first of ``wanted`` (or CANCEL) that ``gate`` holds, once it holds one."""
    while True:
        word = gate.read_text().strip() if gate.is_file() else ""  # written atomically: whole, or not there
        if word in wanted or word == staging.CANCEL:
            return word
        time.sleep(staging.POLL_S)


def serve(run: Callable[[Ctx], ProbeResult], ctx: Ctx, t0: float) -> None:
    """Run one probe on this rank: rank 0's result to every rank, ``result.json`` on each node's local
    rank 0, what the probe held released, then ``"status": "done"`` in the heartbeat."""
    ctx.phase("start")
    result = run(ctx)
    ctx.phase("broadcast result")
    box = [result if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, device=ctx.device if ctx.is_cuda else None)
    if ctx.local_rank == 0:
        payload = dict(box[0] or {})
        payload.setdefault("wall_s", round(time.perf_counter() - t0, 3))
        write_json(ctx.out / "result.json", payload)
    del result, box
    ctx.release()
    sys.stdout.flush()
    ctx.beat.update(phase="end", status="done")
