"""The storage probe's file work on one node: look at a path, make and remove the run folder, the file
node 0 writes for the others to read, and dropping the checkpoint from the page cache.

Plain ``os`` calls, no torch. Every error of the filesystem is turned into words (``why``) and kept, never
raised: a missing or full path is a finding about the cluster, not a crash of the probe.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from contextlib import suppress
from pathlib import Path

from acceptance.families import storage as rules
from acceptance.families.storage import Marker, MarkerRead, NodeView, Where

MARKER_BYTES = 2**20
MARKER_FILE = "from-node0.bin"


def why(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: the words and the name of the error, as people search for it."""
    if exc.errno == errno.ENOENT:
        return "does not exist (ENOENT)"
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc}" + (f" ({name})" if name else "")


def look(where: Where, path: str, need: int) -> NodeView:
    """``where`` (host, node) with ``path``: there, a folder, its mount, free space; ``problem`` when it
    cannot take ``need`` bytes."""
    view: NodeView = {"host": where["host"], "node_rank": where["node_rank"], "path": path, "problem": None}
    try:
        info = os.stat(path)
    except OSError as exc:
        view["problem"] = why(exc)
        return view
    if not stat.S_ISDIR(info.st_mode):
        view["problem"] = "is not a folder"
        return view
    device = f"{os.major(info.st_dev)}:{os.minor(info.st_dev)}"
    try:
        mount = rules.mount_of(path, device, rules.parse_mountinfo(Path("/proc/self/mountinfo").read_text()))
    except OSError:  # not Linux: the mount is not recorded, the path is still checked
        mount = None
    fs = os.statvfs(path)
    free = fs.f_bavail * fs.f_frsize  # what an unprivileged writer may use, like df's "Avail"
    view["fstype"] = mount.fstype if mount else None
    view["source"] = mount.source if mount else None
    view["mount_point"] = mount.mount_point if mount else None
    view["device"] = device
    view["free_bytes"] = free
    view["total_bytes"] = fs.f_blocks * fs.f_frsize
    if fs.f_flag & os.ST_RDONLY:
        view["problem"] = "not writable: read-only filesystem (EROFS)"
    else:
        view["problem"] = rules.space_problem(free, need)
    return view


def open_run_dir(view: NodeView, run_dir: Path) -> None:
    """Remove stale run folders, make this run's, and write a file naming this node into it (the check
    that the node may write there)."""
    view["stale_removed"] = remove_stale(run_dir.parent)
    owner = run_dir / f"node{view['node_rank']}-{view['host']}.txt"
    try:
        for attempt in (1, 2):
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
                break
            except FileNotFoundError:  # another run removed the empty base folder between the two mkdirs
                if attempt == 2:
                    raise
        with open(owner, "w") as out:
            out.write(f"host {view['host']} pid {os.getpid()} started {time.time():.0f}\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        view["problem"] = f"not writable: {exc.filename or run_dir}: {why(exc)}"


def remove_stale(base: Path) -> list[str]:
    if not base.is_dir():
        return []
    now, removed = time.time(), []
    for entry in base.iterdir():
        if rules.is_stale(entry.name, now):
            remove_tree(entry)
            removed.append(entry.name)
    return removed


def remove_tree(root: Path) -> None:
    """Remove ``root`` and what it holds. Whatever cannot be removed is left for ``remaining`` to report;
    an entry that vanishes meanwhile (another node removing the same shared folder) is not an error."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            with suppress(OSError):
                os.unlink(os.path.join(folder, name))
        with suppress(OSError):
            os.rmdir(folder)


def remove_run_dir(run_dir: Path) -> list[str]:
    """Remove the run folder, and the base folder once no run uses it; what remains of the run folder."""
    remove_tree(run_dir)
    with suppress(OSError):
        run_dir.parent.rmdir()
    left = [os.path.join(folder, name) for folder, dirs, files in os.walk(run_dir) for name in [*dirs, *files]]
    return left + ([str(run_dir)] if run_dir.exists() else [])


def write_marker(run_dir: Path) -> Marker:
    """Node 0's file of random bytes, fsync'd; its size and sha256, or why it could not be written."""
    path, data = run_dir / MARKER_FILE, os.urandom(MARKER_BYTES)
    try:
        with open(path, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        return {"file": str(path), "error": why(exc)}
    return {"file": str(path), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def read_marker(run_dir: Path) -> MarkerRead:
    try:
        data = (run_dir / MARKER_FILE).read_bytes()
    except OSError as exc:
        return {"error": why(exc)}
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def drop_cache(folder: Path) -> str | None:
    """Evict the checkpoint's pages from this node's page cache (POSIX_FADV_DONTNEED, as fio's
    ``invalidate=1`` does), so the read measures the storage and not memory. The files are fsync'd:
    their pages are clean and can go. Why it could not, if it could not: the read may then be memory's."""
    if not hasattr(os, "posix_fadvise"):
        return "posix_fadvise is not available on this system"
    for path in folder.iterdir():
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except OSError as exc:
            return f"{path}: {why(exc)}"
    return None
