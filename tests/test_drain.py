"""The drain list built from evidence, and --cluster-drain's commands: argv lists for scontrol and kubectl."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from acceptance.evidence import drain
from acceptance.evidence.model import EvidenceDoc
from acceptance.families.gpu_users import FOREIGN_LOAD, GPU_FAULT
from acceptance.plugin import drain_hooks
from acceptance.profile.metrics import local
from acceptance.profile.registry import family_of_module
from acceptance.run import drain as scheduler
from acceptance.run import preflight
from acceptance.run.launcher import ProbeError
from tests.harness import doc as evidence_doc


def doc(nodes: int = 1, verdict: str = "FAIL", device: str = "cuda", **extra: Any) -> dict[str, Any]:
    """A complete run's evidence, as the plugin hands it to the drain list (a dict of the typed document)."""
    for test in extra.get("tests", []):  # as the plugin records them: each figure's and test's scope
        family = family_of_module(Path(test["nodeid"].split("::")[0]).stem)
        test.setdefault("local", family.local if family is not None else None)
        for check in test.get("checks", []):
            check.setdefault("local", local(check["metric"]))
    fields: dict[str, Any] = {
        "verdict": verdict,
        "complete": True,
        "topology": {"host": "gpu-a", "nodes": nodes},
        "profile": {"resolved": {"topology": {"device": device}}},
        "cluster": {"nodes": [{"host": f"gpu-{c}"} for c in "ab"[:nodes]]},
        "tests": [],
        "errors": [],
        **extra,
    }
    return evidence_doc(**fields).model_dump(mode="json")


def build(data: dict[str, Any], evidence: Path, names: dict[str, str] | None = None) -> drain.DrainList:
    """The drain list of a document written as plain data, read into its model as a file is."""
    return drain.build(EvidenceDoc.model_validate(data), evidence, names)


def failed_check(metric: str, value: float, detail: str) -> dict[str, Any]:
    check = {"metric": metric, "value": value, "unit": "GB/s", "bound": ">= 400", "threshold": {"min": 400}}
    check |= {"verdict": "fail", "detail": detail, "local": local(metric)}  # as the plugin records it
    return {"nodeid": f"test_x.py::test_{metric}", "outcome": "failed", "checks": [check]}


def test_a_preflight_failure_drains_this_node_with_its_line() -> None:
    line = "preflight: GPU 1 (0000:19:00.0) is in use by another process: pid 4242 `python train.py`"
    data = doc(errors=[line], cluster={"nodes": [], "preflight": {"ok": False, "categories": {line: "configuration"}}})
    found = build(data, Path("ev/evidence.json"), {"gpu-a": "c1"})
    assert found["nodes"] == [
        {
            "node": "gpu-a",
            "scheduler_name": "c1",
            "gpus": ["1"],
            "gpu_uuids": [],
            "severity": "drain",
            "reason": line,
            "node_fault": True,
            "category": "configuration",
            "action": "drain GPU",
            "reasons": [{"text": line, "category": "configuration", "action": "drain GPU"}],
        }
    ]


CPU_ONLY = (
    "preflight: profile h100-x1 runs on CUDA GPUs (topology.device: cuda), but this torch 2.13.0+cpu is a "
    "CPU-only build: install a CUDA build of torch, or pick a CPU profile such as local-cpu"
)


def test_the_suite_s_own_install_drains_no_node_and_says_what_to_fix() -> None:
    """A CUDA profile on a CPU-only torch (what a plain ``pip install torch`` gives) is the install's fault:
    drained, it would take every node of a cluster out with one broken image."""
    data = doc(
        errors=[CPU_ONLY], cluster={"nodes": [], "preflight": {"ok": False, "categories": {CPU_ONLY: "software"}}}
    )
    found = build(data, Path("e.json"), {"gpu-a": "c1"})
    [node] = found["nodes"]
    assert (node["severity"], node["node_fault"], node["category"], node["action"]) == (
        "review", False, "software", "fix the install",
    )  # fmt: skip
    assert drain.to_drain(found) == [] and scheduler.apply(found, "slurm", run=_refuse) == []


