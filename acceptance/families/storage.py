"""Storage rules: where a path is mounted on each node, whether every node sees the same files there, how
fast each node writes and reads a checkpoint, and the lines that name the node and the path.

Free of torch and pytest: the storage probe gathers what each node saw (one "view" per node) and what each
rank measured (one row per rank); these functions turn that into figures. A node is named
``HOST (node N)`` with the path as that node resolved it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from typing_extensions import NotRequired, TypedDict

from acceptance.families import compute
from acceptance.numbers import fmt
from acceptance.schema.family import Family, Metric, Shapes
from acceptance.schema.fields import AbsolutePath, RunName, Size, Strict
from acceptance.schema.figure import Figure


class StoragePath(Strict):
    """A folder checked on every node; ``path: null`` is each node's temporary folder ($TMPDIR, else /tmp)."""

    path: AbsolutePath | None = None
    shared: bool = False  # true: one filesystem every node sees (node 0 writes a file, every node reads it back)


class Storage(Strict):
    """Paths every node must see, and a checkpoint written to each and read back; ``checkpoint_size`` per rank."""

    paths: dict[RunName, StoragePath] = {"tmp": StoragePath()}  # the name goes into metric names and test ids
    checkpoint_size: Size = "256M"


_STORAGE = "storage.<path>.<figure>"


def _paths(s: Storage) -> Sequence[str]:
    return tuple(s.paths)


_PATH = r"(?P<storage_path>\w+)"
_IN_PATH = {"storage_path": _paths}
_EACH_PATH = Shapes[Storage](_STORAGE, _IN_PATH)
STORAGE = Family(
    "storage",
    "shared filesystem present and the same on every node; checkpoint write and read speed",
    Storage,
    (
        _EACH_PATH.figure(rf"{_PATH}\.(write_gbps|read_gbps|write_gbps_min|read_gbps_min|free_gib_min)", "higher"),
        _EACH_PATH.count(
            rf"{_PATH}\.(unusable_nodes|nodes_not_shared|mount_mismatch|checkpoint_bad_ranks|left_behind)"
        ),
        _EACH_PATH.figure(rf"{_PATH}\.(write_below_median|read_below_median)", "lower", scale="points"),
        _EACH_PATH.figure(rf"{_PATH}\.(checkpoint_s|restore_s)", "lower"),
        Metric[Storage](r"wall_s", "storage.wall_s", "lower", scale="bound"),
    ),
    probes=("storage",),
    in_worker=("storage",),
)  # fmt: skip


BASE_DIR = ".cluster-acceptance"  # the one folder the probe creates inside a checked path
_RUN_DIR = re.compile(r"run-(\d+)-[0-9a-f]+")
_OCTAL = re.compile(r"\\([0-7]{3})")
# compared across nodes on a shared path. The device number is recorded, not compared: each host numbers
# its own disks, and Linux gives network filesystems an anonymous device (major 0) per mount, so the
# numbers of one export differ from host to host
MOUNT_FIELDS = ("fstype", "source")
TMPDIR_FROM, TMP_DEFAULT = "$TMPDIR", "/tmp default"  # where a path of ``path: null`` came from


class StoragePathConfig(TypedDict):
    path: str | None  # None: each node's temporary folder
    shared: bool


class StorageConfig(TypedDict):
    """The storage probe's section of the profile."""

    paths: dict[str, StoragePathConfig]
    checkpoint_size: str


class MarkerRead(TypedDict):
    """Node 0's file as one node read it back: its size and sha256, or why it could not be read."""

    size: NotRequired[int]
    sha256: NotRequired[str]
    error: NotRequired[str]


class Marker(MarkerRead):
    """Node 0's record of the file it wrote for the others."""

    file: str


class Where(TypedDict):
    host: str
    node_rank: int


