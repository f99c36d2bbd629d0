"""The storage tests end to end on local-cpu (real torchrun jobs) against bad paths: missing, a file, read-only,
full, running out of space mid-checkpoint, and stopped mid-checkpoint. Each must end in one failure that
names the node and the path, never a traceback, and leave nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import PLUGIN_ARGS, ROOT, counts, evidence

pytestmark = pytest.mark.e2e  # the storage probe through torchrun, on real folders

MODULE = "tests_cluster/test_storage.py"
PROFILE = str(ROOT / "thresholds" / "local-cpu.yaml")  # this checkout's, whichever one is installed
RUN_TIMEOUT_S = 300  # only so that a broken run cannot hang CI; nothing here measures time
SMALL = ("--cluster-set", "storage.checkpoint_size=4M")


def run_storage(pytester: pytest.Pytester, path: Path, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """The storage module on local-cpu, checking ``path`` instead of the temporary folder."""
    folder = pytester.path / "evidence"
    result = pytester.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", PROFILE, "--cluster-evidence", str(folder),
        "--cluster-set", f"storage.paths.tmp.path={path}", *SMALL, *args, MODULE, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    return result, evidence(folder)


def failures(data: dict[str, Any]) -> dict[str, str]:
    return {t["nodeid"].split("::")[-1]: t["message"] for t in data["tests"] if t["outcome"] == "failed"}


def assert_one_clear_failure(result: pytest.RunResult, data: dict[str, Any], test: str, *words: str) -> str:
    """Exactly ``test`` failed, with a message holding ``words``; no traceback anywhere; verdict FAIL."""
    found = failures(data)
    assert list(found) == [test], result.stdout.str()[-4000:]
    assert all(word in found[test] for word in words), found[test]
    assert "Traceback" not in result.stdout.str() and "Traceback" not in json.dumps(data)
    assert data["verdict"] == "FAIL" and [p["status"] for p in data["probes"]] == ["ok"]
    return found[test]


def host_line(message: str) -> str:
    """The line of a failure message that names the node: ``HOST (node 0): PATH: ...``."""
    return next(line for line in message.splitlines() if " (node 0): " in line)


def mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mounting needs root (CAP_SYS_ADMIN): mount {' '.join(args)}: {done.stderr.strip()}")


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[list[Path]]:
    """Mount points made by a test, unmounted at its end."""
    made: list[Path] = []
    yield made
    for point in reversed(made):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def tmpfs(mounts: list[Path], point: Path, options: str) -> Path:
    point.mkdir()
    mount("-t", "tmpfs", "-o", options, "tmpfs", str(point))
    mounts.append(point)
    return point


def test_a_missing_path_names_the_node_and_the_path(suite: pytest.Pytester, tmp_path: Path) -> None:
    missing = tmp_path / "not-mounted"
    result, data = run_storage(suite, missing)
    message = assert_one_clear_failure(result, data, "test_path_usable[tmp]", "storage.tmp.unusable_nodes = 1 nodes")
    assert host_line(message).endswith(f" (node 0): {missing}: does not exist (ENOENT)")
    assert not missing.exists(), "the probe must never create the path it checks"
    assert counts(result) == {"failed": 1, "passed": 1, "recorded": 1, "skipped": 12}


def test_a_missing_tmpdir_is_measured_as_named(
    suite: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``path: null`` is the node's temporary folder: $TMPDIR, even where it does not exist. tempfile would
    fall back to /tmp, and the gate would pass on a folder the node's jobs never use."""
    missing = tmp_path / "no-tmpdir"
    monkeypatch.setenv("TMPDIR", str(missing))
    folder = suite.path / "evidence"
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", PROFILE, "--cluster-evidence", str(folder),
        *SMALL, MODULE, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    data = evidence(folder)
    message = assert_one_clear_failure(result, data, "test_path_usable[tmp]")
    assert host_line(message).endswith(f" (node 0): {missing} (from $TMPDIR): does not exist (ENOENT)")
    usable = next(t for t in data["tests"] if t["nodeid"].endswith("test_path_usable[tmp]"))
    assert [(n["path"], n["path_from"]) for n in usable["measurements"]["nodes"]] == [(str(missing), "$TMPDIR")]