def test_a_time_limit_the_operator_gave_and_the_run_s_own_errors_drain_no_node() -> None:
    """A single-node run (a prolog's) blames its node for a failure of its own hardware, never for a probe
    killed at a ``--cluster-timeout`` the operator gave, nor for a threshold its profile left unchecked."""
    killed = "probe health timed out after 1 s and was killed: ..."
    timed_out = {"nodeid": "test_health.py::test_x", "outcome": "failed", "message": killed, "category": "environment"}
    for data in (doc(tests=[timed_out]), doc(errors=["thresholds no selected test checked: compute.x"])):
        found = build(data, Path("e.json"))
        [node] = found["nodes"]
        assert (node["node"], node["severity"], node["node_fault"]) == ("gpu-a", "review", False)
        assert drain.to_drain(found) == []
    [node] = build(doc(tests=[timed_out]), Path("e.json"))["nodes"]
    assert (node["category"], node["action"]) == ("environment", "fix a setting")
    crashed = {**timed_out, "message": "probe health failed: rank 0 exited 1", "category": None}
    [node] = build(doc(tests=[crashed]), Path("e.json"))["nodes"]
    assert (node["severity"], node["category"], node["action"]) == ("drain", "hardware", "drain node")


def test_another_node_s_install_fault_drains_no_node() -> None:
    line = "preflight: node 1 (gpu-b) failed its preflight: profile h100 ... is a CPU-only build: install ..."
    preflight = {"ok": False, "categories": {line: "software"}}
    found = build(doc(nodes=2, errors=[line], cluster={"nodes": [], "preflight": preflight}), Path("e.json"))
    assert [(n["node"], n["severity"], n["action"]) for n in found["nodes"]] == [("gpu-b", "review", "fix the install")]


def test_the_reason_names_every_failure_shortened_the_node_s_own_faults_first() -> None:
    data = doc(
        errors=["thresholds no selected test checked: storage.read_gbps"],
        tests=[failed_check("compute.matmul_tflops_min", 212.0, "slowest: gpu-a GPU 3 " + "x" * 300),
               failed_check("health.gpu_temp_c_max", 97.0, "gpu-a GPU 5")],
    )  # fmt: skip
    [node] = build(data, Path("e.json"))["nodes"]
    assert node["reason"].startswith("3 failures: compute.matmul_tflops_min = 212, bound >= 400 (slowest")
    assert "; health.gpu_temp_c_max = 97, bound >= 400 (gpu-a GPU 5); thresholds no" in node["reason"]
    assert len(node["reason"]) <= drain.REASON_CHARS
    assert [(r["category"], r["action"]) for r in node["reasons"]] == [
        ("hardware", "drain GPU"), ("hardware", "drain GPU"), ("suite", "review"),
    ]  # fmt: skip
    assert (node["severity"], node["gpus"], node["node_fault"]) == ("drain", ["3", "5"], True)


def test_another_node_s_preflight_drains_that_node_not_this_one() -> None:
    data = doc(nodes=2, errors=["preflight: node 1 (gpu-b) failed its preflight: GPU 0 (0000:18:00.0) missing"])
    data["cluster"]["nodes"] = []  # the run stopped before the connectivity probe listed the nodes
    [node] = build(data, Path("e.json"))["nodes"]
    assert (node["node"], node["gpus"], node["severity"]) == ("gpu-b", ["0"], "drain")


def test_a_figure_that_names_a_node_drains_that_node_only() -> None:
    data = doc(nodes=2, tests=[failed_check("compute.matmul_tflops_min", 212.123456, "slowest: gpu-b GPU 3")])
    [node] = build(data, Path("e.json"))["nodes"]
    assert (node["node"], node["gpus"], node["severity"]) == ("gpu-b", ["3"], "drain")
    assert node["reason"] == "compute.matmul_tflops_min = 212.1, bound >= 400 (slowest: gpu-b GPU 3)"


def test_a_cluster_wide_failure_is_for_review_and_drains_nothing() -> None:
    data = doc(nodes=2, tests=[failed_check("internode.all.all_reduce.busbw_gbps@1G", 12.0, "across 2 nodes")])
    found = build(data, Path("e.json"))
    assert {n["node"] for n in found["nodes"]} == {"gpu-a", "gpu-b"}
    assert {n["severity"] for n in found["nodes"]} == {"review"}
    assert drain.to_drain(found) == []
    assert scheduler.apply(found, "slurm", run=_refuse) == []


