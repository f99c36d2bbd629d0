"""Where a node stands: Slurm node lists, each environment source, command-line overrides, bad input."""

from __future__ import annotations

import pytest

from acceptance.run.placement import DEFAULT_PORT, Placement, TopologyError, expand_nodelist, resolve, split_head


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu-01", ["gpu-01"]),
        ("gpu-[01-04,07]", ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07"]),
        ("gpu-[8-11]", ["gpu-8", "gpu-9", "gpu-10", "gpu-11"]),
        ("gpu-[08-11]", ["gpu-08", "gpu-09", "gpu-10", "gpu-11"]),
        ("a[1-2]-b[3-4]", ["a1-b3", "a1-b4", "a2-b3", "a2-b4"]),
        ("login1,gpu[1-2],cpu-[009-010]", ["login1", "gpu1", "gpu2", "cpu-009", "cpu-010"]),
        ("n[3],m", ["n3", "m"]),
        ("rack[1-2]node[1,3]", ["rack1node1", "rack1node3", "rack2node1", "rack2node3"]),
        ("127.0.0.[1-2]", ["127.0.0.1", "127.0.0.2"]),
        ("  gpu-[1-2] ", ["gpu-1", "gpu-2"]),
    ],
)
def test_expand_nodelist(text: str, hosts: list[str]) -> None:
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("gpu-[01-04", "unbalanced"),
        ("gpu-01-04]", "unbalanced"),
        ("gpu-[[1-2]]", "nested"),
        ("gpu-[4-1]", "runs backwards"),
        ("gpu-[a-b]", "is not N or N-M"),
        ("gpu-[]", "is not N or N-M"),
        ("gpu-[1-]", "is not N or N-M"),
        ("gpu-1,,gpu-2", "empty entry"),
        ("", "empty entry"),
    ],
)
def test_expand_nodelist_rejects(text: str, why: str) -> None:
    with pytest.raises(TopologyError, match=why):
        expand_nodelist(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node1", ("node1", 7)),
        ("node1:29500", ("node1", 29500)),
        ("10.0.0.1:1", ("10.0.0.1", 1)),
        ("[fe80::1]:29500", ("fe80::1", 29500)),
        ("[fe80::1]", ("fe80::1", 7)),
        ("fe80::1", ("fe80::1", 7)),
    ],
)
def test_split_head(text: str, expected: tuple[str, int]) -> None:
    assert split_head(text, 7) == expected


@pytest.mark.parametrize("text", ["node1:http", "node1:0", "node1:70000", "node1:", "[fe80::1", "[fe80::1]x", ""])
def test_split_head_rejects(text: str) -> None:
    with pytest.raises(TopologyError):
        split_head(text, 7)