class NodeView(Where):
    """What one node saw at a path (``probes.storage_files.look``); ``problem`` where it cannot be used."""

    path: NotRequired[str]  # as measured: absolute, symlinks resolved
    path_from: NotRequired[str]  # ``path: null``: $TMPDIR or the /tmp default; absent: the profile's path
    problem: NotRequired[str | None]
    fstype: NotRequired[str | None]
    source: NotRequired[str | None]
    mount_point: NotRequired[str | None]
    device: NotRequired[str]  # major:minor
    free_bytes: NotRequired[int]
    total_bytes: NotRequired[int]
    stale_removed: NotRequired[list[str]]  # run folders of probes killed outright
    marker: NotRequired[MarkerRead]


class ShardWrite(TypedDict):
    tensors: int
    save_s: float  # from the common start to the end of the checkpoint on this rank
    write_s: float  # in the storage layer
    error: str | None
    files: list[str]  # relative to the run folder


class ShardRead(TypedDict):
    load_s: float
    read_s: float
    read_from: int  # the rank whose shard this rank read
    error: str | None
    wrong: int  # tensors that differ from what was written


class ShardRow(Where):
    """One rank's checkpoint: its write, and (unless the write failed) its read."""

    rank: int
    bytes: int
    tensors: int
    save_s: float
    write_s: float
    error: str | None
    files: list[str]
    cache_kept: NotRequired[str | None]  # why the page cache could not be dropped (local rank 0)
    load_s: NotRequired[float]
    read_s: NotRequired[float]
    read_from: NotRequired[int]
    wrong: NotRequired[int]


class Checkpoint(TypedDict):
    ranks: list[ShardRow]
    bytes: int
    tensors_per_rank: int
    save_s: float
    load_s: float | None
    failed: list[str]


class PathResult(TypedDict):
    path: str | None
    shared: bool
    marker: Marker | None
    checkpoint: Checkpoint | None
    nodes: NotRequired[list[NodeView]]
    skipped: NotRequired[str | None]
    left_behind: NotRequired[list[str]]


class StorageResult(TypedDict):
    paths: dict[str, PathResult]
    checkpoint_size: str
    run_folder: str


class NodeRate(Where):
    """Per node, the bytes its ranks moved and how fast (``node_rates``: write_* or read_*)."""

    ranks: int
    bytes: int
    write_s: NotRequired[float]
    write_gbps: NotRequired[float]
    read_s: NotRequired[float]
    read_gbps: NotRequired[float]


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fstype: str
    source: str
    device: str  # major:minor
    options: str


def parse_mountinfo(text: str) -> list[Mount]:
    """``/proc/self/mountinfo`` (proc(5)): ID, parent ID, major:minor, root, mount point, options, optional
    fields, ``-``, filesystem type, mount source, superblock options."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if len(fields) < sep + 3:
            continue
        mounts.append(Mount(_unescape(fields[4]), fields[sep + 1], _unescape(fields[sep + 2]), fields[2], fields[5]))
    return mounts


def _unescape(field: str) -> str:
    # the kernel writes space, tab, newline and backslash in paths as octal escapes (\040 ...)
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str, device: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (absolute, symlinks resolved): the longest mount point that is the path
    or one of its parents, preferring mounts of the path's own device (``major:minor`` of ``stat``), so a
    mount hidden under a later one is not taken; of equal ones the last, mounted over the others."""
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point.rstrip("/")
        if not (path == point or path.startswith(point + "/") or point == ""):
            continue
        if best is None or _rank(mount, device) >= _rank(best, device):
            best = mount
    return best


def _rank(mount: Mount, device: str) -> tuple[bool, int]:
    return mount.device == device, len(mount.mount_point.rstrip("/"))


def run_dir_name(deadline: float, token: str) -> str:
    """The run folder's name carries the time after which its probe is certainly gone."""
    return f"run-{int(deadline)}-{token}"


def is_stale(name: str, now: float) -> bool:
    """A run folder whose deadline has passed: a probe killed outright (SIGKILL) left it behind."""
    match = _RUN_DIR.fullmatch(name)
    return match is not None and int(match.group(1)) < now


