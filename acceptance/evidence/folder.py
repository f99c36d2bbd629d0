"""Evidence folders that are never shared or overwritten.

A run holds an exclusive lock on its folder for as long as it lives (``flock``: the kernel drops it
when the process dies, so a killed run never leaves a stale lock); a second run on the same folder is
refused with the holder named. A folder given must be new or empty: one that already holds evidence
(finished, failed or killed), or any other file (another run's JUnit, its drain list), is kept as it is and
the run refused, never allowed to write over or beside what is there.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from acceptance.atomic_file import host_part, name_part
from acceptance.masking import masked_command
from acceptance.regular_file import FileRefused, read_regular

DEFAULT_ROOT = Path("acceptance-results")
LOCK_NAME = ".lock"


class EvidenceFolderError(Exception):
    """The folder cannot hold this run's evidence; the message names the folder and why."""


def default_folder(label: str, node_rank: int = 0) -> Path:
    """A new folder per run: time, what ran, host, node rank and a random token, so two runs started in
    the same second on one node never meet."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return DEFAULT_ROOT / f"{stamp}-{name_part(label)}-{host_part()}-node{node_rank}-{secrets.token_hex(3)}"


@dataclass
class FolderLock:
    folder: Path
    handle: IO[str] | None

    def release(self) -> None:
        if self.handle is not None:
            self.handle.close()  # closing drops the flock
            self.handle = None


def claim(folder: Path) -> FolderLock:
    """Create ``folder`` if needed, lock it for this process, and refuse a folder in use or already used."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        made = not (folder / LOCK_NAME).exists()  # ours to remove again when the folder is refused
        handle = open(folder / LOCK_NAME, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole run
    except OSError as exc:
        raise EvidenceFolderError(f"evidence folder {folder}: cannot create or write it: {exc.strerror}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "holder unknown"
        handle.close()
        raise EvidenceFolderError(
            f"evidence folder {folder} is in use by another run ({holder}); "
            "give this run its own --cluster-evidence, or leave it unset for a new folder"
        ) from None
    lock = FolderLock(folder, handle)
    try:
        _refuse_used(folder)
        _write_holder(handle)
    except BaseException:
        lock.release()
        if made:
            (folder / LOCK_NAME).unlink(missing_ok=True)
        raise
    return lock


def _refuse_used(folder: Path) -> None:
    existing = folder / "evidence.json"
    if not existing.exists():
        _refuse_not_empty(folder)
        return
    try:
        data = json.loads(read_regular(existing, 256 * 2**20))
        what = f"verdict {data.get('verdict')}, started {data.get('started')}, finished {data.get('finished')}"
    except (FileRefused, ValueError, AttributeError):
        what = "unreadable"
    raise EvidenceFolderError(
        f"evidence folder {folder} already holds a run's evidence ({what}); evidence is never overwritten: "
        "give this run its own --cluster-evidence, or leave it unset for a new folder"
    )


def _refuse_not_empty(folder: Path) -> None:
    """Anything beside the lock is another run's (or someone's) file: this run would write beside it, or
    over it (``junit-<host>.xml``, ``drain.json``, ``probes/``)."""
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.name != LOCK_NAME)
    except OSError as exc:
        raise EvidenceFolderError(f"evidence folder {folder}: cannot list it: {exc.strerror}") from None
    if names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        count = f"{len(names)} entry" if len(names) == 1 else f"{len(names)} entries"
        raise EvidenceFolderError(
            f"evidence folder {folder} is not empty ({count}: {shown}); a run's folder holds its "
            "files alone: give this run a new or empty --cluster-evidence, or leave it unset for a new folder"
        )


def _write_holder(handle: IO[str]) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(masked_command(sys.argv[:3])),
    }
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(holder))
        handle.flush()
        os.fsync(handle.fileno())
    except OSError as exc:
        raise EvidenceFolderError(f"evidence folder {handle.name}: cannot write: {exc.strerror}") from None
