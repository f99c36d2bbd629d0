"""Storage's rules: one path's result in, its figures out; a figure that waits on what failed skips, naming
the test that says why."""

from __future__ import annotations

from acceptance.families import storage
from acceptance.families.storage import Checkpoint, NodeView, PathResult, ShardRow


def _view(host: str, node: int) -> NodeView:
    return {"host": host, "node_rank": node, "path": "/ckpt", "fstype": "nfs", "source": "srv:/ckpt",
            "mount_point": "/ckpt", "free_bytes": (node + 1) << 30, "marker": {"size": 3, "sha256": "abc"}}  # fmt: skip


def _row(host: str, node: int, write_s: float) -> ShardRow:
    return {"host": host, "node_rank": node, "rank": node, "bytes": 10**9, "tensors": 4, "save_s": write_s,
            "write_s": write_s, "error": None, "files": [], "load_s": 1.0, "read_s": 1.0, "read_from": node,
            "wrong": 0}  # fmt: skip


def _path(checkpoint: Checkpoint | None, shared: bool = True) -> PathResult:
    return {"path": "/ckpt", "shared": shared, "marker": {"file": "m", "size": 3, "sha256": "abc"},
            "checkpoint": checkpoint, "nodes": [_view("a", 0), _view("b", 1)], "skipped": "off",
            "left_behind": []}  # fmt: skip


def _checkpoint(failed: list[str]) -> Checkpoint:
    rows = [_row("a", 0, 1.0), _row("b", 1, 4.0)]
    return {"ranks": rows, "bytes": 2 * 10**9, "tensors_per_rank": 4, "save_s": 4.0, "load_s": 1.0, "failed": failed}


def test_the_slow_node_is_named_under_the_median() -> None:
    figures = storage.figures("shared", _path(_checkpoint([])))
    slowest = figures["storage.shared.write_gbps_min"]
    assert (slowest.value, slowest.skip) == (0.25, None)
    assert slowest.detail.startswith("b (node 1) write 0.25 GB/s")
    assert figures["storage.shared.write_gbps"].value == 0.5
    assert figures["storage.shared.free_gib_min"].value == 1.0
    assert figures["storage.shared.nodes_not_shared"].value == 0


def test_a_checkpoint_that_failed_counts_its_ranks_and_its_speeds_skip() -> None:
    figures = storage.figures("shared", _path(_checkpoint(["b (node 1) rank 1: disk full"])))
    bad = figures["storage.shared.checkpoint_bad_ranks"]
    assert (bad.value, bad.detail) == (1, "b (node 1) rank 1: disk full")
    for metric in ("write_gbps", "read_gbps_min", "read_below_median", "checkpoint_s", "restore_s"):
        assert figures[f"storage.shared.{metric}"].skip == "checkpoint not completed (see test_checkpoint_intact)"


def test_a_path_that_need_not_be_shared_skips_the_shared_figures() -> None:
    figures = storage.figures("scratch", _path(None, shared=False))
    want = "not required: storage.paths.scratch.shared is false (each node may have its own)"
    assert figures["storage.scratch.mount_mismatch"].skip == want
    assert figures["storage.scratch.checkpoint_s"].skip == "no checkpoint written: off"
