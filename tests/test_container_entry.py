"""The container's entry point refuses to run without a profile and passes the rest to pytest."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.cli.container import EntryError, pytest_args


def test_profile_and_evidence_from_the_environment(tmp_path: Path) -> None:
    env = {"CLUSTER_PROFILE": "h200-x2", "CLUSTER_TESTS": str(tmp_path)}
    assert pytest_args(env, ["-k", "connectivity"]) == [
        "-p",
        "no:cacheprovider",
        str(tmp_path),
        "--cluster-profile",
        "h200-x2",
        "--cluster-evidence",
        "/results",
        "-k",
        "connectivity",
    ]


def test_evidence_folder_can_move(tmp_path: Path) -> None:
    env = {"CLUSTER_PROFILE": "p", "CLUSTER_TESTS": str(tmp_path), "CLUSTER_EVIDENCE": "/mnt/out"}
    assert pytest_args(env, [])[-1] == "/mnt/out"


@pytest.mark.parametrize("value", [None, "", "  "])
def test_no_profile_is_refused_rather_than_skipping_everything(value: str | None) -> None:
    env = {} if value is None else {"CLUSTER_PROFILE": value}
    with pytest.raises(EntryError, match="CLUSTER_PROFILE is not set"):
        pytest_args(env, [])


def test_missing_tests_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(EntryError, match="no such folder"):
        pytest_args({"CLUSTER_PROFILE": "p", "CLUSTER_TESTS": str(tmp_path / "nope")}, [])
