"""Every way a profile can be wrong, and what the error says: the file, the key and what was expected."""

from __future__ import annotations

import re
from argparse import Namespace
from pathlib import Path

import pytest

from acceptance.cli import bench_train
from acceptance.families.collectives import COLLECTIVES
from acceptance.families.connectivity import CONNECTIVITY
from acceptance.profile import loader as profiles
from acceptance.profile.judge import Judge
from acceptance.profile.loader import ProfileError, load
from acceptance.run.launcher import ProbeError

BASE = "topology: {nodes: 1, ranks_per_node: 2, device: cpu, backend: gloo}\n"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / "thresholds" / f"{name}.yaml"
    path.write_text(text)
    return path


def error_of(name: str, overrides: list[str] | None = None) -> str:
    with pytest.raises(ProfileError) as info:
        load(name, overrides)
    return str(info.value)


def test_loads_by_name_and_by_path(here: Path) -> None:
    path = write(here, "mine", f"name: mine\n{BASE}collectives: {{sizes: [1024K, 8M]}}\n")
    by_name, by_path = load("mine"), load(str(path))
    assert by_name.sha256 == by_path.sha256
    assert COLLECTIVES.section_of(by_name.model).sizes == ["1M", "8M"]
    assert re.fullmatch(r"[0-9a-f]{64}", by_name.sha256)


def test_shipped_profile_loads() -> None:
    profile = load("local-cpu")
    assert profile.model.topology.backend == "gloo"
    assert profile.path.name == "local-cpu.yaml"


def test_unknown_key_lists_the_known_ones(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}collectives:\n  sizes: [1M]\n  itres: 3\n")
    assert error_of("p") == (
        "invalid profile:\n  thresholds/p.yaml:5: collectives.itres: unknown key "
        "(expected one of: ops, sizes, dtype, warmup_iters, iters, timing, min_timed_s, check_data, spread_iters, "
        "spread_sizes, spread_ratio, spread_floor_us, spread_min_share)"
    )


def test_unknown_key_inside_a_named_map_lists_the_known_ones(here: Path) -> None:
    """A key of a section the profile names itself (a storage path, a DeepSpeed config) and of an optional
    section: the error still lists what that section may hold."""
    storage = "storage:\n  paths:\n    shared: {path: /tmp, shard: true}\n"
    write(here, "p", f"name: p\n{BASE}{storage}cost: {{usd_per_gpu_hour: 2, sorce: x}}\n")
    assert error_of("p") == (
        "invalid profile:\n"
        "  thresholds/p.yaml:5: storage.paths.shared.shard: unknown key (expected one of: path, shared)\n"
        "  thresholds/p.yaml:6: cost.sorce: unknown key (expected one of: usd_per_gpu_hour, source)"
    )


def test_unknown_top_level_key(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}colectives: {{}}\n")
    message = error_of("p")
    assert "thresholds/p.yaml:3: colectives: unknown key" in message
    shown = "(expected one of: name, description, extends, tier, tiers, topology, env, secret_names, timeouts,"
    shown += " thresholds, cost, baseline,"
    assert f"{shown} connectivity" in message


def test_wrong_type(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}timeouts: {{default: soon}}\n")
    assert error_of("p") == (
        "invalid profile:\n  thresholds/p.yaml:3: timeouts.default: Input should be a valid number (got 'soon')"
    )


def test_strings_are_not_numbers(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}collectives: {{iters: '20'}}\n")
    assert "collectives.iters: Input should be a valid integer (got '20')" in error_of("p")


def test_bad_size(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}collectives:\n  sizes:\n    - 1M\n    - 1Q\n")
    assert error_of("p") == (
        "invalid profile:\n  thresholds/p.yaml:6: collectives.sizes.1: "
        "expected a size like 512, 1K, 16M or 4G (binary units), got '1Q'"
    )


def test_bad_literal(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}collectives: {{ops: [all_reduce, allreduce]}}\n")
    message = error_of("p")
    assert "thresholds/p.yaml:3: collectives.ops.1: got 'allreduce', input should be 'all_reduce'" in message


