"""Storage: every path of ``storage.paths`` on every node, and a checkpoint written to it and read back.

Per path, inside a run folder ``PATH/.cluster-acceptance/run-<deadline>-<token>/``:

1. every node (its local rank 0) looks at the path: there, a folder, its mount (``/proc/self/mountinfo``),
   free space against what the checkpoint needs, and writes a small file of its own;
2. a shared path: node 0 writes a file of random bytes, every node reads it back (size, sha256);
3. every rank writes its shard of a checkpoint at once (torch.distributed.checkpoint, each file fsync'd),
   each node drops the files from its page cache, and every rank reads a shard back (on a shared path the
   one written by the same local rank of the next node) and compares it exactly with what was written.

The run folder is removed at the end, also when the probe fails or is stopped (SIGTERM from torchrun
when the launcher's timeout ends it, Ctrl-C). After SIGKILL no code runs: the folder stays until a later
run on the path removes it, which it does once the deadline in its name has passed.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import save
from typing_extensions import TypedDict

from acceptance.families import storage as rules
from acceptance.families.storage import (
    Checkpoint,
    Marker,
    NodeView,
    PathResult,
    ShardRead,
    ShardRow,
    ShardWrite,
    StorageConfig,
    StoragePathConfig,
    StorageResult,
)
from acceptance.probes import storage_files as files
from acceptance.probes.rank import Ctx, main, section
from acceptance.schema.sizes import parse_size

CHUNK_BYTES = 64 * 2**20  # one tensor per 64 MiB of a shard, like the layers of a model's state dict
# the launcher stops a probe at its timeout and torchrun gives its ranks 30 s more (run/launcher.py)
DEADLINE_MARGIN_S = 120
SEED = 1234


class TimedWriter(FileSystemWriter):
    """The writer a training job uses (``sync_files=True``: every file fsync'd), timing this rank's writes."""

    seconds = 0.0
    files: tuple[str, ...] = ()  # the files this rank wrote, relative to the checkpoint's folder

    def write_data(self, plan: Any, planner: Any) -> Any:
        t0 = time.perf_counter()
        done = super().write_data(plan, planner)
        done.wait()
        self.seconds = time.perf_counter() - t0
        self.files = tuple(sorted({r.storage_data.relative_path for r in done.value()}))
        return done


class TimedReader(FileSystemReader):
    seconds = 0.0

    def read_data(self, plan: Any, planner: Any) -> Any:
        t0 = time.perf_counter()
        done = super().read_data(plan, planner)
        done.wait()
        self.seconds = time.perf_counter() - t0
        return done


T = TypeVar("T")


def nodes_only(ctx: Ctx, fn: Callable[[], T]) -> list[T]:
    """``fn`` on local rank 0 of every node, gathered on every rank in node order."""
    return [v for v in ctx.gather(fn() if ctx.local_rank == 0 else None) if v is not None]


def make_state(ctx: Ctx, nbytes: int, rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s shard: random bytes (zeros would flatter a compressing filesystem), from a seed, so
    any rank can rebuild any shard to compare it with what it reads."""
    gen = torch.Generator(device=ctx.device)
    gen.manual_seed(SEED + rank)
    sizes = [min(CHUNK_BYTES, nbytes - start) for start in range(0, nbytes, CHUNK_BYTES)]
    return {
        f"rank{rank}.chunk{i}": torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen, device=ctx.device)
        for i, n in enumerate(sizes)
    }


def timed(ctx: Ctx, fn: Callable[[], object], group: Any) -> tuple[float, str | None]:
    """Seconds from a common start until ``fn`` ended on this rank, and this rank's error if it failed.

    torch.distributed.checkpoint raises on every rank of ``group`` when any one fails, naming each
    failure: the ranks stay in step and every rank knows what went wrong where."""
    dist.barrier()
    t0 = time.perf_counter()
    try:
        fn()
    except CheckpointException as exc:
        mine = exc.failures.get(dist.get_rank(group))
        text = f"{type(mine[0]).__name__}: {mine[0]}" if mine else "failed on another rank"
        return time.perf_counter() - t0, text
    ctx.sync()
    return time.perf_counter() - t0, None


