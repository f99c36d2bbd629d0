"""The drift family: its rules on crafted records, its profile section's errors, its NVML and sysfs readers
on recorded answers, and the shipped suite on local-cpu with a node made to differ (``ACCEPTANCE_TEST_DRIFT``),
on one node against a pinned value and on two loopback nodes against each other."""

from __future__ import annotations

import platform
import re
import socket
from pathlib import Path
from typing import Any

import pynvml
import pytest

from acceptance.families import drift as rules
from acceptance.families.answers import not_measured
from acceptance.probes import drift as drift_probe
from acceptance.probes.drift import FAULT_ENV, parse_faults, read_hcas
from acceptance.profile.loader import load
from acceptance.schema.figure import Figure
from tests.harness import PLUGIN_ARGS, evidence, free_port
from tests.test_health_units import RecordedNvml, answered, h100
from tests.test_multinode import run_nodes
from tests.test_profile import BASE, error_of, write

NODE = {
    "kernel": "5.15.0-105-generic",
    "os": "Ubuntu 22.04.4 LTS",
    "python": "3.11.7",
    "torch": "2.13.0+cu128",
    "cuda": "12.8",
    "nccl": "2.27.3",
    "driver": "550.54.15",
    "nic_firmware": "28.39.1002 on 8 HCAs",
    "nic_rate": "400 Gb/sec (4X NDR) on 8 ports",
}
GPU = {
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "vbios": "96.00.74.00.01",
    "ecc_mode": "enabled",
    "persistence_mode": "enabled",
    "mig_mode": "disabled",
    "power_limit_w": "700",
    "app_clock_sm_mhz": "1980",
    "app_clock_mem_mhz": "2619",
    "pcie_max_gen": "5",
    "pcie_max_width": "16",
}
HOSTS = ("host-a", "host-b", "host-c", "host-d")


def node(rank: int, **changes: rules.Reading) -> rules.NodeRecord:
    return {"host": HOSTS[rank], "node_rank": rank, "fields": {**NODE, **changes}, "hcas": []}


def gpu(rank: int, per_node: int = 2, **changes: rules.Reading) -> rules.GpuRecord:
    where = rank // per_node
    fields: dict[str, rules.Reading] = {**GPU, **changes}
    return {
        "host": HOSTS[where],
        "node_rank": where,
        "rank": rank,
        "local_rank": rank % per_node,
        "uuid": f"GPU-{rank}",
        "fields": fields,
    }


def result(nodes: list[rules.NodeRecord], gpus: list[rules.GpuRecord] | None = None) -> rules.DriftResult:
    return {"nodes": nodes, "gpus": gpus or [], "no_gpus": None if gpus else "the ranks run on the CPU", "injected": []}


def figures(found: rules.DriftResult, pins: rules.Pins | None = None) -> dict[str, Figure]:
    return {f.metric: f for f in rules.evaluate(found, pins or rules.Pins())}


def test_a_node_that_differs_is_named_with_the_field_and_both_values() -> None:
    fig = figures(result([node(0), node(1, torch="2.12.0+cu128"), node(2), node(3)]))["drift.nodes_differing"]
    assert fig.value == 1 and fig.unit == "nodes"
    assert fig.findings == ["node 1 (host-b): torch 2.12.0+cu128, the other 3 nodes 2.13.0+cu128"]


def test_every_field_of_every_node_that_differs_is_named_and_each_node_counted_once() -> None:
    nodes = [node(0, kernel="6.8.0-40-generic"), node(1, driver="550.54.14", nccl="2.21.5"), node(2), node(3)]
    fig = figures(result(nodes))["drift.nodes_differing"]
    assert fig.value == 2
    assert fig.findings == [
        "node 0 (host-a): kernel 6.8.0-40-generic, the other 3 nodes 5.15.0-105-generic",
        "node 1 (host-b): nccl 2.21.5, the other 3 nodes 2.27.3",
        "node 1 (host-b): driver 550.54.14, the other 3 nodes 550.54.15",
    ]


