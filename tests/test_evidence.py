"""The evidence file: allow-listed environment, atomic writes, the schema, JUnit built from it, merging."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest

from acceptance.atomic_file import write_atomic
from acceptance.evidence.environment import allowed_env
from acceptance.evidence.junit import junit_xml
from acceptance.evidence.merge import merge
from acceptance.evidence.model import Check, schema_text
from acceptance.evidence.store import WRITE_EVERY_S, Evidence, EvidenceError, as_data, read_evidence
from tests.harness import EVIDENCE, ROOT, schema

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "secret-value-1",
    "AWS_ACCESS_KEY_ID": "secret-value-2",
    "HF_TOKEN": "secret-value-3",
    "NCCL_API_TOKEN": "secret-value-4",
    "CUDA_AUTH_PASSWORD": "secret-value-5",
    "TORCH_SECRET": "secret-value-6",
    "GITHUB_TOKEN": "secret-value-7",
    "WANDB_API_KEY": "secret-value-8",
    "SSH_AUTH_SOCK": "secret-value-9",
    "NVIDIA_API_KEY": "secret-value-10",
}
KEPT = {
    "NCCL_IB_DISABLE": "0",
    "NCCL_DEBUG": "INFO",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "OMP_NUM_THREADS": "1",
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_GPUS": "2,3",  # a job's share of its node
    "SLURM_GPUS_ON_NODE": "2",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
}


def test_allowed_env_keeps_settings_and_drops_secrets() -> None:
    env = {**SECRETS, **KEPT, "HOME": "/root", "PATH": "/usr/bin", "LD_PRELOAD": "x.so", "USER": "me"}
    assert allowed_env(env) == dict(sorted(KEPT.items()))


def test_evidence_env_never_holds_secrets(tmp_path: Path) -> None:
    doc = Evidence(tmp_path, _profile(), _topology(), {**os.environ, **SECRETS, **KEPT})
    doc.write()
    text = (tmp_path / "evidence.json").read_text()
    for name, value in SECRETS.items():
        assert name not in text and f'"{value}"' not in text
    assert json.loads(text)["cluster"]["env"]["NCCL_IB_DISABLE"] == "0"


def test_secret_settings_are_masked_in_the_profile_and_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = _profile()
    env = {
        "HF_TOKEN": "hf_leak1",
        "AWS_SECRET_ACCESS_KEY": "leak2",
        "NCCL_IB_PKEY": "leak3",
        "NCCL_DEBUG": "INFO",
    }
    profile["resolved"]["env"] = env
    argv = ["pytest", "--cluster-set", "env.HF_TOKEN=hf_leak4", "--cluster-set=env.AWS_SECRET_ACCESS_KEY=leak5",
            "--cluster-set", "env.NCCL_DEBUG=WARN", "--cluster-set", "env={WANDB_API_KEY: leak6}",
            "--cluster-set", "training.micro_batch=8", "tests_cluster/"]  # fmt: skip
    monkeypatch.setattr("sys.argv", argv)
    doc = Evidence(tmp_path, profile, _topology(), {"HF_TOKEN": "hf_leak7", "NCCL_IB_PKEY": "leak8"})
    text = doc.write().read_text()
    assert "leak" not in text, text
    data = json.loads(text)
    assert data["profile"]["resolved"]["env"] == {
        "HF_TOKEN": "***", "AWS_SECRET_ACCESS_KEY": "***", "NCCL_IB_PKEY": "***", "NCCL_DEBUG": "INFO"
    }  # fmt: skip
    assert data["command"] == [
        "pytest", "--cluster-set", "env.HF_TOKEN=***", "--cluster-set=env.AWS_SECRET_ACCESS_KEY=***",
        "--cluster-set", "env.NCCL_DEBUG=WARN", "--cluster-set", "env=***",
        "--cluster-set", "training.micro_batch=8", "tests_cluster/",
    ]  # fmt: skip
    assert data["cluster"]["env"] == {}
    assert env["HF_TOKEN"] == "hf_leak1"  # the run itself keeps the real value


def test_write_atomic_replaces_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "evidence.json"
    write_atomic(target, "first")
    write_atomic(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["evidence.json"]


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "evidence.json"
    write_atomic(target, "old")

    def broken(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("acceptance.atomic_file.os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, "new")
    assert target.read_text() == "old"


def test_write_atomic_never_shares_a_temporary_file_with_a_writer_of_the_same_host_and_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two containers of one host: the host's name, and each its own pid namespace, so the same pid
    monkeypatch.setattr("acceptance.atomic_file.socket.gethostname", lambda: "vm")
    monkeypatch.setattr("acceptance.atomic_file.os.getpid", lambda: 7)
    target = tmp_path / "evidence.json"
    other = tmp_path / ".evidence.json.vm.7.tmp"  # the other writer's temporary file, by host and pid alone
    other.write_text("the other writer's")
    used: list[str] = []

    def replace_then_fail(src: Path, dst: Path) -> None:
        used.append(Path(src).name)
        raise OSError("disk full")

    monkeypatch.setattr("acceptance.atomic_file.os.replace", replace_then_fail)
    for _ in range(2):
        with pytest.raises(OSError, match="disk full"):
            write_atomic(target, "new")
    assert len(set(used)) == 2 and all(n.startswith(".evidence.json.vm.7.") for n in used)
    assert other.read_text() == "the other writer's"  # neither written into nor removed by the failed writes
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name]


def test_outcome_writes_wait_for_the_interval_and_any_other_write_takes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr("acceptance.evidence.store.time.monotonic", lambda: clock[0])
    doc = Evidence(tmp_path, _profile(), _topology(), {})
    doc.write()

    def checks_on_disk() -> int:
        return sum(len(t["checks"]) for t in json.loads(doc.path.read_text())["tests"])

    doc.add_check("t::a", Check(metric="m", value=1.0, unit="s", bound="", verdict="info", threshold=None))
    doc.write(soon=True)
    assert checks_on_disk() == 0  # within WRITE_EVERY_S of the last write: waits
    clock[0] += WRITE_EVERY_S
    doc.write(soon=True)
    assert checks_on_disk() == 1
    doc.add_check("t::b", Check(metric="m", value=2.0, unit="s", bound="", verdict="info", threshold=None))
    doc.write(soon=True)
    assert checks_on_disk() == 1
    doc.write()  # a probe's start or end, the session's end: at once, with what waited
    assert checks_on_disk() == 2


def test_fresh_evidence_is_valid_and_incomplete(tmp_path: Path) -> None:
    doc = Evidence(tmp_path, _profile(), _topology(), {})
    data = json.loads(doc.write().read_text())
    jsonschema.validate(data, schema())
    assert data["complete"] is False and data["verdict"] == "FAIL"


def test_filled_evidence_is_valid(tmp_path: Path) -> None:
    data = as_data(_filled(tmp_path).doc)
    jsonschema.validate(json.loads(json.dumps(data)), schema())


def test_schema_rejects_a_bad_verdict(tmp_path: Path) -> None:
    data = json.loads(json.dumps(as_data(_filled(tmp_path).doc)))
    data["tests"][0]["checks"][0]["verdict"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema())


def test_shipped_schema_is_generated_from_the_model() -> None:
    # regenerate with: python -c "from acceptance.evidence.model import schema_text; print(schema_text(), end='')"
    shipped = ROOT / "acceptance" / "evidence" / "evidence.schema.json"
    assert shipped.read_text() == schema_text(), "evidence.schema.json differs from the model: regenerate it"
    jsonschema.Draft202012Validator.check_schema(schema())


def test_reading_validates_the_evidence(tmp_path: Path) -> None:
    path = _filled(tmp_path).path
    assert read_evidence(path).verdict == "FAIL"
    data = json.loads(path.read_text())
    data["tests"][0]["checks"][0]["verdict"] = "maybe"
    path.write_text(json.dumps(data))
    with pytest.raises(EvidenceError, match=r"tests\.0\.checks\.0\.verdict"):
        read_evidence(path)
    path.write_text("{")
    with pytest.raises(EvidenceError, match="cannot read evidence"):
        read_evidence(path)


@pytest.mark.parametrize("folder", sorted(EVIDENCE.glob("**/evidence.json")), ids=str)
def test_committed_evidence_still_validates(folder: Path) -> None:
    read_evidence(folder)


def test_junit_from_evidence_parses(tmp_path: Path) -> None:
    root = ET.fromstring(junit_xml(_filled(tmp_path).doc))
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "3" and suite.get("failures") == "1" and suite.get("skipped") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"test_busbw[all_reduce-1G]", "test_world_size", "test_busbw[sendrecv-1G]"}
    failure = cases["test_busbw[all_reduce-1G]"].find("failure")
    assert failure is not None and "expected >= 350" in (failure.get("message") or "")
    assert cases["test_busbw[all_reduce-1G]"].get("classname") == "tests_cluster.test_collectives"
    out = cases["test_world_size"].findtext("system-out") or ""
    assert "connectivity.world_size = 2 ranks [== 2] pass" in out
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["profile"] == "unit" and props["verdict"] == "FAIL"


def test_a_test_that_did_not_finish_is_a_junit_error(tmp_path: Path) -> None:
    doc = _filled(tmp_path)
    doc.test("tests_cluster/test_training.py::test_strategy[ddp]")  # the run was killed inside it
    doc.test("tests_cluster/test_training.py::test_canary").outcome = "not_run"
    suite = ET.fromstring(junit_xml(doc.doc)).find("testsuite")
    assert suite is not None and suite.get("errors") == "1" and suite.get("failures") == "1"
    assert suite.get("skipped") == "2"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    error = cases["test_strategy[ddp]"].find("error")
    assert error is not None and (error.get("message") or "").startswith("did not finish: the run was interrupted")
    skipped = cases["test_canary"].find("skipped")
    assert skipped is not None and "not run" in (skipped.get("message") or "")
    assert cases["test_world_size"].find("error") is None and cases["test_world_size"].find("failure") is None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def test_a_value_that_is_not_a_number_is_written_as_null(tmp_path: Path) -> None:
    doc = _filled(tmp_path)
    entry = doc.test("tests_cluster/test_compute.py::test_median[matmul_tflops]")
    entry.outcome, entry.duration_s = "failed", 0.5
    entry.checks.append(_check("compute.matmul_tflops_median", float("nan"), "TFLOP/s", ">= 700", "fail", {"min": 700}))
    entry.measurements["summary"] = {"min": float("inf"), "rows": [float("-inf"), 1.5]}
    data = json.loads(doc.write().read_text(), parse_constant=_no_constant)
    jsonschema.validate(data, schema())
    written = data["tests"][-1]
    assert written["checks"][0]["value"] is None
    assert written["measurements"]["summary"] == {"min": None, "rows": [None, 1.5]}
    assert cast(dict[str, Any], doc.doc.tests[-1].measurements["summary"])["min"] == float(
        "inf"
    )  # the live data is left alone
    xml = junit_xml(doc.doc)
    assert "nan" not in xml.lower() and "compute.matmul_tflops_median = not a number TFLOP/s" in xml


def test_merge_prefixes_hosts_and_ands_verdicts(tmp_path: Path) -> None:
    a = _filled(tmp_path / "a", host="node-a", verdict="PASS")
    b = _filled(tmp_path / "b", host="node-b", verdict="PASS")
    both = merge([a.doc, b.doc])
    assert both.verdict == "PASS" and both.complete is True
    assert [t.nodeid.split("::")[0] for t in both.tests] == ["node-a"] * 2 + ["node-b"] * 2
    assert [m.host for m in both.merged_from or []] == ["node-a", "node-b"]
    assert {t.node for t in both.tests} == {"node0-node-a", "node0-node-b"}
    jsonschema.validate(json.loads(json.dumps(as_data(both))), schema())
    c = _filled(tmp_path / "c", host="node-c", verdict="FAIL", complete=False)
    worse = merge([a.doc, c.doc])
    assert worse.verdict == "FAIL" and worse.complete is False
    partial = _filled(tmp_path / "d", host="node-d", verdict="PARTIAL")
    assert merge([a.doc, partial.doc]).verdict == "PARTIAL"
    old = b.doc.model_copy(update={"partial": True})  # written before PARTIAL existed: PASS with the flag
    assert merge([a.doc, old]).verdict == "PARTIAL"
    assert a.doc.tests[0].nodeid.startswith("tests_cluster/") and a.doc.tests[0].node is None  # left alone
    assert "node" not in cast(Any, as_data(a.doc))["tests"][0]  # a node's own file names no node


def test_merge_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="nothing to merge"):
        merge([])


def _profile() -> dict[str, Any]:
    return {"name": "unit", "path": "/x/unit.yaml", "sha256": "0" * 64, "extends": [], "resolved": {"name": "unit"}}


def _topology(host: str = "node-a") -> dict[str, Any]:
    return {"nodes": 1, "node_rank": 0, "head": "127.0.0.1:29400", "source": "test", "ranks_per_node": 2,
            "world_size": 2, "host": host}  # fmt: skip


def _filled(folder: Path, host: str = "node-a", verdict: Any = "FAIL", complete: bool = True) -> Evidence:
    doc = Evidence(folder, _profile(), _topology(host), {})
    if verdict == "FAIL":  # the failed figure a FAIL records; a run that passed has none
        bad = doc.test("tests_cluster/test_collectives.py::test_busbw[all_reduce-1G]")
        bad.outcome, bad.duration_s, bad.longrepr = "failed", 0.5, "..."
        bad.message = "collectives.all_reduce.busbw_gbps@1G = 312.4 GB/s, expected >= 350 (profile unit)"
        bad.checks.append(_check("collectives.all_reduce.busbw_gbps@1G", 312.4, "GB/s", ">= 350", "fail", {"min": 350}))
    good = doc.test("tests_cluster/test_connectivity.py::test_world_size")
    good.outcome, good.duration_s = "passed", 0.1
    good.checks.append(_check("connectivity.world_size", 2, "ranks", "== 2", "pass", {"eq": 2}))
    skipped = doc.test("tests_cluster/test_collectives.py::test_busbw[sendrecv-1G]")
    skipped.outcome, skipped.message = "skipped", "needs 2 ranks"
    probe = doc.probe("collectives", "collectives")
    probe.status, probe.result = "ok", {"rows": []}
    doc.finish(verdict, complete=complete)
    doc.write()
    return doc


def _check(metric: str, value: float, unit: str, bound: str, verdict: Any, threshold: dict[str, Any]) -> Check:
    return Check(metric=metric, value=value, unit=unit, bound=bound, verdict=verdict, threshold=threshold)


def test_every_reader_reads_the_one_decision_of_an_edited_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file edited to say PASS beside a failed figure (its test left "passed") reads FAIL in JUnit, the
    summary, compare, the report and a merge: each reads the verdict decided from the figures' verdicts."""
    from acceptance.cli.main import main
    from acceptance.plugin.summary import family_lines, summary_lines
    from acceptance.reports import compare

    path = _filled(tmp_path / "run", verdict="PASS").path
    edited = json.loads(path.read_text())
    edited["tests"][0]["checks"][0]["verdict"] = "fail"  # connectivity.world_size, its test still "passed"
    assert edited["verdict"] == "PASS" and edited["tests"][0]["outcome"] == "passed"
    path.write_text(json.dumps(edited))
    assert read_evidence(path).verdict == "FAIL"

    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(read_evidence(path))).iter("property")}
    assert props["verdict"] == "FAIL"
    lines = [line for line, _ in summary_lines(read_evidence(path), str(path))]
    assert lines[-1].startswith("verdict: FAIL;")
    assert family_lines(read_evidence(path))[0][0].split()[:2] == ["connectivity", "FAIL"]
    good = _filled(tmp_path / "good", verdict="PASS").doc
    heading = compare.summary(good, read_evidence(path), [], ("old", "new"))
    assert heading[0].startswith("old: old: PASS,") and heading[1].startswith("new: new: FAIL,")
    assert main(["report", str(path)]) == 0
    assert (path.parent / "report.md").read_text().startswith("# Cluster acceptance: FAIL\n")
    assert main(["merge", str(path), "-o", str(tmp_path / "merged.json")]) == 1
    assert json.loads((tmp_path / "merged.json").read_text())["verdict"] == "FAIL"
    assert "wrote" in capsys.readouterr().out


def test_a_recorded_test_is_a_passing_junit_case_that_says_so(tmp_path: Path) -> None:
    """A test whose figures have no bound held no gate but found nothing wrong: JUnit shows it as a passing case
    (a healthy run reads green on a dashboard), marked ``cluster_outcome=recorded`` beside its figures, as
    pytest's own --junitxml shows it; only a test that did not run is skipped."""
    doc = _filled(tmp_path, verdict="PASS")
    recorded = doc.test("tests_cluster/test_fabric.py::test_counters")
    recorded.outcome, recorded.message = "recorded", "information only"
    recorded.checks.append(_check("fabric.link_down", 0, "events", "", "info", {}))
    suite = ET.fromstring(junit_xml(doc.doc)).find("testsuite")
    assert suite is not None
    counted = [suite.get(key) for key in ("tests", "skipped", "failures", "errors")]
    assert counted == ["3", "1", "0", "0"]
    case = next(c for c in suite.iter("testcase") if c.get("name") == "test_counters")
    assert [child.tag for child in case if child.tag in ("skipped", "failure", "error")] == []
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["cluster_outcome"] == "recorded"
    assert (props["fabric.link_down"], props["fabric.link_down.verdict"]) == ("0", "info")
