"""The standalone collective sweep for operators: the collectives probe without pytest and without MPI,
printed the way nccl-tests' ``all_reduce_perf -b 1M -e 4G -f 2`` prints it.

It runs through the same launcher and session as the suite, so its figures are the suite's figures and
its folder holds the same evidence (``evidence.json``, ``probes/NN-collectives/``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, cast, get_args

from acceptance.evidence.folder import default_folder
from acceptance.evidence.verdict import facts_of
from acceptance.families.collectives import COLLECTIVES, CollectiveRow, SweepResult
from acceptance.families.collectives.timing import TimingAsked
from acceptance.json_types import JSONObject, JSONValue
from acceptance.profile import loader as profiles
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError
from acceptance.run.placement import resolve
from acceptance.schema.collectives import PART_ALIGN_BYTES
from acceptance.schema.dtypes import DTYPES
from acceptance.schema.figure import Figure
from acceptance.schema.sizes import format_size, parse_size
from acceptance.verdicts import decide, figure_failed

TIMINGS: tuple[str, ...] = get_args(TimingAsked)  # what --timing may ask for: the profile's choices

# the largest size of a sweep without -e: nccl-tests' 1G on a GPU; on the CPU, gloo takes seconds a call
# from 64M up, and a sweep to 1G ran out of its time at 512M as if it hung
GPU_MAX_BYTES, CPU_MAX_BYTES = "1G", "16M"


@dataclass(frozen=True)
class SweepArgs:
    begin: str
    end: str | None  # None: GPU_MAX_BYTES, or CPU_MAX_BYTES on the CPU
    factor: int
    ops: list[str]
    dtype: str | None
    warmup: int | None
    iters: int | None
    nproc_per_node: int | None
    profile: str | None
    out: Path | None
    timeout: float | None
    timing: str | None = None  # None: the profile's


def series(begin: str, end: str, factor: int) -> list[str]:
    """``-b 1M -e 4G -f 2`` -> 1M, 2M, ..., 4G (binary sizes, as nccl-tests steps them)."""
    lo, hi = parse_size(begin), parse_size(end)
    if lo > hi:
        raise ValueError(f"-b {begin} is larger than -e {end}")
    if factor < 2:
        raise ValueError(f"-f {factor}: the step factor must be at least 2")
    sizes, size = [], lo
    while size <= hi:
        sizes.append(format_size(size))
        size *= factor
    return sizes


def overrides(args: SweepArgs, default_dtype: str, device: str) -> list[str]:
    """The sweep's options as ``--cluster-set`` overrides, so they are validated like a profile file.
    The profile's thresholds are dropped: they name the profile's sizes, and a sweep only measures."""
    end = args.end or (CPU_MAX_BYTES if device == "cpu" else GPU_MAX_BYTES)
    sets = {
        "thresholds": None,
        "collectives.ops": args.ops,
        "collectives.sizes": series(args.begin, end, args.factor),
        "collectives.dtype": args.dtype or default_dtype,
        "collectives.warmup_iters": args.warmup,
        "collectives.iters": args.iters,
        "collectives.timing": args.timing,
        # busbw per size, as nccl-tests prints it: no spread pass (the suite's late_ranks judges it), whose
        # blocking calls would add seconds at every size up to its bound on the CPU
        "collectives.spread_iters": 0,
        "topology.ranks_per_node": args.nproc_per_node,
    }
    return [f"{key}={json.dumps(value)}" for key, value in sets.items() if value is not None or key == "thresholds"]


def load_profile(args: SweepArgs) -> profiles.Profile:
    """The named profile (topology, env, timeouts), else this machine: every GPU through NCCL, or 2 CPU ranks."""
    if args.profile:
        base = profiles.load(args.profile)
        model = base.model
        return profiles.load(args.profile, overrides(args, COLLECTIVES.section_of(model).dtype, model.topology.device))
    import torch  # only here: the other commands should not pay for importing torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    topology: JSONObject = (
        {"device": "cuda", "backend": "nccl", "gpus_per_node": gpus}
        if gpus
        else {"device": "cpu", "backend": "gloo", "ranks_per_node": 2}
    )
    # one thread per CPU rank: two ranks each using every core would measure contention, not the collective
    env: JSONObject = {} if gpus else {"OMP_NUM_THREADS": "1"}
    raw: JSONObject = {"name": "sweep", "description": "this machine, as found", "topology": topology, "env": env}
    # nccl-tests' default type is float (-d float)
    return profiles.from_mapping(raw, Path("<sweep>"), overrides(args, "float32", "cuda" if gpus else "cpu"))


def run(args: SweepArgs, out: TextIO) -> int:
    """Run the sweep, print the table; 0 when every element arrived intact, 1 when some did not; a probe that
    failed is recorded and raised (the command exits 1)."""
    profile = load_profile(args)
    placement = resolve(os.environ, profile.model.topology.nodes, default_port=profile.model.topology.rdzv_port)
    folder = args.out or default_folder("sweep")
    dtype, printed = COLLECTIVES.section_of(profile.model).dtype, list[JSONObject]()
    asked, timings = COLLECTIVES.section_of(profile.model).timing, list[str]()
    moved: set[tuple[str, int]] = set()

    def show(row: CollectiveRow) -> None:
        said = timing_line(row, asked, timings)
        print(row_text(row, dtype, moved) if said is None else f"{said}\n{row_text(row, dtype, moved)}", file=out)

    def live(row: JSONObject) -> None:  # each row as the probe measures it, as nccl-tests prints
        printed.append(row)
        show(cast(CollectiveRow, row))
        out.flush()

    run_tag = os.environ.get("CLUSTER_RUN_ID", "")
    # one probe: a worker would only add its exit to the probe's own job
    cluster = ClusterRun(profile, placement, folder, args.timeout, run_tag=run_tag, on_row=live, worker=False)
    print(header(cluster), file=out)
    print(head(), file=out, flush=True)
    try:
        result = cast(SweepResult, cluster.probe("collectives"))
    except ProbeError as exc:
        cluster.evidence.error(str(exc))
        cluster.evidence.finish(decide(facts_of(cluster.evidence.doc)), complete=True)
        cluster.evidence.write()
        cluster.close()
        raise
    for row in result["rows"][len(printed) :]:  # none, unless the watcher missed the last ones
        show(row)
    print(footer(result), file=out)
    failed = _record(cluster, result)
    print(f"# evidence: {cluster.evidence.path}", file=out)
    return 1 if failed else 0


def _record(cluster: ClusterRun, result: SweepResult) -> bool:
    nodeid = "cluster-acceptance sweep"
    case = cluster.evidence.test(nodeid)
    case.measurements["sweep"] = cast(JSONValue, result)  # a SweepResult is JSON
    for row in result["rows"]:
        op, size = row["op"], row["size"]
        cluster.check(nodeid, Figure(f"collectives.{op}.busbw_gbps@{size}", "GB/s", row["busbw_gbps"]))
        cluster.check(nodeid, Figure(f"collectives.{op}.wrong@{size}", "elements", row["wrong"]))
    judged = [c.verdict for c in cluster.evidence.checks()]
    case.outcome = "failed" if any(figure_failed(v) for v in judged) else "passed"
    verdict = decide(facts_of(cluster.evidence.doc))
    cluster.evidence.finish(verdict, complete=True)
    cluster.evidence.write()
    cluster.close()
    return verdict != "PASS"


def header(cluster: ClusterRun) -> str:
    cfg, topo = COLLECTIVES.section_of(cluster.profile.model), cluster.topology
    return (
        f"# cluster-acceptance sweep: profile {cluster.profile.name}, {cluster.placement.nodes} node(s) x "
        f"{topo.nproc_per_node} rank(s), {topo.device}/{topo.backend}\n"
        f"# dtype {cfg.dtype}, warmup {cfg.warmup_iters}, iters {cfg.iters}; evidence in {cluster.evidence_dir}"
    )


def timing_line(row: CollectiveRow, asked: str, shown: list[str]) -> str | None:
    """How the rows below were timed, as the probe timed them (not as asked: ``auto`` picks one, and a timing
    that cannot be had falls back, its label saying why): a comment before the first row and wherever it
    changes; None where the row is timed as the one above. ``shown``: the timings said so far."""
    used = row.get("timing")
    if not used or (shown and shown[-1] == used):
        return None
    shown.append(used)
    return f"# timing: {used}" + ("" if used == asked else f" (asked: {asked})")


# nccl-tests' columns, then how far the timed windows' busbw spread: (max - min) / median
COLUMNS = ("size", "count", "type", "op", "time", "algbw", "busbw", "#wrong", "spread")
UNITS = ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(%)")
# fixed widths, as nccl-tests prints them, so that a row can be printed the moment it is measured
WIDTHS = (12, 12, 8, 16, 10, 8, 8, 7, 7)


def _line(cells: tuple[str, ...], lead: str = " ") -> str:
    return (lead + " ".join(cell.rjust(width) for cell, width in zip(cells, WIDTHS, strict=True))).rstrip()


def head() -> str:
    """nccl-tests' two commented header lines."""
    return "\n".join(_line(cells, "#") for cells in (COLUMNS, UNITS))


