"""The storage rules on the shapes the probe gathers: mounts from /proc/self/mountinfo, the node that does
not see node 0's file or has another mount, the slow node, and the profile's storage section."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict, cast

import pytest
from typing_extensions import Unpack

from acceptance.families import storage as rules
from acceptance.families.storage import Checkpoint, Marker, MarkerRead, NodeView, ShardRow
from acceptance.profile import loader as profiles
from acceptance.profile.metrics import module_of

# lines in the kernel's format (proc(5)), with optional fields, a shadowed mount, an escaped space
MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
40 27 0:45 / /mnt/shared rw,relatime shared:12 - nfs4 10.0.0.5:/export/ckpt rw,vers=4.2
41 27 0:46 / /mnt/shared2 rw,relatime - lustre 10.0.0.9@o2ib:/fs1 rw
42 27 0:47 / /mnt/my\\040disk rw - xfs /dev/nvme1n1 rw
43 27 259:3 / /scratch rw - ext4 /dev/nvme0n1 rw
44 43 259:4 / /scratch/inner rw - xfs /dev/nvme2n1 rw
45 27 259:5 / /scratch rw - xfs /dev/md0 rw
"""


class NodeExtra(TypedDict, total=False):
    """The fields of a node's view a test sets or overrides."""

    problem: str | None
    marker: MarkerRead
    fstype: str | None
    source: str | None
    mount_point: str | None


def node(rank: int, **extra: Unpack[NodeExtra]) -> NodeView:
    view: NodeView = {"host": f"gpu-{rank}", "node_rank": rank, "path": "/mnt/shared", "problem": None}
    view.update(
        {"fstype": "nfs4", "source": "10.0.0.5:/export/ckpt", "mount_point": "/mnt/shared", "device": f"0:{45 + rank}"}
    )
    return {**view, **extra}


def rank_row(rank: int, node_rank: int, write_s: float, read_s: float = 1.0) -> ShardRow:
    # deliberately incomplete: only the fields the rates and the rank lines read
    return cast(
        ShardRow,
        {
            "rank": rank,
            "node_rank": node_rank,
            "host": f"gpu-{node_rank}",
            "bytes": 2 * 10**9,
            "write_s": write_s,
            "read_s": read_s,
        },
    )


def test_mountinfo_fields_and_escapes() -> None:
    mounts = rules.parse_mountinfo(MOUNTINFO)
    assert [m.mount_point for m in mounts][:4] == ["/", "/mnt/shared", "/mnt/shared2", "/mnt/my disk"]
    nfs = mounts[1]
    assert (nfs.fstype, nfs.source, nfs.device) == ("nfs4", "10.0.0.5:/export/ckpt", "0:45")


@pytest.mark.parametrize(
    ("path", "device", "mount_point", "fstype"),
    [
        ("/mnt/shared/run", "0:45", "/mnt/shared", "nfs4"),
        ("/mnt/shared2", "0:46", "/mnt/shared2", "lustre"),  # a sibling with a longer name is not a parent
        ("/mnt/sharedx", "254:0", "/", "ext4"),
        ("/mnt/my disk/x", "0:47", "/mnt/my disk", "xfs"),
        ("/tmp", "254:0", "/", "ext4"),
        ("/scratch/inner/a", "259:4", "/scratch/inner", "xfs"),
        # /dev/md0 was mounted over /scratch after /scratch/inner: the path's own device decides
        ("/scratch/inner/a", "259:5", "/scratch", "xfs"),
        ("/scratch/a", "9:9", "/scratch", "xfs"),  # device unknown: of equal mount points the last one
    ],
)
def test_the_mount_holding_a_path(path: str, device: str, mount_point: str, fstype: str) -> None:
    found = rules.mount_of(path, device, rules.parse_mountinfo(MOUNTINFO))
    assert found is not None and (found.mount_point, found.fstype) == (mount_point, fstype)


def test_stale_run_folders_are_those_past_their_deadline() -> None:
    name = rules.run_dir_name(1000.7, "ab12cd34")
    assert name == "run-1000-ab12cd34"
    assert rules.is_stale(name, now=1001) and not rules.is_stale(name, now=999)
    assert not rules.is_stale("run-1000-notours!", now=5000) and not rules.is_stale("checkpoints", now=5000)


def test_an_unusable_path_names_the_node_and_the_path() -> None:
    views = [node(0), node(1, problem="does not exist (ENOENT)")]
    assert rules.unusable(views) == ["gpu-1 (node 1): /mnt/shared: does not exist (ENOENT)"]


def test_space_problem_says_what_is_needed_and_what_is_free() -> None:
    assert rules.space_problem(2**30, 2**30) is None
    assert rules.space_problem(2**20, 2**31) == "full: the checkpoint needs 2 GiB free, 0.000977 GiB is free"