def test_the_other_nodes_values_are_counted_where_they_differ_among_themselves() -> None:
    nodes = [node(0), node(1), node(2, python="3.10.14"), node(3, python="3.12.3")]
    fig = figures(result(nodes))["drift.nodes_differing"]
    assert fig.value == 2
    assert fig.findings[0] == "node 2 (host-c): python 3.10.14, the other 3 nodes: 3.11.7 on 2, 3.12.3 on 1"


def test_two_nodes_that_differ_say_there_is_no_majority() -> None:
    fig = figures(result([node(0), node(1, torch="2.12.0")]))["drift.nodes_differing"]
    assert fig.value == 1
    assert fig.findings == [
        "node 1 (host-b): torch 2.12.0, the other node 2.13.0+cu128 "
        "(no majority: node 0 (host-a)'s value is taken as the reference)"
    ]


def test_one_node_has_nothing_to_compare_with() -> None:
    found = figures(result([node(0)]))
    assert found["drift.nodes_differing"].skip == "1 node: no other node to compare with"
    assert found["drift.gpus_differing"].skip == "no GPU fields to compare: the ranks run on the CPU"


def test_a_gpu_that_differs_is_named() -> None:
    gpus = [gpu(0), gpu(1), gpu(2, vbios="96.00.89.00.01"), gpu(3)]
    fig = figures(result([node(0), node(1)], gpus))["drift.gpus_differing"]
    assert fig.value == 1 and fig.unit == "GPUs"
    assert fig.findings == ["node 1 (host-b) GPU 0 (rank 2): vbios 96.00.89.00.01, the other 3 GPUs 96.00.74.00.01"]


def test_golden_names_each_node_off_the_pinned_value() -> None:
    pins = rules.Pins(golden={"driver": "550.54.15", "vbios": "96.00.74.00.01"})
    found = result([node(0, driver="550.54.14"), node(1)], [gpu(0), gpu(1, vbios="96.00.89.00.01")])
    fig = figures(found, pins)["drift.golden_mismatches"]
    assert fig.value == 2 and fig.not_measured == []
    assert fig.findings == [
        "node 0 (host-a): driver 550.54.14, golden 550.54.15",
        "node 0 (host-a) GPU 1 (rank 1): vbios 96.00.89.00.01, golden 96.00.74.00.01",
    ]


def test_golden_skips_when_nothing_is_pinned() -> None:
    assert figures(result([node(0)]))["drift.golden_mismatches"].skip == "the profile pins no field (drift.golden)"


def test_ignored_fields_are_recorded_not_compared() -> None:
    nodes = [node(0, kernel="6.8.0-40-generic"), node(1), node(2)]
    fig = figures(result(nodes), rules.Pins(ignore=frozenset({"kernel"})))["drift.nodes_differing"]
    assert fig.value == 0 and fig.findings == []
    assert "not compared (drift.ignore): kernel" in fig.detail


def test_a_field_not_measured_is_never_a_value_nor_drift() -> None:
    no_nvml = not_measured("NVML init: NVML Shared Library Not Found")
    nodes = [node(0, driver=no_nvml), node(1), node(2)]
    found = figures(result(nodes), rules.Pins(golden={"driver": "550.54.15"}))
    differing = found["drift.nodes_differing"]
    assert differing.value == 0 and differing.findings == []
    assert differing.not_measured == ["driver on node 0 (host-a): NVML init: NVML Shared Library Not Found"]
    golden = found["drift.golden_mismatches"]
    assert golden.value == 0 and golden.not_measured == differing.not_measured  # not confirmed, not a mismatch
    missing = found["drift.fields_not_measured"]
    assert missing.value == 1 and missing.findings == differing.not_measured


def test_fields_not_measured_counts_fields_once_and_groups_nodes_by_reason() -> None:
    none = not_measured("no /sys/class/infiniband: no InfiniBand or RoCE adapter on this node")
    nodes = [node(r, nic_firmware=none, nic_rate=none) for r in range(2)]
    fig = figures(result(nodes))["drift.fields_not_measured"]
    assert fig.value == 2
    assert fig.findings[0] == f"nic_firmware on node 0 (host-a), node 1 (host-b): {none['not_measured']}"