def test_other_nodes_verdicts_are_for_review_and_a_cpu_run_names_no_gpu() -> None:
    verdicts = [
        {"host": "gpu-a", "verdict": "FAIL", "evidence": "/r/node0/evidence.json"},
        {"host": "gpu-b", "verdict": "FAIL", "evidence": "/r/node1/evidence.json"},
    ]
    data = doc(nodes=2, device="cpu", cluster={"nodes": [], "node_verdicts": verdicts})
    data["tests"] = [failed_check("connectivity.p2p_min_gbps", 0.001, "gpu-a GPU 1 -> gpu-a GPU 0")]
    nodes = build(data, Path("e.json"))["nodes"]
    assert [(n["node"], n["gpus"], n["severity"]) for n in nodes] == [("gpu-a", [], "drain"), ("gpu-b", [], "review")]
    assert nodes[1]["reason"] == "node verdict FAIL: its drain list is beside /r/node1/evidence.json"


def test_a_pass_lists_no_node_and_reasons_are_one_short_line() -> None:
    assert build(doc(verdict="PARTIAL"), Path("e.json"))["nodes"] == []
    long = drain.one_line("a\nb " + "x" * 500)
    assert "\n" not in long and len(long) == drain.REASON_CHARS and long.endswith("...")


def test_the_list_is_written_once(tmp_path: Path) -> None:
    found = build(doc(errors=["preflight: no GPU"]), tmp_path / "evidence.json")
    path = drain.write(tmp_path, found)
    assert path.name == "drain.json"
    with pytest.raises(FileExistsError, match="already there"):
        drain.write(tmp_path, found)


def _refuse(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"ran {argv}")


def test_slurm_and_kubernetes_commands_are_argv_lists() -> None:
    found = build(doc(errors=["preflight: GPU 0 in use: pid 7 `x; rm -rf /`"]), Path("e.json"), {"gpu-a": "c1"})
    ran: list[list[str]] = []

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        ran.append(list(argv))
        return subprocess.CompletedProcess(argv, 0 if argv[0] == "scontrol" else 1, "", "error: forbidden\n")

    lines = scheduler.apply(found, "slurm", run=run)
    reason = "cluster-acceptance: preflight: GPU 0 in use: pid 7 `x; rm -rf /`"
    assert ran == [["scontrol", "update", "nodename=c1", "state=drain", f"reason={reason}"]]
    assert lines == [f"scontrol update nodename=c1 state=drain reason={reason}: ok: error: forbidden"]
    ran.clear()
    lines = scheduler.apply(found, "kubernetes", run=run)
    assert [argv[:3] for argv in ran] == [["kubectl", "taint", "nodes"], ["kubectl", "label", "nodes"],
                                          ["kubectl", "annotate", "nodes"]]  # fmt: skip
    assert ran[0][3:] == ["--overwrite", "--", "c1", "cluster-acceptance/verdict=fail:NoSchedule"]
    assert all(line.endswith("exit 1: error: forbidden") for line in lines)