def temp_folder(env: Mapping[str, str]) -> tuple[str, str]:
    """The node's temporary folder as its jobs will use it, and where that came from: ``$TMPDIR`` as named,
    even where it is missing or read-only, else ``/tmp``. Not ``tempfile.gettempdir()``: that falls back to
    /tmp past a TMPDIR it cannot write, and the probe would pass a folder the node's jobs never use."""
    named = env.get("TMPDIR")
    return (named, TMPDIR_FROM) if named else ("/tmp", TMP_DEFAULT)


def where(view: Mapping[str, object]) -> str:
    return f"{view['host']} (node {view['node_rank']})"


def space_problem(free: int, need: int) -> str | None:
    if free >= need:
        return None
    return f"full: the checkpoint needs {gib(need)} free, {gib(free)} is free"


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def unusable(views: Sequence[NodeView]) -> list[str]:
    """Every node where the path is missing, not a folder, read-only, full or not writable."""
    return [f"{where(v)}: {_named(v)}: {v['problem']}" for v in views if v.get("problem")]


def _named(view: NodeView) -> str:
    """The path, and where it came from when the profile did not name it."""
    return f"{view['path']} (from {view['path_from']})" if view.get("path_from") else str(view.get("path"))


def not_shared(views: Sequence[NodeView], marker: Marker) -> list[str]:
    """Every node that did not read node 0's file back byte for byte (size and sha256)."""
    if marker.get("error"):
        return [f"{where(views[0])}: {views[0]['path']}: could not write {marker['file']}: {marker['error']}"]
    out = []
    for view in views:
        seen = view.get("marker") or MarkerRead(error="not read")
        if seen.get("error"):
            why = f"cannot read node 0's file {marker['file']}: {seen['error']}"
        elif (seen["size"], seen["sha256"]) != (marker["size"], marker["sha256"]):
            why = (
                f"node 0's file {marker['file']} reads {seen['size']} bytes sha256 {seen['sha256'][:12]}, "
                f"node 0 wrote {marker['size']} bytes sha256 {marker['sha256'][:12]}"
            )
        else:
            continue
        out.append(f"{where(view)}: {view['path']}: not the filesystem node 0 sees: {why}")
    return out


def not_run(views: Sequence[NodeView], marker: Marker | None) -> str | None:
    """Why no checkpoint is written to the path, pointing at the test that names the nodes; None: it is."""
    bad = unusable(views)
    if bad:
        return f"the path is unusable on {len(bad)} of {len(views)} nodes (see test_path_usable)"
    bad = not_shared(views, marker) if marker is not None else []
    if bad:
        return f"not one filesystem: {len(bad)} of {len(views)} nodes differ (see test_same_files_on_every_node)"
    return None


def mount_mismatch(views: Sequence[NodeView]) -> list[str]:
    """Every node whose mount of a shared path has another filesystem type or source than node 0's."""
    ref, out = views[0], []
    for view in views[1:]:
        diffs = [f"{f} {view.get(f)!r}, node 0 has {ref.get(f)!r}" for f in MOUNT_FIELDS if view.get(f) != ref.get(f)]
        if diffs:
            out.append(f"{where(view)}: {view['path']} mounted at {view.get('mount_point')}: {'; '.join(diffs)}")
    return out


def free_space(views: Sequence[NodeView]) -> tuple[float, str]:
    """The least free space on any node, in GiB, and which node that is."""
    least = min(views, key=lambda v: v["free_bytes"])
    return least["free_bytes"] / 2**30, f"least free: {where(least)} {least['path']} ({least.get('fstype')})"


def failed_ranks(rows: Sequence[ShardRow]) -> list[str]:
    """Every rank whose shard could not be written or read, or came back different."""
    out = []
    for row in rows:
        who = f"{row['host']} (node {row['node_rank']}) rank {row['rank']}"
        if row.get("error"):
            out.append(f"{who}: {row['error']}")
        elif row.get("wrong"):
            read = f"{row['wrong']} of {row['tensors']} tensors of rank {row['read_from']}'s shard"
            out.append(f"{who}: {read} read back differ from what was written")
    return out