def test_nvml_settings_read_as_text() -> None:
    lib = SettingsNvml([settable(0), settable(1)])
    answers = answered(drift_probe.read_settings("GPU-1f2a6c1e-7b3d-4e5f-8a9b-0c1d2e3f4a5b", lib))
    assert answers["driver_version"] == "550.54.15" and answers["gpu"] is not None
    assert rules.gpu_fields(answers["gpu"]) == GPU


def test_nvml_settings_keep_each_unanswered_query_s_reason() -> None:
    lacking = {**settable(0), "nvmlDeviceGetApplicationsClock": {"error": pynvml.NVML_ERROR_NOT_SUPPORTED}}
    answers = answered(drift_probe.read_settings("GPU-0f2a6c1e-7b3d-4e5f-8a9b-0c1d2e3f4a5b", SettingsNvml([lacking])))
    assert answers["gpu"] is not None
    fields = rules.gpu_fields(answers["gpu"])
    assert fields["app_clock_sm_mhz"] == not_measured("SM application clock: Not Supported")
    assert fields["vbios"] == "96.00.74.00.01"
    unknown = answered(drift_probe.read_settings("GPU-nope", SettingsNvml([settable(0)])))
    assert unknown["gpu"] == not_measured("device handle: Not Found")
    down = drift_probe.read_settings(None, SettingsNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert down == not_measured("NVML init: NVML Shared Library Not Found")


def test_adapters_and_ports_are_counted_from_sysfs(tmp_path: Path) -> None:
    for hca, firmware in (("mlx5_0", "28.39.1002"), ("mlx5_1", "28.39.1002"), ("mlx5_2", "28.35.1012")):
        (tmp_path / hca / "ports" / "1").mkdir(parents=True)
        (tmp_path / hca / "fw_ver").write_text(f"{firmware}\n")
        (tmp_path / hca / "ports" / "1" / "rate").write_text("400 Gb/sec (4X NDR)\n")
    hcas, none_why = read_hcas(tmp_path)
    assert none_why is None and [h["hca"] for h in hcas] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert rules.nic_fields(hcas, none_why) == {
        "nic_firmware": "28.35.1012 on 1 HCA, 28.39.1002 on 2 HCAs",
        "nic_rate": "400 Gb/sec (4X NDR) on 3 ports",
    }
    (tmp_path / "mlx5_1" / "fw_ver").unlink()
    unread = rules.nic_fields(*read_hcas(tmp_path))["nic_firmware"]
    assert unread == not_measured(f"{tmp_path}/mlx5_1/fw_ver: No such file or directory")
    assert read_hcas(tmp_path / "absent") == ([], f"no {tmp_path}/absent: no InfiniBand or RoCE adapter on this node")


def test_the_fault_knob_is_parsed_or_refused() -> None:
    assert [(f.who, f.field, f.value) for f in parse_faults("1:torch=2.12.0; 3:vbios=96.00.89.00.01")] == [
        (1, "torch", "2.12.0"),
        (3, "vbios", "96.00.89.00.01"),
    ]
    assert parse_faults("") == []
    with pytest.raises(ValueError, match="FIELD one of kernel, os"):
        parse_faults("1:torh=2.12.0")


# ---- the profile section ----------------------------------------------------------------------------------


def test_the_drift_section_loads(here: Path) -> None:
    write(
        here,
        "p",
        f"name: p\n{BASE}drift:\n  golden: {{torch: '2.13.0+cu128', driver: '550.54.15'}}\n  ignore: [kernel]\n",
    )
    section = rules.Pins.from_profile(load("p").model)
    assert section.golden == {"torch": "2.13.0+cu128", "driver": "550.54.15"} and section.ignore == {"kernel"}


def test_an_unknown_golden_field_is_named_with_its_line(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}drift:\n  golden:\n    torch: '2.13.0'\n    drvier: '550.54.15'\n")
    message = error_of("p")
    where = "invalid profile:\n  thresholds/p.yaml:6: drift.golden.drvier.[key]: "
    assert message.startswith(f"{where}unknown drift field 'drvier' (expected one of: kernel, os, python,"), message


def test_an_unknown_ignored_field_is_named_with_its_line(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}drift:\n  ignore:\n    - kernel\n    - kernal\n")
    assert "thresholds/p.yaml:6: drift.ignore.1: unknown drift field 'kernal'" in error_of("p")


def test_a_field_pinned_and_ignored_at_once_is_an_error(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}drift:\n  golden: {{kernel: '6.8.0'}}\n  ignore: [kernel]\n")
    assert "thresholds/p.yaml:3: drift: kernel: pinned in golden and ignored at once" in error_of("p")


def test_a_golden_value_must_be_text(here: Path) -> None:
    """YAML reads 2.10 as the number 2.1: a pinned version must be quoted."""
    write(here, "p", f"name: p\n{BASE}drift:\n  golden: {{python: 3.10}}\n")
    assert "drift.golden.python: Input should be a valid string (got 3.1)" in error_of("p")


# ---- end to end on local-cpu ------------------------------------------------------------------------------

RUN_TIMEOUT_S = 300  # only so that a broken launcher cannot hang CI; nothing here measures speed


@pytest.mark.e2e
def test_a_node_off_its_pinned_value_fails_and_is_named(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = platform.python_version()
    monkeypatch.setenv(FAULT_ENV, "0:python=2.7.18")
    folder = suite.path / "evidence"
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-evidence", str(folder), "--cluster-profile", "local-cpu",
        "--cluster-set", f"drift.golden={{python: '{mine}'}}", "-m", "drift", "tests_cluster/", timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    outcomes.pop("deselected")  # the other families' tests: -m drift selects this family's alone
    assert outcomes == {"failed": 1, "skipped": 2, "recorded": 1}, result.stdout.str()
    host = socket.gethostname()
    result.stdout.fnmatch_lines(
        [
            "drift.golden_mismatches = 1 fields, expected == 0 (profile local-cpu)",
            f"node 0 ({host}): python 2.7.18, golden {mine}",
            "drift.golden_mismatches * 1 * fields * == 0 * FAIL",
            "verdict: FAIL*",
        ]
    )
    data = evidence(folder)
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert tests["test_fields_measured"]["measurements"]["injected"] == ["0:python=2.7.18"]
    assert tests["test_nodes_agree"]["outcome"] == "skipped"  # one node has nothing to compare with


@pytest.mark.e2e
def test_two_nodes_a_node_that_differs_fails_and_is_named(tmp_path: Path) -> None:
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    envs = [{**common, "NODE_RANK": str(r), FAULT_ENV: "1:torch=2.12.0"} for r in range(2)]
    suite = ["tests_cluster/test_drift.py", "--cluster-set", "topology.ranks_per_node=1"]
    nodes = run_nodes(tmp_path, envs, suite=suite)
    host = re.escape(socket.gethostname())
    line = rf"node 1 \({host}\): torch 2\.12\.0, the other node {re.escape(torch_version())} \(no majority"
    for each in nodes:  # each node's pytest judges the whole cluster
        assert each.returncode == pytest.ExitCode.TESTS_FAILED, each.output[-6000:]
        assert re.search(rf"drift\.nodes_differing = 1 nodes, expected == 0 \(profile local-cpu\)\n{line}", each.output)
        data = each.evidence()
        checks = {c["metric"]: c for t in data["tests"] for c in t["checks"]}
        assert checks["drift.nodes_differing"]["verdict"] == "fail" and data["verdict"] == "FAIL"
        assert [n["node_rank"] for n in _measured(data, "nodes")] == [0, 1]


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def _measured(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    test = next(t for t in data["tests"] if t["nodeid"].endswith("test_fields_measured"))
    return list(test["measurements"][key])


# ---- a recorded NVML for the settings -----------------------------------------------------------------------


def settable(index: int) -> dict[str, Any]:
    """An H100 as ``h100`` describes it, with the settings the drift family reads besides."""
    return {
        **h100(index),
        "nvmlDeviceGetPowerManagementLimit": 700000,  # milliwatts
        "nvmlDeviceGetApplicationsClock": {(pynvml.NVML_CLOCK_SM,): 1980, (pynvml.NVML_CLOCK_MEM,): 2619},
    }


class SettingsNvml(RecordedNvml):
    """``RecordedNvml`` that also finds a GPU by its UUID, as ``probes.drift.read_settings`` asks."""

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        found = [i for i, g in enumerate(self.gpus) if g["nvmlDeviceGetUUID"] == uuid]
        if not found:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return found[0]