def test_a_file_where_a_folder_is_expected(suite: pytest.Pytester, tmp_path: Path) -> None:
    a_file = tmp_path / "ckpt"
    a_file.write_text("not a folder")
    result, data = run_storage(suite, a_file)
    message = assert_one_clear_failure(result, data, "test_path_usable[tmp]")
    assert host_line(message).endswith(f": {a_file}: is not a folder")
    assert a_file.read_text() == "not a folder"


def test_a_read_only_path(suite: pytest.Pytester, tmp_path: Path, mounts: list[Path]) -> None:
    """A read-only bind mount: what a root user meets (chmod does not stop root)."""
    source, point = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    point.mkdir()
    mount("--bind", str(source), str(point))
    mounts.append(point)
    mount("-o", "remount,ro,bind", str(point))
    result, data = run_storage(suite, point)
    message = assert_one_clear_failure(result, data, "test_path_usable[tmp]")
    assert host_line(message).endswith(f": {point}: not writable: read-only filesystem (EROFS)")


def test_a_folder_this_user_may_not_write(suite: pytest.Pytester, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into a chmod 555 folder anyway; test_a_read_only_path covers root")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    result, data = run_storage(suite, locked)
    message = assert_one_clear_failure(result, data, "test_path_usable[tmp]")
    assert "not writable: " in host_line(message) and "Permission denied (EACCES)" in message


def test_a_full_path_is_refused_before_writing(suite: pytest.Pytester, tmp_path: Path, mounts: list[Path]) -> None:
    full = tmpfs(mounts, tmp_path / "full", "size=1M")
    result, data = run_storage(suite, full)
    message = assert_one_clear_failure(result, data, "test_path_usable[tmp]")
    assert host_line(message).endswith(f": {full}: full: the checkpoint needs 0.00879 GiB free, 0.000977 GiB is free")
    assert list(full.iterdir()) == []


def test_no_space_mid_checkpoint(suite: pytest.Pytester, tmp_path: Path, mounts: list[Path]) -> None:
    """A filesystem out of inodes: the free-space check passes, then creating the shards fails (ENOSPC)."""
    # root, the base and run folders, node 0's file, the file from node 0, the checkpoint folder: 6 inodes
    point = tmpfs(mounts, tmp_path / "inodes", "size=64M,nr_inodes=6")
    result, data = run_storage(suite, point)
    message = assert_one_clear_failure(result, data, "test_checkpoint_intact[tmp]", "checkpoint_bad_ranks = 2 ranks")
    assert "(node 0) rank 0: OSError: [Errno 28] No space left on device: " in message
    assert f"'{point}/.cluster-acceptance/run-" in message
    assert list(point.iterdir()) == [], "the partial checkpoint must be removed"


def test_stopped_mid_checkpoint_leaves_nothing(
    suite: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 hangs as the checkpoint starts; at the timeout torchrun stops the ranks with SIGTERM, and
    they remove the run folder on their way out."""
    folder = tmp_path / "shared"
    folder.mkdir()
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "hang@1:storage tmp: checkpoint write")
    _, data = run_storage(suite, folder, "--cluster-timeout", "60")
    assert "in phase 'storage tmp: checkpoint write'" in data["probes"][0]["error"]
    assert data["verdict"] == "FAIL"
    assert list(folder.iterdir()) == [], list(folder.rglob("*"))


def test_stale_run_folders_go_and_live_ones_stay(suite: pytest.Pytester, tmp_path: Path) -> None:
    base = tmp_path / "shared" / ".cluster-acceptance"
    stale, live = base / "run-1000-deadbeef", base / f"run-{int(time.time()) + 3600}-cafe0000"
    for folder in (stale, live):
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"x" * 1024)
    result, data = run_storage(suite, tmp_path / "shared")
    assert data["verdict"] == "PARTIAL" and data["errors"] == [], result.stdout.str()[-4000:]  # storage alone
    usable = next(t for t in data["tests"] if t["nodeid"].endswith("test_path_usable[tmp]"))
    assert usable["measurements"]["nodes"][0]["stale_removed"] == ["run-1000-deadbeef"]
    assert sorted(p.name for p in base.iterdir()) == [live.name]
    shutil.rmtree(base)
