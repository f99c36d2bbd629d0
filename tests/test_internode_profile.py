"""The internode section of a profile: strict keys, and threshold names checked against its own lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.families.internode import Internode
from acceptance.profile import loader as profile

BASE = """
name: t
topology: {nodes: 2, gpus_per_node: 8}
collectives:
  sizes: [1M]
internode: {ops: [all_reduce], sizes: [256M, 1G], ring: true}
"""


def write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(BASE + extra)
    return path


def test_defaults_compare_all_reduce_at_large_sizes_without_variants() -> None:
    assert Internode() == Internode(ops=["all_reduce"], sizes=["256M", "1G"], ring=False, one_gpu_per_node=False)


@pytest.mark.parametrize(
    "metric",
    [
        "internode.all.all_reduce.busbw_gbps@1G",
        "internode.intranode.all_reduce.busbw_gbps@256M",
        "internode.one_gpu_per_node.all_reduce.wrong@1G",
        "internode.ring.all_reduce.busbw_gbps@1024M",
        "internode.all_reduce.efficiency@1G",
    ],
)
def test_internode_thresholds_are_known_metrics(tmp_path: Path, metric: str) -> None:
    loaded = profile.load(str(write(tmp_path, f"thresholds:\n  {metric}: {{min: 1}}\n")))
    assert len(loaded.model.thresholds) == 1


@pytest.mark.parametrize(
    ("metric", "why"),
    [
        ("internode.all.all_reduce.busbw_gbps@1M", "size '1M' is not in this profile's list"),
        ("internode.all.all_gather.busbw_gbps@1G", "'all_gather' is not in this profile's list"),
        ("internode.tree.all_reduce.busbw_gbps@1G", "no probe measures a metric of this name"),
        ("internode.all_reduce.efficiency@4G", "size '4G' is not in this profile's list"),
    ],
)
def test_internode_thresholds_outside_the_section_are_rejected(tmp_path: Path, metric: str, why: str) -> None:
    with pytest.raises(profile.ProfileError, match=why):
        profile.load(str(write(tmp_path, f"thresholds:\n  {metric}: {{min: 1}}\n")))


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ("internode.rings=true", "unknown key"),
        ("internode.ring=yes please", "valid boolean"),
        ("internode.sizes=[1X]", "1X"),
        ("internode.ops=[all_reduce, gossip]", "gossip"),
        ("timeouts.rendezvous=0", "greater than 0"),
        ("topology.rdzv_port=65535", "less than 65535"),
    ],
)
def test_bad_internode_and_multinode_keys_are_rejected(tmp_path: Path, override: str, why: str) -> None:
    with pytest.raises(profile.ProfileError, match=why):
        profile.load(str(write(tmp_path, "")), [override])


def test_srun_launcher_and_its_arguments(tmp_path: Path) -> None:
    overrides = ["topology.launcher=srun", "topology.srun_args=[--gpus-per-node=8]"]
    loaded = profile.load(str(write(tmp_path, "")), overrides)
    assert loaded.model.topology.launcher == "srun"
    assert loaded.model.topology.srun_args == ["--gpus-per-node=8"]
    with pytest.raises(profile.ProfileError, match="srun"):
        profile.load(str(write(tmp_path, "")), ["topology.launcher=mpirun"])


def test_the_mildest_slowdown_named_is_never_a_larger_one_than_the_bound() -> None:
    assert Internode(slow_pair_fraction=0.05, mild_pair_fraction=0.05).mild_pair_fraction == 0.05
    with pytest.raises(ValueError, match=r"mild_pair_fraction 0\.3 is below slow_pair_fraction 0\.5"):
        Internode(slow_pair_fraction=0.5, mild_pair_fraction=0.3)
