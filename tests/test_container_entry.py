"""The container's entry point refuses to run without a profile, runs the installed suite, writes each run's
evidence to its own folder, and passes the rest to pytest."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from acceptance.cli import container
from acceptance.cli.container import EntryError, main, pytest_args


def test_profile_and_evidence_from_the_environment(tmp_path: Path) -> None:
    env = {"CLUSTER_PROFILE": "h200-x2", "CLUSTER_TESTS": str(tmp_path), "CLUSTER_RUN_ID": "job-7"}
    assert pytest_args(env, ["-k", "connectivity"]) == [
        "-p",
        "no:cacheprovider",
        f"--rootdir={tmp_path}",
        str(tmp_path),
        "--cluster-profile",
        "h200-x2",
        "--cluster-evidence",
        "/results/job-7",
        "-k",
        "connectivity",
    ]


def test_evidence_root_can_move(tmp_path: Path) -> None:
    env = {"CLUSTER_PROFILE": "p", "CLUSTER_TESTS": str(tmp_path), "CLUSTER_EVIDENCE": "/mnt/out"}
    env["CLUSTER_RUN_ID"] = "r"
    assert pytest_args(env, [])[-1] == "/mnt/out/r"


def test_without_a_run_id_each_run_gets_a_new_folder_named_by_time_and_host(tmp_path: Path) -> None:
    folder = pytest_args({"CLUSTER_PROFILE": "p", "CLUSTER_TESTS": str(tmp_path), "CLUSTER_RUN_ID": " "}, [])[-1]
    parent, name = folder.rsplit("/", 1)
    assert parent == "/results"
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}Z-{re.escape(socket.gethostname())}", name), name


def test_the_installed_suite_is_the_default(tmp_path: Path) -> None:
    args = pytest_args({"CLUSTER_PROFILE": "p", "CLUSTER_RUN_ID": "r"}, [])
    suite = Path(args[3])
    assert suite == container.suite_dir()
    assert (suite / "conftest.py").is_file() and (suite / "test_connectivity.py").is_file()


@pytest.mark.parametrize("value", [None, "", "  "])
def test_no_profile_is_refused_rather_than_skipping_everything(value: str | None) -> None:
    env = {} if value is None else {"CLUSTER_PROFILE": value}
    with pytest.raises(EntryError, match="CLUSTER_PROFILE is not set"):
        pytest_args(env, [])


def test_missing_tests_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(EntryError, match="no such folder"):
        pytest_args({"CLUSTER_PROFILE": "p", "CLUSTER_TESTS": str(tmp_path / "nope")}, [])


def test_the_entry_point_exits_with_the_usage_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CLUSTER_PROFILE", raising=False)
    assert main([]) == pytest.ExitCode.USAGE_ERROR
    assert "cluster-acceptance container: CLUSTER_PROFILE is not set" in capsys.readouterr().err
