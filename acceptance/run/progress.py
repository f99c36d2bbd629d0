"""Live progress of a running probe: the parts it finished, and one-time builds it waits on.

A probe's ranks run in other processes; what they leave in the probe's folder is read here, in a thread of
the process that launched them, and said as one line each through the ``say`` callback the run was given:

* each part of a probe as it finishes (``partial.json``, written by a probe of several parts, such as the
  training strategies of one job), with its wall time and whether it failed; and each result row of a probe
  that measures row by row (the collective sweep), handed to a callback as it comes;
* a torch C++ extension being built (DeepSpeed JIT-builds its ops this way, once per machine and version):
  torch holds ``<extensions root>/[<py>_<cuda>/]<op>/lock`` while it builds, and every other process that
  needs the op waits until the file is gone. A build that was killed leaves the file behind, and then every
  later run waits on it forever: a lock that is already there when the probe starts is said at once, and
  named again in the probe's error if the probe then fails.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

POLL_S = 1.0
# torch takes the lock also to find that a built op is up to date (ninja has nothing to do, well under a
# second): only a lock this old is a build
BUILD_NOTICE_S = 3.0
Say = Callable[[str], None]
OnRow = Callable[[dict[str, Any]], None]


def extension_roots(env: Mapping[str, str]) -> list[Path]:
    """Where torch builds C++ extensions (torch.utils.cpp_extension._get_build_directory): the
    TORCH_EXTENSIONS_DIR, else torch_extensions under XDG_CACHE_HOME (default ~/.cache)."""
    given = env.get("TORCH_EXTENSIONS_DIR")
    if given:
        return [Path(given)]
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return [Path(cache) / "torch_extensions"]


def build_locks(roots: list[Path]) -> dict[Path, float]:
    """Every extension build lock under ``roots`` with its modification time."""
    found: dict[Path, float] = {}
    for root in roots:
        for pattern in ("*/lock", "*/*/lock"):
            for path in root.glob(pattern):
                try:
                    found[path] = path.stat().st_mtime
                except OSError:  # the build finished between the listing and the stat
                    continue
    return found


def lock_note(path: Path, since: float) -> str:
    age = time.time() - since
    return (
        f"torch extension build lock {path} exists ({age:.0f} s old): a build of {path.parent.name} is under way, "
        "or one was killed and left the lock behind, and then every build of the op waits on it forever: "
        "if no build is running, remove the file"
    )


def read_partial(out_dir: Path) -> dict[str, Any]:
    """What a probe's ranks finished so far: its ``partial.json`` (``parts`` or ``rows``), when the probe
    writes one and it is readable (a rank may be replacing it), else {}."""
    try:
        found = json.loads((out_dir / "partial.json").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class Watch:
    """A thread that says what a running probe finished and what it builds; a context manager."""

    def __init__(self, label: str, out_dir: Path, say: Say, env: Mapping[str, str], on_row: OnRow | None = None):
        self.label, self.out_dir, self.say, self.on_row = label, out_dir, say, on_row
        self.rows_seen = 0
        self.roots = extension_roots(env)
        self.before = build_locks(self.roots)
        self.seen_locks: set[Path] = set(self.before)
        self.seen_parts: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="probe-progress", daemon=True)

    def __enter__(self) -> Watch:
        for path, since in self.before.items():
            self.say(f"{self.label}: {lock_note(path, since)}")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()  # what the probe finished since the last look, before its end is said

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        now = time.time()
        for path, since in build_locks(self.roots).items():
            if path not in self.seen_locks and now - since >= BUILD_NOTICE_S:
                self.seen_locks.add(path)
                self.say(f"{self.label}: one-time build under way: torch extension {path.parent.name} ({path.parent})")
        partial = read_partial(self.out_dir)
        parts = partial.get("parts")
        for name, part in (parts if isinstance(parts, dict) else {}).items():
            if name not in self.seen_parts:
                self.seen_parts.add(name)
                status = "failed" if part.get("error") else "ok"
                self.say(f"{self.label}: {name} {status} in {float(part.get('wall_s') or 0):.1f} s")
        rows = partial.get("rows")
        if self.on_row is not None and isinstance(rows, list):
            for row in rows[self.rows_seen :]:
                self.on_row(row)
            self.rows_seen = max(self.rows_seen, len(rows))

    def stale_locks(self) -> list[str]:
        """Locks that were there before the probe started and still are: the likely cause of a hang."""
        now = build_locks(self.roots)
        return [lock_note(path, since) for path, since in self.before.items() if now.get(path) == since]