def test_inconsistent_topology(here: Path) -> None:
    write(here, "p", "name: p\ntopology: {device: cpu, backend: nccl}\n")
    assert "topology: device cpu needs backend gloo" in error_of("p")


def test_yaml_syntax_error_has_the_line(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}collectives:\n  sizes: [1M\n  ops: [all_reduce]\n")
    message = error_of("p")
    assert message.startswith("thresholds/p.yaml:5: YAML syntax error:"), message


def test_top_level_must_be_a_mapping(here: Path) -> None:
    write(here, "p", "- just\n- a list\n")
    assert error_of("p") == "thresholds/p.yaml: expected a mapping of profile keys at the top level, got list"


def test_extends_merges_deeply(here: Path) -> None:
    write(here, "parent", f"name: parent\n{BASE}collectives: {{sizes: [1M], iters: 7}}\nenv: {{A: '1'}}\n")
    write(here, "child", "name: child\nextends: parent\ncollectives: {sizes: [8M]}\nenv: {B: '2'}\n")
    profile = load("child")
    collectives = COLLECTIVES.section_of(profile.model)
    assert collectives.sizes == ["8M"]
    assert collectives.iters == 7
    assert profile.model.env == {"A": "1", "B": "2"}
    assert [p.name for p in profile.chain] == ["child.yaml", "parent.yaml"]


def test_extends_cycle(here: Path) -> None:
    write(here, "a", "name: a\nextends: b\n")
    write(here, "b", "name: b\nextends: a\n")
    message = error_of("a")
    assert message.startswith("thresholds/a.yaml: extends: cycle ")
    assert message.endswith(f"{here}/thresholds/a.yaml -> {here}/thresholds/b.yaml -> {here}/thresholds/a.yaml")


def test_extends_missing_parent(here: Path) -> None:
    write(here, "a", "name: a\nextends: nowhere\n")
    message = error_of("a")
    assert message.startswith("thresholds/a.yaml: extends: unknown profile 'nowhere'")
    assert "Profiles: a, " in message and "local-cpu" in message


def test_extends_must_be_a_name(here: Path) -> None:
    write(here, "a", "name: a\nextends: [b]\n")
    assert error_of("a") == "thresholds/a.yaml: extends: expected a profile name or path, got ['b']"


def test_unknown_profile_lists_the_available_ones(here: Path) -> None:
    write(here, "mine", f"name: mine\n{BASE}")
    message = error_of("nebius-h1OO")
    assert message.startswith("unknown profile 'nebius-h1OO': no such file, and no profile of that name. Profiles: ")
    listed = message.rpartition("Profiles: ")[2].split(", ")
    assert "mine" in listed and "local-cpu" in listed
    assert listed == sorted(listed)
    assert set(profiles.available()) == set(listed)


def test_threshold_naming_no_metric(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}thresholds:\n  collectives.all_reduce.bandwidth@1M: {{min: 1}}\n")
    message = error_of("p")
    assert "thresholds/p.yaml:4: thresholds.collectives.all_reduce.bandwidth@1M: no probe measures a metric" in message
    assert "collectives.<op>.<busbw_gbps|time_us|wrong>@<size>" in message


def test_threshold_op_not_swept(here: Path) -> None:
    text = f"name: p\n{BASE}collectives: {{ops: [all_reduce], sizes: [1M]}}\nthresholds:\n"
    write(here, "p", text + "  collectives.broadcast.busbw_gbps@1M: {min: 1}\n")
    assert "op 'broadcast' is not in this profile's list ['all_reduce']" in error_of("p")


def test_threshold_size_not_in_sizes(here: Path) -> None:
    text = f"name: p\n{BASE}collectives: {{sizes: [1M, 8M]}}\nthresholds:\n"
    write(here, "p", text + "  collectives.all_reduce.busbw_gbps@2G: {min: 1}\n")
    assert error_of("p") == (
        "invalid profile:\n  thresholds/p.yaml:5: thresholds.collectives.all_reduce.busbw_gbps@2G: "
        "size '2G' is not in this profile's list ['1M', '8M']"
    )


def test_threshold_size_spelled_another_way_is_the_same_metric(here: Path) -> None:
    text = f"name: p\n{BASE}collectives: {{sizes: [1M]}}\nthresholds:\n"
    write(here, "p", text + "  collectives.all_reduce.busbw_gbps@1024K: {min: 1}\n")
    assert load("p").threshold("collectives.all_reduce.busbw_gbps@1M") is not None


def test_threshold_needs_a_bound(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}thresholds:\n  connectivity.world_size: {{source: me}}\n")
    assert "thresholds.connectivity.world_size: a threshold needs at least one of min, max, eq, ref" in error_of("p")


@pytest.mark.parametrize(
    ("override", "check"),
    [
        (
            "collectives.sizes=[64K, 1024K, 8M, 16M]",
            lambda p: COLLECTIVES.section_of(p.model).sizes == ["64K", "1M", "8M", "16M"],
        ),
        ("collectives.iters=3", lambda p: COLLECTIVES.section_of(p.model).iters == 3),
        ("topology={ranks_per_node: 4}", lambda p: p.model.topology.nproc_per_node == 4),
        ("env.NCCL_IB_DISABLE=1", lambda p: p.model.env["NCCL_IB_DISABLE"] == "1"),
        ("thresholds.connectivity.rendezvous_s.max=1e3", lambda p: p.threshold("connectivity.rendezvous_s").max == 1e3),
        (
            "thresholds.collectives.all_reduce.busbw_gbps@8M={min: 2, source: test}",
            lambda p: p.threshold("collectives.all_reduce.busbw_gbps@8M").min == 2,
        ),
        ("thresholds.connectivity.p2p_min_gbps=null", lambda p: p.threshold("connectivity.p2p_min_gbps") is None),
        ("thresholds=null", lambda p: p.model.thresholds == {}),
    ],
)
def test_cluster_set_valid(override: str, check: object) -> None:
    profile = load("local-cpu", [override])
    assert callable(check) and check(profile)
    assert profile.sha256 != load("local-cpu").sha256


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("collectives.sizes", "--cluster-set 'collectives.sizes': expected KEY.PATH=VALUE"),
        ("collectives.=3", "--cluster-set 'collectives.=3': expected KEY.PATH=VALUE"),
        (
            "collectives.sizes=[1M",
            "--cluster-set 'collectives.sizes=[1M' (value column 4): YAML syntax error: expected",
        ),
        (
            "collectives.sizes=[1Q]",
            "--cluster-set collectives.sizes=[1Q]: collectives.sizes.0: expected a size like 512, 1K, 16M or 4G",
        ),
        ("topology.nodes=two", "--cluster-set topology.nodes=two: topology.nodes: Input should be a valid integer"),
        ("colectives.iters=3", "--cluster-set colectives.iters=3: colectives: unknown key (expected one of: name,"),
        (
            "collectives.sizes=[64K]",
            "thresholds.collectives.all_reduce.busbw_gbps@8M: size '8M' is not in this profile's list ['64K']",
        ),
    ],
)
def test_cluster_set_invalid(override: str, message: str) -> None:
    assert message in error_of("local-cpu", [override])


