"""Where a command may write: never over its own input, another run's evidence or into its folder, a folder
or something that is not a file, and never two outputs on one path. Every ``-o``, ``--junit`` and ``report``'s files
are checked here before anything is read or written."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from acceptance.regular_file import not_regular

# an evidence file says so in its first lines (store.dumps writes "schema" first, indent 1)
_EVIDENCE_MARK = re.compile(rb'"schema":\s*"cluster-acceptance/evidence/')
_HEAD_BYTES = 4096


def _is_evidence(path: Path) -> bool:
    if path.name == "evidence.json":
        return True
    try:
        with path.open("rb") as handle:
            return _EVIDENCE_MARK.search(handle.read(_HEAD_BYTES)) is not None
    except OSError:
        return False


def check_outputs(outputs: Sequence[tuple[str, Path]], inputs: Sequence[Path] = ()) -> None:
    """``outputs``: (the option that named it, the path). Raises ValueError (exit 4) naming the option and
    the path for an output that is a folder or not a regular file, an input, another run's evidence file,
    or the path of another output."""
    read = {(p / "evidence.json" if p.is_dir() else p).resolve() for p in inputs}
    seen: dict[Path, str] = {}
    for option, path in outputs:
        where = f"{option} {path}"
        real = path.resolve()
        if real in seen:
            raise ValueError(f"{where}: the same file as {seen[real]}; give each output its own path")
        seen[real] = where
        if path.is_dir():
            raise ValueError(f"{where}: is a folder; name a file to write")
        above = next((p for p in path.parents if p.exists()), None)  # the folder it goes in, or what is there
        if above is not None and not above.is_dir():
            raise ValueError(f"{where}: {above} is not a folder; name a file in a folder")
        if real in read:
            raise ValueError(f"{where}: is one of the inputs; write to another file")
        if path.exists() or path.is_symlink():
            refusal = not_regular(path)  # a FIFO, a device, a dangling link
            if refusal is not None:
                raise ValueError(f"{where}: {refusal}; name a file to write")
            if _is_evidence(path):
                raise ValueError(f"{where}: holds a run's evidence, which is never overwritten; write to another file")
        beside = real.parent / "evidence.json"
        if beside.is_file() and beside.resolve() not in read:
            # a run's folder holds what that run wrote (its report among them): another's output there would
            # pass for the run's own
            raise ValueError(f"{where}: is in another run's evidence folder ({real.parent}); write elsewhere")
