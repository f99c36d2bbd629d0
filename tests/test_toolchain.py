"""The compilers a run builds with, found before anything runs: a node image without one is the install's fault
(review), named with what needs it, never a node to drain."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from acceptance.families.health import NodeInventory
from acceptance.plugin.preflight_hooks import fail_the_gate
from acceptance.profile.model import ProfileModel
from acceptance.profile.registry import FAMILIES
from acceptance.run import preflight, toolchain
from acceptance.schema.toolchain import Need
from tests.test_fault_units import BUS, cuda, nvml
from tests.test_gpu_users import use

CPU = {"name": "local-cpu", "topology": {"device": "cpu", "backend": "gloo"}}
ROOT = Path(__file__).resolve().parent.parent
GPU = {"name": "h200-x2", "topology": {"gpus_per_node": 2, "gpu_model": "NVIDIA H200"}}


def profile(base: dict[str, Any], **training: Any) -> ProfileModel:
    return ProfileModel.model_validate({**base, "training": training} if training else base)


def bin_with(folder: Path, *commands: str) -> str:
    """A PATH of one folder holding an executable for each of ``commands``."""
    folder.mkdir(exist_ok=True)
    for command in commands:
        path = folder / command
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(folder)


def test_deepspeed_on_the_cpu_without_a_cxx_compiler_stops_training_before_it_runs(tmp_path: Path) -> None:
    model = profile(CPU, strategies=["ddp", "zero2", "zero3"])
    result = preflight.check(model, {"PATH": bin_with(tmp_path / "bin", "python3")})
    assert not result.ok and result.category == "software"
    assert result.message.startswith("no C/C++ compiler on PATH: ")
    assert "DeepSpeed's CPU communication op (training: zero2, zero3) is built with $CXX or c++" in result.message
    assert result.families == ("training",)


def test_a_compiler_on_path_or_named_by_its_variable_passes(tmp_path: Path) -> None:
    model = profile(CPU, strategies=["ddp", "zero2"])
    assert preflight.check(model, {"PATH": bin_with(tmp_path / "a", "c++")}).ok
    named = bin_with(tmp_path / "b", "clang++")
    assert preflight.check(model, {"PATH": named, "CXX": "clang++ -O2"}).ok
    missing = preflight.check(model, {"PATH": named, "CXX": "g++-13"})
    assert not missing.ok and "$CXX (g++-13, not on PATH)" in missing.message


def test_a_run_that_builds_nothing_needs_no_compiler(tmp_path: Path) -> None:
    empty = {"PATH": bin_with(tmp_path / "bin")}
    assert preflight.check(profile(CPU, strategies=["ddp", "fsdp"]), empty).ok
    # training is not selected: its needs are not the run's
    assert preflight.check(profile(CPU), empty, families={"connectivity", "collectives"}).ok


def test_torch_compile_on_gpus_names_triton_s_compiler(tmp_path: Path) -> None:
    answers: NodeInventory = {"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda(0, 1)}
    model = profile(GPU, compile="blocks", strategies=["ddp"])
    result = preflight.check(model, {"PATH": bin_with(tmp_path / "bin", "c++")}, lambda env: answers)
    assert not result.ok and result.category == "software"
    assert "torch.compile (training.compile: blocks) builds Triton's launchers with $CC, gcc or clang" in (
        result.message
    )
    with_gcc = {"PATH": bin_with(tmp_path / "bin", "gcc", "cc")}
    assert preflight.check(model, with_gcc, lambda env: answers, ours=lambda pid: False).ok


@pytest.mark.e2e  # a pytest process on the CPU path, with a PATH that has no compiler
def test_a_node_without_a_compiler_is_for_review_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU path with no cc, gcc, g++ or c++ on PATH: the preflight names the compiler and what needs it,
    the training tests are skipped with that line, and the drain list reviews the install: nothing drains."""
    shutil.copytree(ROOT / "tests_cluster", pytester.path / "tests_cluster")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("PATH", bin_with(pytester.path / "bin"))
    for name in ("CLUSTER_PROFILE", "ACCEPTANCE_TEST_FAULT", "CC", "CXX"):
        monkeypatch.delenv(name, raising=False)
    folder = pytester.path / "evidence"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cluster-profile", "local-cpu", "--cluster-evidence", str(folder),
        "tests_cluster/test_training.py", timeout=120,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["preflight: no C/C++ compiler on PATH: DeepSpeed's CPU communication op*c++*"])
    data = json.loads((folder / "evidence.json").read_text())
    assert {t["outcome"] for t in data["tests"]} == {"skipped"}
    [node] = json.loads((folder / "drain.json").read_text())["nodes"]
    assert (node["severity"], node["category"], node["action"]) == ("review", "software", "fix the install")
    assert node["reason"].startswith("2 failures: preflight: no C/C++ compiler on PATH")


