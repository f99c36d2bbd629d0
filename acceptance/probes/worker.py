"""A node's persistent probe worker: ranks that keep their process group and run probe after probe.

``python -m acceptance.probes.worker --spec DIR/spec.json --requests DIR/requests/{number}.json`` under
torchrun, started by ``acceptance.run.worker_pool`` exactly as a probe's job is (watchdog, reaper). ``--spec``
holds what the process group needs (backend, device, and ``pg_timeout_s``: the longest probe the worker
may run). The plugin writes requests 1, 2, 3, ... atomically into the ``--requests`` pattern; every rank
of the node reads each one in turn:

* ``{"probe": NAME, "spec": PATH, "out": DIR}``: run ``acceptance.probes.NAME``'s ``run`` through the same
  steps as a job of its own (``acceptance.probes.rank.serve``), with a fresh Heartbeat and Ctx on ``DIR``:
  ``DIR/rank-<r>.json``, ``DIR/result.json``, ``"status": "done"`` once the rank has released what the
  probe held;
* ``{"exit": true}``: leave the process group and exit.

A rank that raises ends the worker: its error is recorded as in a job of its own (``@record``, torchrun's
error file), torchrun ends the other ranks, and the plugin fails that probe and starts a fresh worker for
the next one. The first request's heartbeat is written before the process group exists, as in a job of
its own, so a rank that hangs in the rendezvous is named and killed by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import itertools
import json
import time
from pathlib import Path

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from typing_extensions import NotRequired, TypedDict

from acceptance.probes.rank import Ctx, Heartbeat, ProbeSpec, connect, identity, serve


class Request(TypedDict):
    """One request file: a probe to run, or ``exit``."""

    probe: NotRequired[str]
    spec: NotRequired[str]  # the probe's spec file
    out: NotRequired[str]  # its folder
    exit: NotRequired[bool]


POLL_S = 0.02  # how often an idle rank looks for the next request: one stat, against a probe's seconds


def main(argv: list[str] | None = None) -> None:
    record(_work)(argv)


def _work(argv: list[str] | None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acceptance.probes.worker")
    parser.add_argument("--spec", type=Path, required=True, help="the process group's backend, device, timeout")
    parser.add_argument("--requests", required=True, help="the requests' path, with {number} for 1, 2, 3, ...")
    args = parser.parse_args(argv)
    group_spec: ProbeSpec = json.loads(args.spec.read_text())
    for probe in group_spec.get("preload", []):
        # before any probe measures: a module that fails to import fails its own probe, with its error
        with contextlib.suppress(Exception):
            importlib.import_module(f"acceptance.probes.{probe}")
    ctx: Ctx | None = None
    for number in itertools.count(1):
        request = _take(Path(args.requests.format(number=number)))
        if request.get("exit"):
            break
        ctx = _probe(request, group_spec, ctx)
    if ctx is not None:
        dist.destroy_process_group()


def _take(path: Path) -> Request:
    """The request at ``path``, once the plugin has written it (atomically: whole, or not there)."""
    while not path.exists():
        time.sleep(POLL_S)
    found: Request = json.loads(path.read_text())
    return found


def _probe(request: Request, group_spec: ProbeSpec, ctx: Ctx | None) -> Ctx:
    """Run the requested probe on this rank; the first one joins the process group that later ones reuse."""
    t0 = time.perf_counter()
    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    if ctx is None:
        beat = Heartbeat(out, identity())
        ctx = connect(group_spec, out, beat)
    else:
        # the GPU this rank drives, which names it in a failure's message, carries over to every probe
        ident = identity()
        if "gpu_uuid" in ctx.beat.state:
            ident["gpu_uuid"] = ctx.beat.state["gpu_uuid"]
        beat = Heartbeat(out, ident, phase="import probe")
    ctx = dataclasses.replace(ctx, spec=json.loads(Path(request["spec"]).read_text()), out=out, beat=beat, groups=[])
    module = importlib.import_module(f"acceptance.probes.{request['probe']}")
    serve(module.run, ctx, t0)
    return ctx


if __name__ == "__main__":
    main()