def checkpoint(ctx: Ctx, name: str, folder: Path, nbytes: int, read_from: int, group: Any) -> ShardRow:
    """Write this rank's shard, then read back rank ``read_from``'s; this rank's row of figures."""
    ctx.phase(f"storage {name}: checkpoint write")
    wrote = write_shard(ctx, folder, nbytes, group)
    row: ShardRow = {
        "rank": ctx.rank,
        "node_rank": ctx.node_rank,
        "host": ctx.host,
        "bytes": nbytes,
        "tensors": wrote["tensors"],
        "save_s": wrote["save_s"],
        "write_s": wrote["write_s"],
        "error": wrote["error"],
        "files": wrote["files"],
    }
    if row["error"]:  # then every rank has one: the checkpoint raises on all of them
        return row
    ctx.phase(f"storage {name}: checkpoint read")
    row["cache_kept"] = files.drop_cache(folder) if ctx.local_rank == 0 else None
    read = read_shard(ctx, folder, nbytes, read_from, group)
    row["load_s"], row["read_s"], row["read_from"] = read["load_s"], read["read_s"], read["read_from"]
    row["error"], row["wrong"] = read["error"], read["wrong"]
    return row


def write_shard(ctx: Ctx, folder: Path, nbytes: int, group: Any) -> ShardWrite:
    state, writer = make_state(ctx, nbytes, ctx.rank), TimedWriter(folder)
    seconds, error = timed(ctx, lambda: save(state, storage_writer=writer, process_group=group), group)
    files = [f"{folder.name}/{name}" for name in writer.files]  # relative to the run folder
    return {"tensors": len(state), "save_s": seconds, "write_s": writer.seconds, "error": error, "files": files}


def read_shard(ctx: Ctx, folder: Path, nbytes: int, read_from: int, group: Any) -> ShardRead:
    """Rank ``read_from``'s shard into zeroed tensors (a read that delivers nothing cannot pass), compared
    exactly with that shard rebuilt from its seed."""
    want = make_state(ctx, nbytes, read_from)
    got, reader = {k: torch.zeros_like(v) for k, v in want.items()}, TimedReader(folder)
    seconds, error = timed(ctx, lambda: load(got, storage_reader=reader, process_group=group), group)
    wrong = 0 if error else sum(not torch.equal(got[k], want[k]) for k in want)
    return {"load_s": seconds, "read_s": reader.seconds, "read_from": read_from, "error": error, "wrong": wrong}


def check_path(ctx: Ctx, name: str, cfg: StoragePathConfig, run_name: str, group: Any) -> PathResult:
    """One path of the profile, from the look at it to the cleanup; the same result on every rank."""
    shared, nbytes = bool(cfg["shared"]), parse_size(section(ctx.spec, "storage", StorageConfig)["checkpoint_size"])
    named, path_from = (cfg["path"], None) if cfg["path"] else rules.temp_folder(os.environ)
    path = os.path.realpath(named)
    run_dir = Path(path, rules.BASE_DIR, run_name)
    writers = ctx.world_size if shared else ctx.local_world_size  # ranks writing into one node's view
    need = nbytes * writers + files.MARKER_BYTES
    result: PathResult = {"path": cfg["path"], "shared": shared, "marker": None, "checkpoint": None}
    with removed_on_error(run_dir):
        ctx.phase(f"storage {name}: look")
        result["nodes"] = nodes = nodes_only(ctx, lambda: prepare(ctx, path, path_from, need, run_dir))
        result["skipped"] = rules.not_run(nodes, None)
        if shared and not result["skipped"]:
            ctx.phase(f"storage {name}: same files")
            result["marker"] = marker = same_files(ctx, run_dir, nodes)
            result["skipped"] = rules.not_run(nodes, marker)
        if not result["skipped"]:
            result["checkpoint"] = checkpoint_all(ctx, name, run_dir, nbytes, shared, group)
        ctx.phase(f"storage {name}: clean up")
        done = result["checkpoint"]
        mine = done["ranks"][ctx.rank]["files"] if done else []
        result["left_behind"] = clean_up(ctx, run_dir, mine)
    return result


def prepare(ctx: Ctx, path: str, path_from: str | None, need: int, run_dir: Path) -> NodeView:
    view = files.look({"host": ctx.host, "node_rank": ctx.node_rank}, path, need)
    if path_from:
        view["path_from"] = path_from
    if not view["problem"]:
        files.open_run_dir(view, run_dir)
    return view


def same_files(ctx: Ctx, run_dir: Path, views: list[NodeView]) -> Marker:
    """Node 0 writes a file, every node reads it back (kept in its view); node 0's record of the file."""
    marker = ctx.gather(files.write_marker(run_dir) if ctx.rank == 0 else None)[0]
    reads = nodes_only(ctx, lambda: files.read_marker(run_dir))
    for view, seen in zip(views, reads, strict=True):
        view["marker"] = seen
    return cast(Marker, dict(marker))  # as rank 0 wrote it