MARKER: Marker = {"file": "/mnt/shared/.cluster-acceptance/run-1-aa/from-node0.bin", "size": 1024, "sha256": "ab" * 32}


def test_every_node_reading_node0s_file_is_shared() -> None:
    same: MarkerRead = {"size": 1024, "sha256": "ab" * 32}
    assert rules.not_shared([node(0, marker=same), node(1, marker=same)], MARKER) == []


def test_a_node_that_cannot_read_node0s_file_is_named() -> None:
    views = [node(0, marker={"size": 1024, "sha256": "ab" * 32}), node(1, marker={"error": "does not exist (ENOENT)"})]
    (line,) = rules.not_shared(views, MARKER)
    assert line.startswith("gpu-1 (node 1): /mnt/shared: not the filesystem node 0 sees: cannot read node 0's file")
    assert line.endswith("from-node0.bin: does not exist (ENOENT)")


def test_a_node_reading_other_bytes_is_named() -> None:
    views = [node(0, marker={"size": 1024, "sha256": "ab" * 32}), node(1, marker={"size": 1024, "sha256": "cd" * 32})]
    (line,) = rules.not_shared(views, MARKER)
    assert "gpu-1 (node 1)" in line and "sha256 cdcdcdcdcdcd" in line and "node 0 wrote 1024 bytes" in line


def test_node0_unable_to_write_its_file_is_named() -> None:
    (line,) = rules.not_shared([node(0), node(1)], {"file": MARKER["file"], "error": "No space left on device"})
    assert line.startswith("gpu-0 (node 0): /mnt/shared: could not write ") and line.endswith("No space left on device")


def test_another_mount_is_named_but_not_another_device_number() -> None:
    views = [node(0), node(1), node(2, fstype="ext4", source="/dev/nvme0n1", mount_point="/")]
    (line,) = rules.mount_mismatch(views)  # node 1's device 0:46 differs from node 0's 0:45: not a finding
    assert line.startswith("gpu-2 (node 2): /mnt/shared mounted at /: ")
    assert "fstype 'ext4', node 0 has 'nfs4'" in line and "source '/dev/nvme0n1'" in line


def test_per_node_rate_is_the_nodes_bytes_over_its_slowest_rank() -> None:
    rows = [rank_row(0, 0, 1.0), rank_row(1, 0, 2.0), rank_row(2, 1, 1.0), rank_row(3, 1, 1.0)]
    rates = rules.node_rates(rows, "write")
    assert [(r["host"], r["write_gbps"]) for r in rates] == [("gpu-0", 2.0), ("gpu-1", 4.0)]


def test_the_slow_node_is_named_against_the_median() -> None:
    rows = [rank_row(0, 0, 1.0), rank_row(1, 1, 1.0), rank_row(2, 2, 4.0)]
    value, detail = rules.slowest_node(rows, "write")
    assert value == 0.5 and detail == "gpu-2 (node 2) write 0.5 GB/s, 75% under the median 2"
    fraction, lines = rules.below_median(rows, "write")
    assert fraction == 0.75 and lines == detail


def test_the_slowest_node_when_it_equals_the_median() -> None:
    rows = [rank_row(0, 0, 1.0), rank_row(1, 1, 2.0), rank_row(2, 2, 2.0)]  # 2, 1, 1 GB/s: median 1
    value, detail = rules.slowest_node(rows, "write")
    assert value == 1.0 and detail.startswith("gpu-1 (node 1)")
    assert rules.below_median(rows, "write")[0] == 0


def test_failed_and_differing_ranks_are_named() -> None:
    rows: list[ShardRow] = [
        {**rank_row(0, 0, 1.0), "error": "OSError: [Errno 28] No space left on device: '/x/__0_0.distcp'"},
        {**rank_row(1, 0, 1.0), "error": None, "wrong": 2, "tensors": 4, "read_from": 3},
        {**rank_row(2, 1, 1.0), "error": None, "wrong": 0},
    ]
    assert rules.failed_ranks(rows) == [
        "gpu-0 (node 0) rank 0: OSError: [Errno 28] No space left on device: '/x/__0_0.distcp'",
        "gpu-0 (node 0) rank 1: 2 of 4 tensors of rank 3's shard read back differ from what was written",
    ]


def test_aggregate_rate_is_all_bytes_over_the_whole_save() -> None:
    # deliberately incomplete: empty rank rows and no "failed"; the aggregate reads only the totals
    done = cast(
        Checkpoint, {"bytes": 8 * 10**9, "save_s": 4.0, "load_s": 2.0, "ranks": [{}] * 4, "tensors_per_rank": 32}
    )
    assert rules.aggregate(done, "write")[0] == 2.0 and rules.aggregate(done, "read")[0] == 4.0
    assert "by 4 ranks in 4 s" in rules.aggregate(done, "write")[1]