def test_a_missing_scheduler_is_a_line_not_a_crash() -> None:
    found = build(doc(errors=["preflight: no GPU"]), Path("e.json"))

    def missing(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    [line] = scheduler.apply(found, "slurm", run=missing)
    assert line.startswith("scontrol update nodename=gpu-a state=drain") and "could not run" in line


def test_only_the_isolation_s_culprit_is_drained_the_hosts_it_mentions_are_for_review() -> None:
    data = doc(nodes=4)
    data["cluster"]["nodes"] = [{"host": h, "node_rank": n} for n, h in enumerate(["gpu-a", "gpu-b", "gpu-c", "gpu-d"])]
    message = (
        "isolation (2 rounds): node 3 (host gpu-d): 3 of 3 pairs with cleared partners (0, 1, 2) at 12 GB/s | "
        "the path node 1 (host gpu-b) <-> node 2 (host gpu-c) at 20 GB/s while both are fast with others | "
        "not resolved in 2 rounds (slow pairs, too few cleared witnesses): node 0 (host gpu-a)"
    )
    test = failed_check("internode.all.all_reduce.busbw_gbps@1G", 12.0, f"across 4 nodes\n{message}")
    test["measurements"] = {"isolation": {"message": message, "culprits": [3], "hosts": {"3": "gpu-d"}}}
    nodes = {n["node"]: n for n in build({**data, "tests": [test]}, Path("e.json"))["nodes"]}
    assert {h: n["severity"] for h, n in nodes.items()} == {
        "gpu-a": "review", "gpu-b": "review", "gpu-c": "review", "gpu-d": "drain",
    }  # fmt: skip
    assert [n["node"] for n in drain.to_drain({"nodes": list(nodes.values())})] == ["gpu-d"]  # type: ignore[typeddict-item]
    assert nodes["gpu-b"]["reason"].startswith("named, not blamed: internode.all.all_reduce.busbw_gbps@1G = 12")


def test_two_nodes_pair_and_a_collective_s_slowest_link_drain_no_one() -> None:
    pair = "isolation (1 round): node 0 (host gpu-a) and node 1 (host gpu-b): two nodes can only blame their pair"
    both = failed_check("internode.all.all_reduce.busbw_gbps@1G", 12.0, pair)
    both["measurements"] = {"isolation": {"culprits": [], "hosts": {"0": "gpu-a", "1": "gpu-b"}}}
    link = failed_check(
        "collectives.all_reduce.busbw_gbps@1G", 80.0, "culprit: slowest links this run measured: gpu-a GPU 3 -> gpu-b"
    )
    for test in (both, link):
        found = build(doc(nodes=2, tests=[test]), Path("e.json"))
        assert {n["node"]: n["severity"] for n in found["nodes"]} == {"gpu-a": "review", "gpu-b": "review"}
        assert drain.to_drain(found) == []


def test_a_host_is_named_as_a_whole_word_only() -> None:
    data = doc(nodes=2, tests=[failed_check("compute.matmul_tflops_min", 212.0, "slowest: gpu-1-b GPU 3")])
    data["cluster"]["nodes"] = [{"host": "gpu-1"}, {"host": "gpu-1-b"}]
    [node] = build(data, Path("e.json"))["nodes"]
    assert (node["node"], node["gpus"], node["severity"]) == ("gpu-1-b", ["3"], "drain")
    assert drain.names("gpu-1", "gpu-1 GPU 0") and not drain.names("gpu-1", "gpu-1.rack2 GPU 0")


def test_a_node_listed_already_gets_the_gpus_of_its_later_reasons() -> None:
    data = doc(tests=[failed_check("compute.matmul_tflops_min", 212.0, "slowest: gpu-a GPU 3"),
                      failed_check("health.gpu_temp_c_max", 97.0, "gpu-a GPU 5")])  # fmt: skip
    [node] = build(data, Path("e.json"))["nodes"]
    assert (node["gpus"], node["severity"]) == (["3", "5"], "drain")
    assert node["reason"].startswith("2 failures: compute.matmul_tflops_min")  # every failure, not the first
    whole = doc(errors=["preflight: no GPU"], tests=[failed_check("compute.matmul_tflops_min", 1.0, "gpu-a GPU 3")])
    [node] = build(whole, Path("e.json"))["nodes"]
    assert node["gpus"] == []  # a reason that blames the node as a whole is not narrowed to one GPU


def test_a_drain_list_that_cannot_be_built_keeps_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> drain.DrainList:
        raise KeyError("topology")

    monkeypatch.setattr(drain, "build", broken)
    found = drain_hooks.act_on(
        EvidenceDoc.model_validate(doc()), tmp_path, tmp_path / "evidence.json", "slurm", {"SLURMD_NODENAME": "c1"}
    )
    assert found is None
    err = capsys.readouterr().err
    assert err == f"cluster-acceptance: no drain list for {tmp_path / 'evidence.json'}: KeyError: 'topology'\n"
    assert not (tmp_path / "drain.json").exists()


@pytest.mark.parametrize("name", ["--all", "gpu[001-100]", "a,b,c", "gpu 1", "-gpu", "gpu-", "", "a" * 254, "a..b"])
def test_a_name_that_is_not_one_host_is_refused_and_nothing_runs(name: str) -> None:
    found = build(doc(errors=["preflight: no GPU"]), Path("e.json"), {"gpu-a": name})
    for way in ("slurm", "kubernetes"):
        [line] = scheduler.apply(found, way, run=_refuse)
        assert line == f"{way}: refused: node name {name!r} is not one host name (RFC 1123: letters, digits, '-' " \
            "and '.', no leading or trailing '-', no ',', '[', ']' or space): no command run"  # fmt: skip


@pytest.mark.parametrize("name", ["gpu-001", "c7", "node-3.rack2.example.com", "GPU01", "a" * 63])
def test_one_host_name_is_taken(name: str) -> None:
    assert scheduler.name_problem(name) is None


def test_a_figure_slowed_by_another_job_s_process_drains_nothing() -> None:
    """A GPU under the median because another job's process started on it while the figure was timed: the
    failure names the process (``probes.gpu_sampler``), its category is foreign load, and the action is a
    rerun: no node and no GPU is drained for it."""
    check = {
        "metric": "compute.matmul_tflops_below_median",
        "value": 0.54,
        "unit": "fraction",
        "bound": "<= 0.1",
        "threshold": {"max": 0.1},
        "verdict": "fail",
        "detail": f"gpu-a GPU 2: 54% under the median; {FOREIGN_LOAD}: pid 4242 `python` (3.20 GiB) from 1.2 s",
    }
    slowed = {
        "nodeid": "test_compute.py::test_within_tolerance[matmul_tflops]",
        "outcome": "failed",
        "checks": [check],
        "category": "foreign load",
    }
    found = build(doc(tests=[slowed]), Path("e.json"))
    [node] = found["nodes"]
    assert (node["severity"], node["node_fault"], node["category"], node["action"]) == (
        "review",
        False,
        "foreign load",
        "rerun",
    )
    assert drain.to_drain(found) == []
    # the cause first, as the preflight says it of a process there from the start
    assert node["reason"].startswith("foreign load: compute.matmul_tflops_below_median = 0.54")


def test_a_drained_gpu_is_named_by_its_uuid_as_well() -> None:
    """On a node shared between jobs the job's GPU 0 is the node's GPU 2: drain.json names each GPU by its
    UUID beside the job's index, from the devices the run recorded."""
    devices = [
        {"rank": r, "local_rank": r, "device": f"cuda:{r}", "uuid": f"GPU-{r}c1df6ab-8018-4381-a5ab-c3739ddfcf57"}
        for r in range(2)
    ]
    check = {
        "metric": "compute.h2d_gbps_min",
        "value": 37.3,
        "unit": "GB/s",
        "bound": ">= 44",
        "threshold": {"min": 44},
        "verdict": "fail",
        "detail": "slowest: gpu-a GPU 1 (GPU-1c1d...)",
    }
    slow = {"nodeid": "test_compute.py::test_slowest[h2d_gbps]", "outcome": "failed", "checks": [check]}
    data = doc(tests=[slow], cluster={"nodes": [{"host": "gpu-a", "node_rank": 0, "devices": devices}]})
    [node] = build(data, Path("e.json"))["nodes"]
    assert (node["gpus"], node["gpu_uuids"]) == (["1"], ["GPU-1c1df6ab-8018-4381-a5ab-c3739ddfcf57"])


class _Case:
    category: str | None = None


class _Run:
    """What ``categorize`` reads of the run: its evidence's test cases and document (whose preflight failed with
    ``CPU_ONLY``, the install's fault)."""

    def __init__(self) -> None:
        self.cases: dict[str, _Case] = {}
        self.evidence = self
        preflight = {"ok": False, "categories": {CPU_ONLY: "software"}}
        self.doc = EvidenceDoc.model_validate(doc(cluster={"nodes": [], "preflight": preflight}))

    def test(self, nodeid: str) -> _Case:
        return self.cases.setdefault(nodeid, _Case())


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("12 of 12 rank pairs ...: SHM/direct/direct, expected P2P (NCCL_P2P_DISABLE=1 set in the environment)",
         "environment"),
        (f"compute.matmul_tflops_min = 307 ... ({FOREIGN_LOAD}: pid 941 `python3`)", "foreign load"),
        # the health gate failed with the preflight's line: the preflight's category (the drain list's)
        (CPU_ONLY, "software"),
        ("compute.matmul_tflops_min = 307 TFLOP/s, expected >= 600", None),
        # an XID (or a degraded link) seen beside another job's process: the GPU's own fault all the same
        (f"compute.matmul_tflops_min = 307 ... ({GPU_FAULT}: XID 79 at 1.0 s; {FOREIGN_LOAD}: pid 941)", None),
    ],
)  # fmt: skip
def test_a_failure_s_category_comes_from_its_cause(message: str, category: str | None) -> None:
    """A transport forced by a setting of the run is the setting's (environment), another job's process the
    foreign load's; a figure with neither keeps the guess by its family (None here: the drain list guesses)."""
    run = _Run()
    report = SimpleNamespace(failed=True, longrepr=message, nodeid="test_x.py::test_y")
    drain_hooks.categorize(SimpleNamespace(excinfo=None), report, run)  # type: ignore[arg-type]
    assert run.test("test_x.py::test_y").category == category