SLURM = {"SLURM_NNODES": "4", "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "gpu-[07-09,12]"}


def test_slurm_head_is_the_first_node() -> None:
    assert resolve(SLURM, 1) == Placement(4, 2, "gpu-07", DEFAULT_PORT, "slurm")


def test_slurm_step_list_wins_over_the_job_list() -> None:
    env = {**SLURM, "SLURM_STEP_NODELIST": "gpu-[08-09,12],b1"}
    assert resolve(env, 1).head == "gpu-08"


def test_slurm_master_addr_and_port_override_the_list() -> None:
    env = {**SLURM, "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "30000"}
    assert resolve(env, 1) == Placement(4, 2, "10.1.2.3", 30000, "slurm")


def test_slurm_multi_node_without_a_head_is_an_error() -> None:
    with pytest.raises(TopologyError, match="SLURM_JOB_NODELIST nor MASTER_ADDR"):
        resolve({"SLURM_NNODES": "2", "SLURM_NODEID": "0"}, 1)


def test_slurm_without_nodeid_is_not_a_node_unless_it_is_the_srun_controller() -> None:
    env = {"SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "g[1-3]"}
    assert resolve(env, 1).source == "profile (single node)"
    assert resolve(env, 1, launcher="srun") == Placement(3, 0, "g1", DEFAULT_PORT, "slurm")


def test_slurm_comes_before_kubernetes_and_plain_variables() -> None:
    env = {**SLURM, "JOB_COMPLETION_INDEX": "1", "CLUSTER_HEAD": "x", "NNODES": "9", "NODE_RANK": "8"}
    assert resolve(env, 1).source == "slurm"


def test_kubernetes_indexed_job() -> None:
    env = {"JOB_COMPLETION_INDEX": "3", "NNODES": "4", "CLUSTER_HEAD": "acc-0.acc", "MASTER_PORT": "29500"}
    assert resolve(env, 1) == Placement(4, 3, "acc-0.acc", 29500, "kubernetes indexed job")


def test_kubernetes_node_count_defaults_to_the_profile_and_head_may_carry_a_port() -> None:
    env = {"JOB_COMPLETION_INDEX": "1", "CLUSTER_HEAD": "acc-0.acc:31000"}
    assert resolve(env, 2) == Placement(2, 1, "acc-0.acc", 31000, "kubernetes indexed job")


def test_kubernetes_without_a_head_is_an_error() -> None:
    with pytest.raises(TopologyError, match="CLUSTER_HEAD"):
        resolve({"JOB_COMPLETION_INDEX": "0", "NNODES": "2"}, 1)


def test_plain_environment() -> None:
    env = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "head", "MASTER_PORT": "29999"}
    assert resolve(env, 1) == Placement(2, 1, "head", 29999, "environment")


def test_plain_environment_defaults() -> None:
    assert resolve({"NODE_RANK": "1"}, 3) == Placement(3, 1, "127.0.0.1", DEFAULT_PORT, "environment")


def test_profile_fallback_single_node() -> None:
    assert resolve({}, 1, default_port=29411) == Placement(1, 0, "127.0.0.1", 29411, "profile (single node)")


def test_profile_with_several_nodes_needs_a_source() -> None:
    with pytest.raises(TopologyError, match="expects 2 nodes but nothing says where"):
        resolve({}, 2)


def test_command_line_overrides_single_fields_of_the_environment() -> None:
    placed = resolve(SLURM, 1, head="other:1234")
    assert placed == Placement(4, 2, "other", 1234, "command line over slurm")
    assert resolve(SLURM, 1, node_rank=0).node_rank == 0


def test_command_line_alone() -> None:
    assert resolve({}, 1, nodes=2, node_rank=1, head="h") == Placement(2, 1, "h", DEFAULT_PORT, "command line")


def test_the_same_fields_from_the_ini_file_name_it() -> None:
    placed = resolve(SLURM, 1, head="other", given_by="ini key cluster_head")
    assert placed.source == "ini key cluster_head over slurm"


@pytest.mark.parametrize(
    ("env", "options", "why"),
    [
        ({"NNODES": "2", "NODE_RANK": "2"}, {}, "outside 0..1"),
        ({"SLURM_NNODES": "two", "SLURM_NODEID": "0"}, {}, "SLURM_NNODES='two': expected an integer"),
        ({"NNODES": "2", "NODE_RANK": "0", "MASTER_PORT": "x"}, {}, "not a TCP port"),
        ({}, {"nodes": 0}, "at least 1"),
        ({}, {"nodes": 2, "node_rank": -1}, "outside 0..1"),
    ],
)
def test_bad_placements(env: dict[str, str], options: dict[str, int], why: str) -> None:
    with pytest.raises(TopologyError, match=why):
        resolve(env, 1, **options)  # type: ignore[arg-type]


def test_endpoint_brackets_ipv6() -> None:
    assert Placement(2, 0, "fe80::1", 5, "x").endpoint == "[fe80::1]:5"
    assert Placement(2, 0, "h", 5, "x").endpoint == "h:5"