def profile_error(tmp_path: Path, storage: str, thresholds: str = "{}") -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nstorage:\n{storage}\nthresholds: {thresholds}\n")
    with pytest.raises(profiles.ProfileError) as info:
        profiles.load(str(path))
    return str(info.value)


def test_a_relative_path_is_refused_with_its_line(tmp_path: Path) -> None:
    message = profile_error(tmp_path, "  paths:\n    shared: {path: mnt/shared, shared: true}")
    assert "p.yaml:4: storage.paths.shared.path: expected an absolute path" in message


def test_an_unknown_path_key_is_refused(tmp_path: Path) -> None:
    message = profile_error(tmp_path, "  paths:\n    shared: {path: /mnt/shared, shard: true}")
    assert "p.yaml:4: storage.paths.shared.shard: unknown key" in message


def test_a_bad_checkpoint_size_is_refused(tmp_path: Path) -> None:
    assert "storage.checkpoint_size: expected a size like" in profile_error(tmp_path, "  checkpoint_size: 1Q")


def test_thresholds_must_name_a_path_of_the_profile(tmp_path: Path) -> None:
    message = profile_error(
        tmp_path, "  paths: {shared: {path: /mnt/shared}}", "{storage.scratch.write_gbps: {min: 1}}"
    )
    assert "storage_path 'scratch' is not in this profile's list ['shared']" in message


def test_storage_defaults_and_names(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\ntimeouts: {storage: 90}\nthresholds: {storage.tmp.write_gbps_min: {min: 1}}\n")
    profile = profiles.load(str(path))
    assert profile.resolved["storage"] == {"paths": {"tmp": {"path": None, "shared": False}}, "checkpoint_size": "256M"}
    assert profile.model.timeouts.for_probe("storage") == 90
    assert module_of("storage.tmp.write_gbps_min") == module_of("storage.wall_s") == "test_storage"


def test_why_no_checkpoint_points_at_the_test_naming_the_nodes() -> None:
    same: MarkerRead = {"size": 1024, "sha256": "ab" * 32}
    other: MarkerRead = {"error": "does not exist (ENOENT)"}
    assert rules.not_run([node(0), node(1, problem="is not a folder")], None) == (
        "the path is unusable on 1 of 2 nodes (see test_path_usable)"
    )
    assert rules.not_run([node(0, marker=same), node(1, marker=other)], MARKER) == (
        "not one filesystem: 1 of 2 nodes differ (see test_same_files_on_every_node)"
    )
    assert rules.not_run([node(0, marker=same), node(1, marker=same)], MARKER) is None


def test_a_read_from_the_page_cache_is_said() -> None:
    # deliberately incomplete: a row with only what names the node and why the cache was kept, an empty row
    rows = cast(
        list[ShardRow],
        [{"host": "gpu-0", "node_rank": 0, "cache_kept": "/x/__0_0.distcp: Invalid argument (EINVAL)"}, {}],
    )
    # deliberately incomplete: no "failed"; the aggregate reads only the totals and the rows
    done = cast(Checkpoint, {"bytes": 10**9, "save_s": 1.0, "load_s": 1.0, "ranks": rows, "tensors_per_rank": 16})
    assert "memory's: gpu-0 (node 0): /x/__0_0.distcp: Invalid argument (EINVAL)" in rules.aggregate(done, "read")[1]
    assert "memory" not in rules.aggregate(done, "write")[1]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TMPDIR": "/nonexistent/tmp"}, ("/nonexistent/tmp", "$TMPDIR")),
        ({"TMPDIR": "relative"}, ("relative", "$TMPDIR")),
        ({"TMPDIR": ""}, ("/tmp", "/tmp default")),
        ({}, ("/tmp", "/tmp default")),
    ],
)
def test_the_temporary_folder_is_the_one_named(env: dict[str, str], named: tuple[str, str]) -> None:
    """$TMPDIR as named, even where it is missing or read-only (tempfile would fall back to /tmp and the
    probe would measure a folder the node's jobs never use); /tmp only where nothing names another."""
    assert rules.temp_folder(env) == named


def test_an_unusable_temporary_folder_says_where_it_came_from() -> None:
    view = cast(NodeView, {"host": "h", "node_rank": 0, "path": "/x", "path_from": "$TMPDIR", "problem": "gone"})
    assert rules.unusable([view]) == ["h (node 0): /x (from $TMPDIR): gone"]