def test_a_missing_compiler_leaves_the_gpu_gate_to_its_own_figure() -> None:
    """The gate that counts the GPUs fails with a line about the GPUs, taking its cause; a compiler missing
    stops the families that build with it, and the GPUs are still counted by their own figure."""
    cases: dict[str, SimpleNamespace] = {}
    run = SimpleNamespace(evidence=SimpleNamespace(test=lambda nodeid: cases.setdefault(nodeid, SimpleNamespace())))
    gate = SimpleNamespace(nodeid="test_health.py::test_gate[gpu_count]", get_closest_marker=lambda name: True)
    no_compiler = preflight.PreflightResult(False, "no C/C++ compiler on PATH: ...", category="software",
                                            families=("training",))  # fmt: skip
    fail_the_gate(no_compiler, gate, run)  # type: ignore[arg-type]
    assert cases == {}
    hidden = preflight.PreflightResult(False, "the job's environment hides GPUs: ...", category="environment")
    with pytest.raises(pytest.fail.Exception, match="preflight: the job's environment hides GPUs"):
        fail_the_gate(hidden, gate, run)  # type: ignore[arg-type]
    assert cases[gate.nodeid].category == "environment"


def test_the_collectives_loop_without_a_compiler_runs_from_python_and_fails_nothing(tmp_path: Path) -> None:
    """The collectives' C loop has its own way without a compiler (the calls issued from Python, the figure's
    label says so): alone, it fails no preflight; beside a need that stops a family, it is named too."""
    answers: NodeInventory = {"pci": list(BUS), "nvml": nvml(0, 1), "torch": cuda(0, 1)}
    empty = {"PATH": bin_with(tmp_path / "bin")}
    collectives = {"collectives"}
    result = preflight.check(profile(GPU), empty, lambda env: answers, ours=lambda pid: False, families=collectives)
    assert result.ok, result.message
    both = preflight.check(profile(GPU, compile="blocks"), empty, lambda env: answers, families=None)
    assert not both.ok and both.families == ("training",)
    assert "the collectives' C loop (collectives.timing: auto) is built with $CC or cc" in both.message


def _with(monkeypatch: pytest.MonkeyPatch, module: object, **fields: Any) -> None:
    """The registry as ``module`` reads it, with the connectivity family's behaviour given ``fields``: a
    family's behaviour is its descriptor's, whatever family it is."""
    changed = tuple(
        dataclasses.replace(f, behaviour=dataclasses.replace(f.behaviour, **fields)) if f.name == "connectivity" else f
        for f in FAMILIES
    )
    monkeypatch.setattr(module, "FAMILIES", changed)


def test_the_compilers_a_family_declares_are_looked_up_through_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toolchain knows no family: what a family's probes build with is its descriptor's (``builds_with``),
    and only the selected families' needs are looked up."""
    need = Need("connectivity", "the links' kernels ({setting}) are built", "LINKS_CC", ("links-cc",), "tests")
    _with(monkeypatch, toolchain, builds_with=lambda section, device: [(need, f"on the {device}")])
    model, empty = profile(CPU), {"PATH": bin_with(tmp_path / "bin")}
    result = preflight.check(model, empty, families={"connectivity"})
    assert not result.ok and result.families == ("connectivity",)
    assert "the links' kernels (on the cpu) are built with $LINKS_CC or links-cc" in result.message
    assert preflight.check(model, {"PATH": bin_with(tmp_path / "cc", "links-cc")}, families={"connectivity"}).ok
    assert preflight.check(model, empty, families={"health"}).ok


def test_whether_a_leftover_process_drains_is_the_family_s_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preflight asks the registry (``leftover_drains``) whether another process on a GPU at the start is
    the node's own fault, not the health family's module."""
    answers: NodeInventory = {
        "pci": list(BUS),
        "nvml": nvml(0, 1),
        "torch": cuda(0, 1),
        "users": [use(0), use(1, 4242)],
    }
    model = profile(GPU)

    def judged() -> preflight.PreflightResult:
        return preflight.check(model, {"PATH": os.defpath}, lambda env: answers, ours=lambda pid: False)

    assert judged().category == "foreign load"
    _with(monkeypatch, preflight, leftover_drains=lambda section: True)
    assert judged().category == "configuration"
