"""The storage probe's file work on one node, in this process: the look at a path, the run folder, node 0's
file, and the cleanup that leaves nothing behind."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from acceptance.families import storage as rules
from acceptance.families.storage import NodeView
from acceptance.probes import storage_files as files


def view() -> NodeView:
    return {"host": "gpu-0", "node_rank": 0}


def test_a_usable_folder_is_described() -> None:
    seen = files.look(view(), "/", need=1)
    assert seen["problem"] is None and seen["mount_point"] == "/" and seen["fstype"]
    assert isinstance(seen["free_bytes"], int) and 0 < seen["free_bytes"] <= seen["total_bytes"]


def test_missing_file_and_too_small(tmp_path: Path) -> None:
    assert files.look(view(), str(tmp_path / "nope"), 1)["problem"] == "does not exist (ENOENT)"
    (tmp_path / "f").write_text("x")
    assert files.look(view(), str(tmp_path / "f"), 1)["problem"] == "is not a folder"
    problem = files.look(view(), str(tmp_path), need=2**62)["problem"]
    assert isinstance(problem, str) and problem.startswith("full: the checkpoint needs 4.29e+09 GiB free, ")


def test_errors_read_as_words_and_their_name() -> None:
    assert files.why(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device (ENOSPC)"
    assert files.why(FileNotFoundError(errno.ENOENT, "No such file or directory")) == "does not exist (ENOENT)"


def test_the_run_folder_comes_and_goes_with_its_base(tmp_path: Path) -> None:
    run_dir = tmp_path / rules.BASE_DIR / rules.run_dir_name(time.time() + 60, "aa11")
    seen = view()
    files.open_run_dir(seen, run_dir)
    assert "problem" not in seen and seen["stale_removed"] == []
    assert [p.name for p in run_dir.iterdir()] == ["node0-gpu-0.txt"]
    (run_dir / "checkpoint").mkdir()
    (run_dir / "checkpoint" / "__0_0.distcp").write_bytes(b"x")
    assert files.remove_run_dir(run_dir) == []
    assert list(tmp_path.iterdir()) == []


def test_stale_folders_go_live_ones_and_others_stay(tmp_path: Path) -> None:
    base = tmp_path / rules.BASE_DIR
    stale, live, other = base / "run-1000-dead", base / rules.run_dir_name(time.time() + 600, "beef"), base / "notes"
    for folder in (stale, live, other):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f").write_text("x")
    seen, mine = view(), rules.run_dir_name(time.time() + 60, "cafe")  # named once: a second may tick by
    files.open_run_dir(seen, base / mine)
    assert seen["stale_removed"] == ["run-1000-dead"]
    assert sorted(p.name for p in base.iterdir()) == sorted([live.name, "notes", mine])


@pytest.mark.e2e
def test_what_cannot_be_removed_is_reported(tmp_path: Path) -> None:
    """A folder something is mounted on cannot be removed (EBUSY): the cleanup goes on and says what remains."""
    run_dir = tmp_path / rules.BASE_DIR / "run-1-ab"
    busy = run_dir / "busy"
    busy.mkdir(parents=True)
    (run_dir / "f").write_text("x")
    done = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(busy)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mounting needs root (CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        left = files.remove_run_dir(run_dir)
    finally:
        subprocess.run(["umount", "-l", str(busy)], capture_output=True, check=False)
    assert left == [str(busy), str(run_dir)]


def test_node0s_file_reads_back_and_a_missing_one_says_so(tmp_path: Path) -> None:
    written = files.write_marker(tmp_path)
    assert written["size"] == files.MARKER_BYTES and files.read_marker(tmp_path) == {
        "size": written["size"],
        "sha256": written["sha256"],
    }
    assert files.read_marker(tmp_path / "elsewhere") == {"error": "does not exist (ENOENT)"}
    assert files.drop_cache(tmp_path) is None  # the pages of fsync'd files may go; the file stays
    assert files.read_marker(tmp_path)["sha256"] == written["sha256"]


def test_sigterm_unwinds_and_is_remembered() -> None:
    """torchrun's SIGTERM becomes an exit that runs the cleanup; the handler before is put back."""
    from acceptance.probes.storage import sigterm_unwinds

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as info, sigterm_unwinds() as caught:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # never reached in full: the signal arrives first
    assert info.value.code == 128 + signal.SIGTERM and caught == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before
