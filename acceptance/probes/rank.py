"""The contract between the ranks of a probe and the plugin that launched them.

Every probe is ``python -m acceptance.probes.NAME --spec SPEC.json --out DIR`` under torchrun. ``main``
initialises the process group, runs the probe's function on every rank, broadcasts rank 0's result so
that every node's pytest sees the same figures, and writes:

* ``DIR/rank-<r>.json`` on every rank: pid, host, the phase it is in, and ``"status": "done"`` at the end
  (a rank whose file never says done is the one that hung or died);
* ``DIR/result.json`` on local rank 0 of every node: the probe's result for the whole cluster.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from acceptance.profile.dtypes import DTYPE_NAMES

# the profile's type names as torch types, for every probe (the names are torch's attribute names)
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
FAULT_ENV = "ACCEPTANCE_TEST_FAULT"  # test-only knob: "crash@RANK" or "hang@RANK[:PHASE]"


def write_json(path: Path, data: Any) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


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
    spec: dict[str, Any]
    out: Path
    init_s: float = 0.0
    started: float = field(default_factory=time.time)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def phase(self, name: str) -> None:
        """Record what this rank is doing, so a hang can be located afterwards."""
        write_json(self.out / f"rank-{self.rank}.json", self._status(name, "running"))
        _maybe_fault(self.rank, name)

    def _status(self, phase: str, status: str) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node_rank": self.node_rank,
            "local_rank": self.local_rank,
            "host": self.host,
            "pid": os.getpid(),
            "phase": phase,
            "status": status,
            "elapsed_s": round(time.time() - self.started, 3),
        }


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
    if mode == "hang":
        while True:
            time.sleep(3600)


def _init(spec: dict[str, Any], out: Path) -> Ctx:
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    backend = spec["backend"]
    device = torch.device("cuda", local_rank) if spec["device"] == "cuda" else torch.device("cpu")
    timeout = datetime.timedelta(seconds=float(spec.get("pg_timeout_s", 600)))
    t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.set_device(device)
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
        node_rank=int(os.environ["GROUP_RANK"]),
        host=socket.gethostname(),
        device=device,
        backend=backend,
        spec=spec,
        out=out,
    )


def parse_args(argv: list[str] | None = None) -> tuple[dict[str, Any], Path]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return json.loads(args.spec.read_text()), args.out


def main(run: Callable[[Ctx], dict[str, Any]], argv: list[str] | None = None) -> None:
    record(_main)(run, argv)


def _main(run: Callable[[Ctx], dict[str, Any]], argv: list[str] | None) -> None:
    spec, out = parse_args(argv)
    t0 = time.perf_counter()
    # before the process group exists: a rank that hangs in its rendezvous is still found and killed by pid
    env = os.environ
    write_json(
        out / f"rank-{env['RANK']}.json",
        {
            "rank": int(env["RANK"]),
            "node_rank": int(env["GROUP_RANK"]),
            "local_rank": int(env["LOCAL_RANK"]),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "phase": "init process group",
            "status": "running",
            "elapsed_s": 0.0,
        },
    )
    ctx = _init(spec, out)
    ctx.phase("start")
    result = run(ctx)
    ctx.phase("broadcast result")
    box = [result if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, device=ctx.device if ctx.is_cuda else None)
    if ctx.local_rank == 0:
        payload = dict(box[0] or {})
        payload.setdefault("wall_s", round(time.perf_counter() - t0, 3))
        write_json(out / "result.json", payload)
    write_json(out / f"rank-{ctx.rank}.json", ctx._status("end", "done"))
    dist.destroy_process_group()
    sys.stdout.flush()