def row_line(row: CollectiveRow, dtype: str) -> str:
    """One op at one size: the bytes the call moved (like nccl-tests' ``size`` column), time and bandwidths."""
    spread = row.get("window_spread")  # none in evidence from before the windows
    return _line(
        (str(row["bytes"]), str(row["count"]), DTYPES[dtype].nccl_tests, row["op"], f"{row['time_us']:.2f}",
         f"{row['algbw_gbps']:.2f}", f"{row['busbw_gbps']:.2f}", str(row["wrong"]),
         "-" if spread is None else f"{100 * spread:.1f}")
    )  # fmt: skip


def row_text(row: CollectiveRow, dtype: str, moved: set[tuple[str, int]]) -> str:
    """The row, or where the op already moved these bytes at a smaller size asked (its parts rounded up to
    PART_ALIGN_BYTES per rank, as ``-b 8`` does for all_gather), a comment saying so: each call printed once."""
    key = (row["op"], row["bytes"])
    if key in moved:
        return (
            f"# {row['op']} at {row['size_bytes']} B asked: the same {row['bytes']} B call as above "
            f"(parts of at least {PART_ALIGN_BYTES} B per rank)"
        )
    moved.add(key)
    return row_line(row, dtype)


def footer(result: SweepResult) -> str:
    """The elements that arrived wrong, the average bus bandwidth and NCCL's version, as nccl-tests ends."""
    out, rows = [], result["rows"]
    if rows:
        average = sum(r["busbw_gbps"] for r in rows) / len(rows)
        wrong = sum(1 for r in rows if r["wrong"])
        out.append(f"# Out of bounds values : {wrong} {'FAILED' if wrong else 'OK'}")
        out.append(f"# Avg bus bandwidth    : {average:.4g}")
    if result.get("nccl_version"):
        out.append(f"# NCCL {result['nccl_version']}, algorithm: {result.get('nccl_algo')}")
    return "\n".join(out)
