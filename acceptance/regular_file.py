"""The one reader of a file the user names (an evidence file, a profile): a regular file only, read up to
a size cap, never blocking.

``open`` follows a symlink and opens whatever is at its end: ``/dev/zero`` reads forever (a merge of it ran
out of memory), a FIFO blocks until someone writes. Here the file is opened without blocking, its kind read
from the open descriptor (``fstat``: what was opened, not what the name pointed at a moment before), and a
file that is not a regular one, or larger than the cap, is refused in one line.

A leaf: imports nothing of the package.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


class FileRefused(Exception):
    """The file cannot be read as asked; the message says why, without the path (the caller names it)."""


def _refusal(fd: int) -> str | None:
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return None
    return f"{_KINDS.get(stat.S_IFMT(mode), 'not a regular file')}, not a regular file"


def not_regular(path: Path) -> str | None:
    """Why an existing ``path`` is no regular file to replace (a FIFO, a device, a dangling link); None
    for a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot open: {exc.strerror}"
    try:
        return _refusal(fd)
    finally:
        os.close(fd)


def read_regular(path: Path, cap: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``cap`` bytes (a symlink to one is fine)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FileRefused(f"cannot open: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        refusal = _refusal(fd)
        if refusal is not None:
            raise FileRefused(refusal)
        try:
            data = handle.read(cap + 1)  # a file that grows while it is read stops at the cap as well
        except OSError as exc:
            raise FileRefused(f"cannot read: {exc.strerror}") from None
    if len(data) > cap:
        raise FileRefused(f"larger than the {cap / 2**20:g} MB cap")
    return data