def test_every_shipped_profile_loads() -> None:
    for name in profiles.available():
        assert load(name).name == name


def test_a_bound_set_elsewhere_is_sourced_there_not_to_the_parent(here: Path) -> None:
    """A child's bound, or an option's, without a source of its own is not shown beside the parent's reason
    for another bound; a failure from an option's bound names the option."""
    write(
        here, "parent", f"name: parent\n{BASE}thresholds:\n  connectivity.rendezvous_s: {{max: 60, source: 'slow'}}\n"
    )
    child = write(here, "child", "name: child\nextends: parent\nthresholds:\n  connectivity.rendezvous_s: {max: 5}\n")
    assert load(str(child)).model.thresholds["connectivity.rendezvous_s"].source == "profile child.yaml"
    xfail = write(here, "known", "name: known\nextends: parent\nthresholds:\n  connectivity.rendezvous_s: {xfail: r}\n")
    assert load(str(xfail)).model.thresholds["connectivity.rendezvous_s"].source == "slow"  # the same bound
    option = "thresholds.connectivity.rendezvous_s.max=1"
    found = load("parent", [option]).model.thresholds["connectivity.rendezvous_s"]
    assert found.max == 1 and found.source == f"--cluster-set {option}"
    message = Judge(load("parent", [option])).judge("connectivity.rendezvous_s", 2.0, "s").message
    assert message == f"connectivity.rendezvous_s = 2 s, expected <= 1 (profile parent, --cluster-set {option})"