def checkpoint_all(ctx: Ctx, name: str, run_dir: Path, nbytes: int, shared: bool, group: Any) -> Checkpoint:
    """Every rank's shard at once: one checkpoint of the whole world on a shared path (read back across
    nodes), one per node on a node-local one; every rank's row and the times of the whole."""
    if shared:
        folder, read_from, group = run_dir / "checkpoint", (ctx.rank + ctx.local_world_size) % ctx.world_size, None
    else:
        folder, read_from = run_dir / f"checkpoint-node{ctx.node_rank}", ctx.rank
    rows = ctx.gather(checkpoint(ctx, name, folder, nbytes, read_from, group))
    done = not any(r["error"] for r in rows)
    return {
        "ranks": rows,
        "bytes": sum(r["bytes"] for r in rows),
        "tensors_per_rank": rows[0]["tensors"],
        "save_s": max(r["save_s"] for r in rows),
        "load_s": max(r["load_s"] for r in rows) if done else None,
        "failed": rules.failed_ranks(rows),
    }


def clean_up(ctx: Ctx, run_dir: Path, mine: list[str]) -> list[str]:
    """Every rank removes the files it wrote (``mine``, relative to the run folder) at once: removing a
    shard of gigabytes takes the filesystem seconds, and the ranks' shards are apart. Then node 0 removes
    the run folder (on a shared path the others would race it), then every node removes what it still
    sees of it; what remains anywhere, by node."""
    ctx.gather(None)  # every rank is done with the files
    for name in mine:
        with suppress(OSError):  # what is left is found and named below
            (run_dir / name).unlink()
    ctx.gather(None)
    if ctx.rank == 0:
        files.remove_tree(run_dir)
    ctx.gather(None)
    here = rules.where({"host": ctx.host, "node_rank": ctx.node_rank})
    left = nodes_only(ctx, lambda: Leftover(where=here, left=files.remove_run_dir(run_dir)))
    return [f"{node['where']}: {entry}" for node in left for entry in node["left"]]


class Leftover(TypedDict):
    where: str  # the node
    left: list[str]  # what remains of the run folder there


@contextmanager
def removed_on_error(run_dir: Path) -> Iterator[None]:
    """On any error or stop, this rank removes the run folder at once: its peers may be gone already."""
    try:
        yield
    except BaseException:
        files.remove_run_dir(run_dir)
        raise


@contextmanager
def sigterm_unwinds() -> Iterator[list[int]]:
    """torchrun stops its ranks with SIGTERM (then SIGKILL 30 s later): unwind, so the files go first.
    Yields the signals caught: a checkpoint turns the exit into an error of its own and goes on."""
    caught: list[int] = []

    def stop(signum: int, frame: object) -> None:
        caught.append(signum)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGTERM, previous)


def node_group(ctx: Ctx, paths: dict[str, StoragePathConfig]) -> Any:
    """This node's ranks as a process group, for the node-local checkpoints of a multi-node run."""
    if ctx.world_size == ctx.local_world_size or all(p["shared"] for p in paths.values()):
        return None
    members: dict[int, list[int]] = {}
    for rank, node in enumerate(ctx.gather(ctx.node_rank)):
        members.setdefault(node, []).append(rank)
    return ctx.subgroups(list(members.values()))


def run(ctx: Ctx) -> StorageResult:
    cfg = section(ctx.spec, "storage", StorageConfig)
    deadline = time.time() + float(ctx.spec.get("pg_timeout_s", 600)) + DEADLINE_MARGIN_S
    paths: dict[str, PathResult] = {}
    with sigterm_unwinds() as caught:
        run_name = ctx.gather(rules.run_dir_name(deadline, secrets.token_hex(4)) if ctx.rank == 0 else None)[0]
        group = node_group(ctx, cfg["paths"])
        for name, path in cfg["paths"].items():
            paths[name] = check_path(ctx, name, path, run_name, group)
            if caught:  # stopped inside the checkpoint, whose files are gone now: stop before the next path
                raise SystemExit(128 + caught[0])
    return {"paths": paths, "checkpoint_size": cfg["checkpoint_size"], "run_folder": run_name}


if __name__ == "__main__":
    main(run)
