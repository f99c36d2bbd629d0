"""Does every node see each storage path, the same filesystem where it must be shared, and how fast does a
checkpoint go there and come back, on every node?"""

from __future__ import annotations

from typing import cast

import pytest

from acceptance.families import storage as storage_rules
from acceptance.families.storage import STORAGE
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    ProfileModel,
    parametrize_from_profile,
    probe_result,
    probe_wall_s,
)

OPS = ("write", "read")


def _paths(profile: ProfileModel) -> list[str]:
    return list(STORAGE.section_of(profile).paths)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per path of ``storage.paths``, under the path's name."""
    parametrize_from_profile(metafunc, "storage_path", _paths)


@pytest.fixture(scope="module")
def storage(cluster: ClusterRun) -> storage_rules.StorageResult:
    return probe_result(cluster, "storage", storage_rules.StorageResult)


@pytest.fixture
def found(storage: storage_rules.StorageResult, storage_path: str) -> storage_rules.PathResult:
    """What the probe found for this path."""
    return storage["paths"][storage_path]


def _usable(found: storage_rules.PathResult) -> list[storage_rules.NodeView]:
    """The nodes' views; skip when the path is unusable: test_path_usable names the node and the path."""
    reason = storage_rules.not_run(found["nodes"], None)
    if reason:
        pytest.skip(f"not measured: {reason}")
    return found["nodes"]


def _checkpoint(found: storage_rules.PathResult) -> storage_rules.Checkpoint:
    """The checkpoint's figures; skip when it did not run or did not finish, and say which test says why."""
    if found["checkpoint"] is None:
        pytest.skip(f"no checkpoint written: {found['skipped']}")
    if found["checkpoint"]["failed"]:
        pytest.skip("checkpoint not completed (see test_checkpoint_intact)")
    return found["checkpoint"]


def test_path_usable(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    """There on every node, a folder, writable, with room for the checkpoint."""
    check.measurements("nodes", found["nodes"])
    bad = storage_rules.unusable(found["nodes"])
    check(f"storage.{storage_path}.unusable_nodes", len(bad), "nodes", "\n".join(bad))


def test_same_files_on_every_node(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    """A file node 0 writes reads back byte for byte (size, sha256) on every node."""
    if not found["shared"]:
        pytest.skip(f"not required: storage.paths.{storage_path}.shared is false (each node may have its own)")
    views = _usable(found)
    check.measurements("file_from_node0", found["marker"])
    # node 0 wrote its file on every shared path its nodes can use (what _usable let through)
    bad = storage_rules.not_shared(views, cast(storage_rules.Marker, found["marker"]))
    check(f"storage.{storage_path}.nodes_not_shared", len(bad), "nodes", "\n".join(bad))


def test_same_mount_on_every_node(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    """The shared path has node 0's filesystem type and mount source on every node."""
    if not found["shared"]:
        pytest.skip(f"not required: storage.paths.{storage_path}.shared is false (each node may have its own)")
    bad = storage_rules.mount_mismatch(_usable(found))
    check(f"storage.{storage_path}.mount_mismatch", len(bad), "nodes", "\n".join(bad))


def test_free_space(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    value, detail = storage_rules.free_space(_usable(found))
    check(f"storage.{storage_path}.free_gib_min", value, "GiB", detail)


def test_checkpoint_intact(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    """Every rank's shard written, read back, and equal to what was written."""
    if found["checkpoint"] is None:
        pytest.skip(f"no checkpoint written: {found['skipped']}")
    check.measurements("ranks", found["checkpoint"]["ranks"])
    bad = found["checkpoint"]["failed"]
    check(f"storage.{storage_path}.checkpoint_bad_ranks", len(bad), "ranks", "\n".join(bad))


@pytest.mark.parametrize("op", OPS)
def test_gbps(found: storage_rules.PathResult, storage_path: str, op: str, check: Checker) -> None:
    """The whole checkpoint's GB/s: every rank at once, from the common start until the last one is done."""
    value, detail = storage_rules.aggregate(_checkpoint(found), op)
    check(f"storage.{storage_path}.{op}_gbps", value, "GB/s", detail)


@pytest.mark.parametrize("op", OPS)
def test_slowest_node(found: storage_rules.PathResult, storage_path: str, op: str, check: Checker) -> None:
    rows = _checkpoint(found)["ranks"]
    check.measurements(f"{op}_per_node", storage_rules.node_rates(rows, op))
    value, detail = storage_rules.slowest_node(rows, op)
    check(f"storage.{storage_path}.{op}_gbps_min", value, "GB/s", detail)


@pytest.mark.parametrize("op", OPS)
def test_node_below_median(found: storage_rules.PathResult, storage_path: str, op: str, check: Checker) -> None:
    value, detail = storage_rules.below_median(_checkpoint(found)["ranks"], op)
    check(f"storage.{storage_path}.{op}_below_median", value, "fraction", detail)


def test_checkpoint_time(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    """Seconds to save the checkpoint of every rank (what a training job waits for)."""
    done = _checkpoint(found)
    check(f"storage.{storage_path}.checkpoint_s", done["save_s"], "s", storage_rules.aggregate(done, "write")[1])


def test_restore_time(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    """Seconds to load it back on every rank (what a restart waits for)."""
    done = _checkpoint(found)
    load_s = cast(float, done["load_s"])  # None only where a rank failed, which _checkpoint skips
    check(f"storage.{storage_path}.restore_s", load_s, "s", storage_rules.aggregate(done, "read")[1])


def test_nothing_left_behind(found: storage_rules.PathResult, storage_path: str, check: Checker) -> None:
    left = found["left_behind"]
    check(f"storage.{storage_path}.left_behind", len(left), "files", "\n".join(left))


def test_probe_time(cluster: ClusterRun, storage: storage_rules.StorageResult, check: Checker) -> None:
    wall_s = probe_wall_s(cluster, "storage")
    check("storage.wall_s", wall_s, "s", "start to result, imports included where it started its job or the worker")