TIERED = "tiers:\n  standard: {connectivity.barrier_iters: 7}\n  burn-in: {connectivity.barrier_iters: 900}\n"


def test_the_settings_follow_the_tier_that_runs_however_it_is_chosen(here: Path) -> None:
    """The option's tier, else a --cluster-set tier=..., else the profile's tier: the one model.tier says."""
    write(here, "p", f"name: p\n{BASE}{TIERED}")
    assert CONNECTIVITY.section_of(load("p").model).barrier_iters == 7
    assert CONNECTIVITY.section_of(load("p", None, "burn-in").model).barrier_iters == 900
    by_set = load("p", ["tier=burn-in"])
    assert (by_set.model.tier, CONNECTIVITY.section_of(by_set.model).barrier_iters) == ("burn-in", 900)
    quoted = load("p", ["tier='burn-in'"])  # the option's value read as YAML, as the model reads it
    assert (quoted.model.tier, CONNECTIVITY.section_of(quoted.model).barrier_iters) == ("burn-in", 900)
    assert CONNECTIVITY.section_of(load("p", None, "quick").model).barrier_iters == 20  # quick has none: the default


def test_a_misspelt_setting_of_a_tier_that_does_not_run_is_found_now(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}tiers:\n  burn-in: {{connectivity.barrier_itres: 9}}\n")
    assert error_of("p") == (
        "invalid profile:\n  thresholds/p.yaml:4 (tiers.burn-in): connectivity.barrier_itres: unknown key "
        "(expected one of: p2p_size, p2p_iters, barrier_iters)"
    )


@pytest.mark.parametrize("tier", ["[quick]", "{a: 1}", "fast"])
def test_a_tier_that_is_not_a_tier_name_is_named_with_its_line(here: Path, tier: str) -> None:
    write(here, "p", f"name: p\n{BASE}tier: {tier}\n{TIERED}")
    assert "thresholds/p.yaml:3: tier: got " in error_of("p")


def test_bench_train_measures_with_the_full_lengths_unless_told(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}{TIERED}")
    args = Namespace(profile="p", overrides=[], strategies=None, tier="burn-in")
    assert CONNECTIVITY.section_of(bench_train.load(args).model).barrier_iters == 900
    args.tier = "standard"
    assert CONNECTIVITY.section_of(bench_train.load(args).model).barrier_iters == 7


def test_a_probe_s_time_limit_says_where_it_was_set() -> None:
    """A probe killed at its limit names the key, its value and where it was set: the option, the file's
    line, or the default; its family's key where set, else ``timeouts.default``."""
    profile = load("local-cpu", ["timeouts.health=7"])
    timeouts = profile.model.timeouts
    assert (timeouts.key_for("health"), timeouts.for_probe("health")) == ("health", 7.0)
    assert profile.origin("timeouts", "health") == "--cluster-set timeouts.health=7"
    assert timeouts.key_for("compute") == "default"
    assert re.fullmatch(r".*local-cpu\.yaml:\d+", profile.origin("timeouts", "default"))
    assert profile.origin("timeouts", "storage") == "the default"
    error = ProbeError("probe health timed out after 7 s and was killed: rank 0 at import\nlog", timed_out=True)
    error.name_limit("timeouts.health = 7 s, --cluster-set timeouts.health=7")
    assert str(error).startswith(
        "probe health timed out after 7 s (timeouts.health = 7 s, --cluster-set timeouts.health=7) and was killed: "
    )
    crashed = ProbeError("probe health failed: rank 0 raised KeyError: 'x'")
    crashed.name_limit("timeouts.health = 7 s, the default")
    assert str(crashed) == "probe health failed: rank 0 raised KeyError: 'x'"  # no limit stopped it
