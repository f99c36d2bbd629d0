"""The storage family on two "nodes" on loopback (two pytest processes, see test_multinode): their temporary
folder is one folder, so it is shared; a node given another folder is named by both nodes, and the same
folders pass as node-local scratch (one checkpoint per node)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from tests.harness import free_port
from tests.test_multinode import Node, run_nodes

SUITE = [
    "tests_cluster/test_storage.py",
    "--cluster-set",
    "topology.ranks_per_node=1",
    "--cluster-set",
    "storage.checkpoint_size=4M",
]


pytestmark = pytest.mark.e2e  # two pytest processes as two nodes, each starting torchrun


def two_nodes(tmp_path: Path, folders: list[Path], extra: tuple[str, ...] = ()) -> list[Node]:
    """Two nodes whose temporary folder (the local-cpu profile's storage path) is ``folders[rank]``."""
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    for folder in folders:
        folder.mkdir(exist_ok=True)
    envs = [{**common, "NODE_RANK": str(r), "TMPDIR": str(folder)} for r, folder in enumerate(folders)]
    return run_nodes(tmp_path / "evidence", envs, suite=[*SUITE, *extra])


def by_name(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in data["tests"] if t["nodeid"].endswith(name))


def test_one_folder_for_both_nodes_is_shared(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    nodes = two_nodes(tmp_path, [shared, shared])
    for node in nodes:
        assert node.returncode == 0, node.output[-6000:]
        assert node.evidence()["verdict"] == "PARTIAL" and node.evidence()["errors"] == []  # storage alone
    data = nodes[0].evidence()
    usable = by_name(data, "test_path_usable[tmp]")["measurements"]["nodes"]
    assert [(v["node_rank"], v["path"], v["marker"]["size"]) for v in usable] == [
        (r, str(shared), 2**20) for r in (0, 1)
    ]
    ranks = by_name(data, "test_checkpoint_intact[tmp]")["measurements"]["ranks"]
    # each node read back the shard the other node wrote
    assert [(r["rank"], r["read_from"], r["wrong"]) for r in ranks] == [(0, 1, 0), (1, 0, 0)]
    # each rank names the files it wrote, which it removed itself; none of them is another rank's
    assert all(r["files"] and all(f.startswith("checkpoint/") for f in r["files"]) for r in ranks), ranks
    assert not set(ranks[0]["files"]) & set(ranks[1]["files"])
    assert list(shared.iterdir()) == []


def test_a_node_with_another_folder_is_named(tmp_path: Path) -> None:
    mine, other = tmp_path / "node0-tmp", tmp_path / "node1-tmp"
    # the same folders once more under another name, as node-local scratch: no finding there
    nodes = two_nodes(tmp_path, [mine, other], ("--cluster-set", "storage.paths.scratch={path: null, shared: false}"))
    for node in nodes:
        assert node.returncode == 1, node.output[-6000:]
        data = node.evidence()
        assert data["verdict"] == "FAIL"
        failed = {t["nodeid"].split("::")[-1]: t["message"] for t in data["tests"] if t["outcome"] == "failed"}
        assert list(failed) == ["test_same_files_on_every_node[tmp]"], failed
        (line,) = failed["test_same_files_on_every_node[tmp]"].splitlines()[1:]
        # torchrun's rendezvous numbers nodes of one host name by process id: either folder may be node 0's
        first, second = (mine, other) if f": {other}: " in line else (other, mine)
        where = f"{socket.gethostname()} (node 1): {second}"
        assert line.startswith(f"{where}: not the filesystem node 0 sees: cannot read node 0's file {first}/"), line
        assert line.endswith("from-node0.bin: does not exist (ENOENT)")
        ranks = by_name(data, "test_checkpoint_intact[scratch]")["measurements"]["ranks"]
        assert [(r["rank"], r["read_from"], r["wrong"]) for r in ranks] == [(0, 0, 0), (1, 1, 0)]
    assert list(mine.iterdir()) == [] and list(other.iterdir()) == []