def node_rates(rows: Sequence[ShardRow], op: str) -> list[NodeRate]:
    """Per node, GB/s (1e9 B/s) of ``op`` (write or read): the bytes its ranks moved over the longest of
    their times in the storage layer, since the node's ranks share its link to the storage."""
    by_node: dict[int, list[ShardRow]] = {}
    for row in rows:
        by_node.setdefault(row["node_rank"], []).append(row)
    out = []
    for node_rank, members in sorted(by_node.items()):
        seconds = max(m["write_s"] if op == "write" else m["read_s"] for m in members)
        nbytes = sum(m["bytes"] for m in members)
        gbps = nbytes / seconds / 1e9 if seconds > 0 else float("inf")
        rate: NodeRate = {"node_rank": node_rank, "host": members[0]["host"], "ranks": len(members), "bytes": nbytes}
        if op == "write":
            rate["write_s"], rate["write_gbps"] = seconds, gbps
        else:
            rate["read_s"], rate["read_gbps"] = seconds, gbps
        out.append(rate)
    return out


def slowest_node(rows: Sequence[ShardRow], op: str) -> tuple[float, str]:
    """The slowest node's GB/s, and a line naming it against the median of the nodes."""
    slowest = min(compute.shortfalls(node_rates(rows, op), f"{op}_gbps"), key=lambda s: s.value)
    return slowest.value, describe(slowest, op)


def below_median(rows: Sequence[ShardRow], op: str) -> tuple[float, str]:
    """How far the slowest node falls under the nodes' median (0.2 = 20%), and every node under it."""
    shorts = compute.shortfalls(node_rates(rows, op), f"{op}_gbps")
    under = [describe(s, op) for s in shorts if s.fraction > 0] or [describe(shorts[0], op)]
    return shorts[0].fraction, "\n".join(under)


def describe(short: compute.Shortfall, op: str) -> str:
    """``gpu-node-3 (node 3) write 1.2 GB/s, 40% under the median 2.0``."""
    return (
        f"{where(short.row)} {op} {fmt(short.value)} GB/s, {short.fraction:.0%} under {short.scope} {fmt(short.median)}"
    )


def aggregate(checkpoint: Checkpoint, op: str) -> tuple[float, str]:
    """GB/s of the whole checkpoint: every rank's bytes over the time from the common start until the last
    rank finished, planning and metadata included (``save_s`` / ``load_s``)."""
    seconds = checkpoint["save_s"] if op == "write" else checkpoint["load_s"]
    if seconds is None:  # a checkpoint whose read failed has no read time
        raise TypeError(f"the checkpoint has no {op} time: it failed ({'; '.join(checkpoint['failed'])})")
    nbytes = checkpoint["bytes"]
    detail = (
        f"{gib(nbytes)} by {len(checkpoint['ranks'])} ranks in {seconds:.3g} s "
        f"({checkpoint['tensors_per_rank']} tensors per rank, torch.distributed.checkpoint, fsync'd)"
    )
    kept = [
        f"{r['host']} (node {r['node_rank']}): {r['cache_kept']}" for r in checkpoint["ranks"] if r.get("cache_kept")
    ]
    if op == "read" and kept:
        detail += "; the page cache could not be dropped, so the read may be memory's: " + "; ".join(kept)
    return nbytes / seconds / 1e9, detail


OPS = ("write", "read")


def figures(name: str, found: PathResult) -> dict[str, Figure]:
    """Every figure of the path ``name`` of ``storage.paths``, by metric. One that does not apply, or that
    waits on what failed before it, skips saying why and which test names the cause."""
    prefix, views, left = f"storage.{name}.", found.get("nodes", []), list(found.get("left_behind", []))
    out = [
        Figure(f"{prefix}unusable_nodes", "nodes", len(unusable(views)), findings=unusable(views)),
        *_shared(name, found, views),
        _free_space(prefix, views),
        _intact(prefix, found),
        *(fig for op in OPS for fig in _speeds(prefix, found, op)),
        *_times(prefix, found),
        Figure(f"{prefix}left_behind", "files", len(left), findings=left),
    ]
    return {fig.metric: fig for fig in out}


