"""Does every node see each storage path, the same filesystem where it must be shared, and how fast does a
checkpoint go there and come back, on every node?"""

from __future__ import annotations

import pytest

from acceptance.families import storage as storage_rules
from acceptance.families.storage import STORAGE
from acceptance.plugin.api import (
    Checker,
    ClusterRun,
    Figure,
    ProfileModel,
    parametrize_from_profile,
    probe_result,
    probe_wall_s,
)


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


@pytest.fixture
def figures(found: storage_rules.PathResult, storage_path: str) -> dict[str, Figure]:
    return storage_rules.figures(storage_path, found)


def test_path_usable(
    found: storage_rules.PathResult, figures: dict[str, Figure], storage_path: str, check: Checker
) -> None:
    """There on every node, a folder, writable, with room for the checkpoint."""
    check.measurements("nodes", found.get("nodes", []))
    check(figures[f"storage.{storage_path}.unusable_nodes"])


def test_same_files_on_every_node(
    found: storage_rules.PathResult, figures: dict[str, Figure], storage_path: str, check: Checker
) -> None:
    """A file node 0 writes reads back byte for byte (size, sha256) on every node."""
    fig = figures[f"storage.{storage_path}.nodes_not_shared"]
    if not fig.skip:
        check.measurements("file_from_node0", found["marker"])
    check(fig)


def test_same_mount_on_every_node(figures: dict[str, Figure], storage_path: str, check: Checker) -> None:
    """The shared path has node 0's filesystem type and mount source on every node."""
    check(figures[f"storage.{storage_path}.mount_mismatch"])


def test_free_space(figures: dict[str, Figure], storage_path: str, check: Checker) -> None:
    check(figures[f"storage.{storage_path}.free_gib_min"])


def test_checkpoint_intact(
    found: storage_rules.PathResult, figures: dict[str, Figure], storage_path: str, check: Checker
) -> None:
    """Every rank's shard written, read back, and equal to what was written."""
    if found["checkpoint"] is not None:
        check.measurements("ranks", found["checkpoint"]["ranks"])
    check(figures[f"storage.{storage_path}.checkpoint_bad_ranks"])


@pytest.mark.parametrize("op", storage_rules.OPS)
def test_gbps(figures: dict[str, Figure], storage_path: str, op: str, check: Checker) -> None:
    """The whole checkpoint's GB/s: every rank at once, from the common start until the last one is done."""
    check(figures[f"storage.{storage_path}.{op}_gbps"])


@pytest.mark.parametrize("op", storage_rules.OPS)
def test_slowest_node(
    found: storage_rules.PathResult, figures: dict[str, Figure], storage_path: str, op: str, check: Checker
) -> None:
    fig = figures[f"storage.{storage_path}.{op}_gbps_min"]
    if not fig.skip and found["checkpoint"] is not None:
        check.measurements(f"{op}_per_node", storage_rules.node_rates(found["checkpoint"]["ranks"], op))
    check(fig)


@pytest.mark.parametrize("op", storage_rules.OPS)
def test_node_below_median(figures: dict[str, Figure], storage_path: str, op: str, check: Checker) -> None:
    check(figures[f"storage.{storage_path}.{op}_below_median"])


def test_checkpoint_time(figures: dict[str, Figure], storage_path: str, check: Checker) -> None:
    """Seconds to save the checkpoint of every rank (what a training job waits for)."""
    check(figures[f"storage.{storage_path}.checkpoint_s"])


def test_restore_time(figures: dict[str, Figure], storage_path: str, check: Checker) -> None:
    """Seconds to load it back on every rank (what a restart waits for)."""
    check(figures[f"storage.{storage_path}.restore_s"])


def test_nothing_left_behind(figures: dict[str, Figure], storage_path: str, check: Checker) -> None:
    check(figures[f"storage.{storage_path}.left_behind"])


def test_probe_time(cluster: ClusterRun, storage: storage_rules.StorageResult, check: Checker) -> None:
    wall_s = probe_wall_s(cluster, "storage")
    check("storage.wall_s", wall_s, "s", "start to result, imports included where it started its job or the worker")
