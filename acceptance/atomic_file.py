"""The one atomic file writer: a reader sees the old file or the new one, never half of one.

Torch-free and dependency-free on purpose: the plugin's evidence store and the probes' rank files both
write through it (probes may import it; it imports nothing of the package).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from pathlib import Path

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._-]")


def name_part(text: str) -> str:
    """``text`` (a host name) as part of a file name: any character outside letters, digits, ``.``, ``_``
    and ``-`` becomes ``_``. A host name is the kernel's bytes, and one holding ``/`` would turn a file
    name into a path into folders that do not exist."""
    return _NOT_IN_A_NAME.sub("_", text) or "_"


def host_part() -> str:
    """This host's name as part of a file name (``name_part``)."""
    return name_part(socket.gethostname())


def write_atomic(path: Path, text: str | bytes, durable: bool = True) -> None:
    """Write ``text`` (or bytes: an image) to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    Ranks of several nodes may share one folder, and a crash must never leave a half-written file under the
    real name. The temporary name holds the host and pid (who left it) and a random part, and is created
    exclusively: host and pid alone repeat across containers of one host (each its own pid namespace, the
    host's name), and two writers must never write into, or remove, each other's temporary file.
    ``durable=False`` skips the fsync, for files rewritten every second (heartbeats) whose loss in a power cut
    costs nothing. A write that fails removes its temporary file and raises; ``path`` keeps its previous
    content."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{host_part()}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # opened outside the try: an open that fails made no file to remove (it may be another writer's); the with
    # below closes it
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    handle = open(tmp, "xb")  # noqa: SIM115
    try:
        with handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        # a full disk (ENOSPC at the write, the flush or the close): the old file stays whole, and no
        # half-written temporary is left beside it to fill the disk further
        tmp.unlink(missing_ok=True)
        raise