def _unusable_reason(views: Sequence[NodeView]) -> str | None:
    """Why the nodes' views cannot be measured (test_path_usable names the node and the path); None: they can."""
    reason = not_run(views, None)
    return None if reason is None else f"not measured: {reason}"


def _shared(name: str, found: PathResult, views: Sequence[NodeView]) -> list[Figure]:
    """The same files, and the same mount, on every node of a shared path."""
    prefix = f"storage.{name}."
    files, mounts = Figure(f"{prefix}nodes_not_shared", "nodes"), Figure(f"{prefix}mount_mismatch", "nodes")
    skip = _unusable_reason(views)
    if not found["shared"]:
        skip = f"not required: storage.paths.{name}.shared is false (each node may have its own)"
    if skip:
        files.skip = mounts.skip = skip
        return [files, mounts]
    marker = found["marker"]
    if marker is None:  # node 0 writes its file on every shared path its nodes can use
        files.unmeasured.append("node 0 wrote no file to read back on the other nodes")
    else:
        files.findings = not_shared(views, marker)
    mounts.findings = mount_mismatch(views)
    files.value, mounts.value = len(files.findings), len(mounts.findings)
    return [files, mounts]


def _free_space(prefix: str, views: Sequence[NodeView]) -> Figure:
    fig = Figure(f"{prefix}free_gib_min", "GiB", skip=_unusable_reason(views))
    if not fig.skip:
        fig.value, line = free_space(views)
        fig.findings.append(line)
    return fig


def _intact(prefix: str, found: PathResult) -> Figure:
    """Every rank's shard written, read back, and equal to what was written."""
    fig = Figure(f"{prefix}checkpoint_bad_ranks", "ranks")
    if found["checkpoint"] is None:
        fig.skip = f"no checkpoint written: {found.get('skipped')}"
    else:
        fig.findings = list(found["checkpoint"]["failed"])
        fig.value = len(fig.findings)
    return fig


def _finished(found: PathResult) -> Checkpoint | str:
    """The checkpoint's figures, or why there are none (and which test says why)."""
    if found["checkpoint"] is None:
        return f"no checkpoint written: {found.get('skipped')}"
    if found["checkpoint"]["failed"]:
        return "checkpoint not completed (see test_checkpoint_intact)"
    return found["checkpoint"]


def _speeds(prefix: str, found: PathResult, op: str) -> list[Figure]:
    """The whole checkpoint's GB/s (every rank at once), the slowest node's and how far it falls under the
    nodes' median."""
    metrics = ((f"{op}_gbps", "GB/s"), (f"{op}_gbps_min", "GB/s"), (f"{op}_below_median", "fraction"))
    out = [Figure(prefix + metric, unit) for metric, unit in metrics]
    done = _finished(found)
    if isinstance(done, str):
        for fig in out:
            fig.skip = done
        return out
    rows = done["ranks"]
    found_figures = (aggregate(done, op), slowest_node(rows, op), below_median(rows, op))
    for fig, (value, line) in zip(out, found_figures, strict=True):
        fig.value, fig.findings = value, [line]
    return out


def _times(prefix: str, found: PathResult) -> list[Figure]:
    """Seconds to save the checkpoint of every rank (what a training job waits for) and to load it back on
    every rank (what a restart waits for)."""
    save, load = Figure(f"{prefix}checkpoint_s", "s"), Figure(f"{prefix}restore_s", "s")
    done = _finished(found)
    if isinstance(done, str):
        save.skip = load.skip = done
        return [save, load]
    save.value, save.findings = done["save_s"], [aggregate(done, "write")[1]]
    # None only where a rank failed, which _finished leaves out
    load.value, load.findings = done["load_s"] or 0.0, [aggregate(done, "read")[1]]
    return [save, load]