def test_a_probe_killed_at_any_time_limit_is_the_operator_s_setting() -> None:
    """A limit from --cluster-timeout, --cluster-set timeouts.*=, the profile or its environment alike: the
    operator chose it, and a probe killed there shows no fault of the node's own hardware."""
    run = _Run()
    killed = ProbeError("probe health timed out after 1 s and was killed: rank 0 at import", timed_out=True)
    try:
        try:
            raise killed
        except ProbeError:
            pytest.fail("probe health failed", pytrace=False)  # as a test fails on its probe's error
    except pytest.fail.Exception as exc:
        call = SimpleNamespace(excinfo=SimpleNamespace(value=exc))
    report = SimpleNamespace(failed=True, longrepr="probe health timed out", nodeid="test_x.py::test_y")
    drain_hooks.categorize(call, report, run)  # type: ignore[arg-type]
    assert run.test("test_x.py::test_y").category == "environment"


HEAD = "probe training failed: rank 1 (host gpu-a, local rank 1) raised "
ECC_LOG = (
    "\n--- logs/x/attempt_0/1/stderr.log ---\n[rank1]: torch.AcceleratorError: CUDA error: uncorrectable ECC error"
    " encountered"
)


@pytest.mark.parametrize(
    ("message", "category"),
    [
        # an error of the suite's own code, naming neither the device nor the network: no evidence against the node
        (HEAD + "RuntimeError: injected crash on rank 1 (ACCEPTANCE_TEST_FAULT=crash@1)", "suite"),
        (HEAD + "KeyError: 'tokens'", "suite"),
        (HEAD + "ModuleNotFoundError: No module named 'deepspeed'", "software"),
        # the device's own fault, in the error or in the log tail below it
        (HEAD + "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions." + ECC_LOG, "hardware"),
        (HEAD + "torch.AcceleratorError: CUDA error: unspecified launch failure", "hardware"),
        # a device or network error that shows no device fault: the figures' guess stands
        (HEAD + "torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error",
         None),
        (HEAD + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", None),
        ("probe training exited with status 1 and left no result; see torchrun.log", None),
    ],
)  # fmt: skip
def test_a_crashed_rank_drains_only_for_a_fault_its_error_shows(message: str, category: str | None) -> None:
    """A rank that raised is the node's hardware's fault only where its error or log shows a device fault; an
    error of the suite's own code is for review, a module that would not import the install's."""
    run = _Run()
    try:
        try:
            raise ProbeError(message)
        except ProbeError:
            pytest.fail("probe training failed", pytrace=False)  # as a test fails on its probe's error
    except pytest.fail.Exception as exc:
        call = SimpleNamespace(excinfo=SimpleNamespace(value=exc))
    report = SimpleNamespace(failed=True, longrepr=message.splitlines()[0], nodeid="test_x.py::test_y")
    drain_hooks.categorize(call, report, run)  # type: ignore[arg-type]
    assert run.test("test_x.py::test_y").category == category


def test_the_causes_the_preflight_names_drain_no_node() -> None:
    """The job's environment, the wrong profile, the install's missing compiler and another process on a GPU:
    each is for review with its own action; a GPU really missing still drains it."""
    for category, expected in [
        ("environment", ("review", "fix a setting")),
        ("software", ("review", "fix the install")),
        ("foreign load", ("review", "rerun")),
        ("hardware", ("drain", "drain GPU")),
    ]:
        line = 'preflight: the job\'s environment hides GPUs: CUDA_VISIBLE_DEVICES="" ... GPU 0 (GPU-a7f9)'
        preflight = {"ok": False, "categories": {line: category}}
        [node] = build(doc(errors=[line], cluster={"nodes": [], "preflight": preflight}), Path("e.json"))["nodes"]
        assert (node["severity"], node["action"]) == expected, category


def test_junit_and_the_report_carry_each_failure_s_category_and_action() -> None:
    """The category and action the drain list takes, on each failed test of the JUnit (properties a pipeline
    routes by) and in the report's table of tests that did not pass."""
    from acceptance.evidence.junit import junit_xml
    from acceptance.reports import overview
    from acceptance.reports.blocks import Table

    slowed = failed_check("compute.matmul_tflops_min", 300, "gpu-a GPU 2: slowest")
    slowed["checks"][0]["unit"] = "TFLOP/s"
    slowed["message"] = "compute.matmul_tflops_min = 300 TFLOP/s, expected >= 400\ngpu-a GPU 2: slowest"
    foreign = {**failed_check("compute.copy_gbps_min", 1, "gpu-a GPU 1"), "category": "foreign load"}
    foreign["nodeid"] = "test_x.py::test_foreign"
    data = EvidenceDoc.model_validate(doc(tests=[slowed, foreign]))
    assert [drain.cause_of(t) for t in data.tests] == [("hardware", "drain GPU"), ("foreign load", "rerun")]
    xml = junit_xml(data)
    assert '<property name="category" value="hardware" />' in xml
    assert '<property name="action" value="drain GPU" />' in xml
    assert '<property name="category" value="foreign load" />' in xml
    [table] = [b for b in overview.problems(data) if isinstance(b, Table)]
    assert table.head[2:4] == ["category", "action"]
    assert [row[2:4] for row in table.rows] == [["hardware", "drain GPU"], ["foreign load", "rerun"]]


def test_a_gpu_missing_drains_the_node_not_the_gpus_still_there() -> None:
    """A GPU gone from every view has no index: the node drains as a whole, and the GPU still present (named
    in the line beside it) is not the one drained."""
    from tests.test_fault_units import BUS, cuda, nvml
    from tests.test_fault_units import model as h200_x2

    answers = {"pci": list(BUS), "nvml": nvml(0), "torch": cuda(0)}
    result = preflight.check(h200_x2(), {}, lambda env: answers)  # type: ignore[arg-type,return-value]
    line = f"preflight: {result.message}"
    data = doc(errors=[line], cluster={"nodes": [], "preflight": {"ok": False, "categories": {line: result.category}}})
    [node] = build(data, Path("e.json"))["nodes"]
    assert (node["severity"], node["category"], node["action"], node["gpus"]) == ("drain", "hardware", "drain node", [])


def test_the_terminal_says_the_drain_list_s_action() -> None:
    """A node for review says what to do about it (fix the install, fix a setting, rerun) in the terminal's
    drain line, as drain.json and the report do; a drained one says which GPUs, or the node as a whole."""
    from acceptance.plugin.summary import next_lines

    line = "preflight: no C/C++ compiler on PATH: DeepSpeed's CPU communication op ..."
    data = doc(errors=[line], cluster={"nodes": [], "preflight": {"ok": False, "categories": {line: "software"}}})
    found = build(data, Path("ev/evidence.json"))
    shown = next_lines(EvidenceDoc.model_validate(data), "ev/evidence.json", found)
    assert f"drain: gpu-a (review: fix the install): {line}" in shown
    gpu = "preflight: profile h200-x2 expects 2 ... missing GPU 1 (0000:2a:00.0, GPU-c41b)"
    data = doc(errors=[gpu], cluster={"nodes": [], "preflight": {"ok": False, "categories": {gpu: "hardware"}}})
    shown = next_lines(EvidenceDoc.model_validate(data), "ev/evidence.json", build(data, Path("ev/evidence.json")))
    assert f"drain: gpu-a GPU 1 (drain): {gpu}" in shown


def _aliases(answer: str, status: int = 0) -> scheduler.Runner:
    """A stand-in for ``scontrol show aliases HOST``: ``answer`` on stdout; any other command fails the test."""

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert list(argv[:3]) == ["scontrol", "show", "aliases"], argv
        return subprocess.CompletedProcess(argv, status, answer, "" if status == 0 else "error: no such node\n")

    return run


@pytest.mark.parametrize(
    ("way", "env", "answer", "name"),
    [
        ("slurm", {"SLURMD_NODENAME": "c7", "NODE_NAME": "jenkins-agent-7"}, "", "c7"),
        ("slurm", {"NODE_NAME": "jenkins-agent-7"}, "c12\n", "c12"),  # what Slurm itself says for the host
        ("slurm", {"NODE_NAME": "jenkins-agent-7"}, "", None),  # a host Slurm does not know: no name
        ("slurm", {}, "c12 c13\n", None),  # two slurmd on the host: which one is not the run's to guess
        ("kubernetes", {"NODE_NAME": "pool-a-3", "SLURMD_NODENAME": "c7"}, "", "pool-a-3"),
        ("kubernetes", {"SLURMD_NODENAME": "c7"}, "", None),
        ("off", {"SLURMD_NODENAME": "c7"}, "", "c7"),
        ("off", {"NODE_NAME": "jenkins-agent-7"}, "", None),  # the host name stands for it
    ],
)  # fmt: skip
def test_the_node_s_name_comes_from_the_scheduler_that_drains(
    way: str, env: dict[str, str], answer: str, name: str | None
) -> None:
    found, why = scheduler.node_name(way, "gpu-a", env, run=_aliases(answer))
    assert found == name
    if name is None and way == "slurm":
        assert why.startswith("slurm: not applied: ") and "SLURMD_NODENAME is not set" in why
        assert "`scontrol show aliases gpu-a`" in why and why.endswith("no command run")
    if name is None and way == "kubernetes":
        assert "NODE_NAME is not set" in why and "spec.nodeName" in why


def test_a_run_that_cannot_name_its_node_drains_nothing_and_says_so(tmp_path: Path) -> None:
    data = EvidenceDoc.model_validate(doc(errors=["preflight: GPU 0 (0000:18:00.0) missing"]))
    found = drain_hooks.act_on(data, tmp_path, tmp_path / "evidence.json", "kubernetes", {"NODE_NAME": ""})
    assert found is not None and found["commands"] == []
    [line] = found["applied"]
    assert line.startswith("kubernetes: not applied: this run cannot name its node for Kubernetes: NODE_NAME")
    assert json.loads((tmp_path / "drain.json").read_text())["applied"] == [line]


@pytest.mark.e2e  # starts a ``sleep``
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_command_starts_still_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: str
) -> None:
    """The signal lands inside ``subprocess.Popen`` (after the child exists, before the caller holds it): the
    KeyboardInterrupt comes all the same, and the command is killed, not left behind."""
    import os
    import signal

    started: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    def popen_then_signal(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        started.append(real(*args, **kwargs))
        os.kill(os.getpid(), signal.Signals[sig])  # as if it came while Popen still ran
        return started[-1]

    def interrupt_on_term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")  # the session's SIGTERM handler

    monkeypatch.setattr(subprocess, "Popen", popen_then_signal)
    previous = signal.signal(signal.SIGTERM, interrupt_on_term)
    on_int = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            scheduler._run(["sleep", "120"])
        handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for left in started:  # whatever the code under test left running
            if left.poll() is None:
                left.kill()
                left.wait()
    assert scheduler.interrupted_by(raised.value) == sig
    [child] = started
    assert child.returncode == -signal.SIGKILL  # killed and reaped by _run
    assert handlers == (interrupt_on_term, on_int)  # the handlers it deferred are back
