"""deploy/slurm/prolog.sh without Slurm: the quick tier on this node, one line out, the exit status a prolog
needs (non-zero: slurmd drains the node, only for a fault of the node's own), the log and the drain list
beside the evidence. Under the real Slurm, deploy/slurm/ci-slurm.sh runs it as the Prolog and checks the
drain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

PROLOG = ROOT / "deploy" / "slurm" / "prolog.sh"
RUN_TIMEOUT_S = 300  # only so that a broken launcher cannot hang CI; nothing here measures speed


def prolog(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTER_", "SLURM", "ACCEPTANCE_"))}
    given = {"VENV": sys.prefix, "RESULTS": str(tmp_path / "results"), "CLUSTER_DRAIN": "off", **env}
    return subprocess.run(
        [str(PROLOG)], env={**base, **given}, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )


@pytest.mark.e2e
def test_a_failing_node_exits_non_zero_with_its_reason_in_one_line(tmp_path: Path) -> None:
    done = prolog(
        tmp_path, CLUSTER_PROFILE="local-cpu", SLURMD_NODENAME="c3", SLURM_JOB_ID="41",
        ACCEPTANCE_TEST_FAULT="preflight",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("cluster-acceptance quick on c3: FAIL (exit 1): drain: c3 (drain): preflight: injected")
    results = tmp_path / "results"
    assert (results / "verdicts.log").read_text().splitlines() == [line]
    [folder] = [p for p in results.iterdir() if p.is_dir()]
    assert folder.name.endswith("-job41-c3") and (results / f"{folder.name}.log").is_file()
    drain = json.loads((folder / "drain.json").read_text())
    assert drain["tier"] == "quick" and drain["nodes"][0]["scheduler_name"] == "c3"


@pytest.mark.e2e
def test_without_a_profile_it_says_so_and_drains_nothing(tmp_path: Path) -> None:
    """A variable missing from slurmd's environment is missing on every node: a non-zero exit would drain
    them all."""
    done = prolog(tmp_path, SLURMD_NODENAME="c3", CLUSTER_DRAIN="slurm")
    assert done.returncode == 0, done.stdout + done.stderr
    line = "cluster-acceptance quick on c3: REVIEW: CLUSTER_PROFILE is not set for the prolog; node not checked\n"
    assert done.stdout == line


@pytest.mark.e2e
def test_the_suite_s_own_install_drains_nothing(tmp_path: Path) -> None:
    """A GPU profile on a CPU-only torch (this machine's): the image's fault, the same on every node; the
    run's stand-in scontrol on PATH must never be called."""
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "scontrol").chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    done = prolog(tmp_path, CLUSTER_PROFILE="h100-x1", SLURMD_NODENAME="c3", CLUSTER_DRAIN="slurm", PATH=path)
    assert done.returncode == 0, done.stdout + done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("cluster-acceptance quick on c3: REVIEW (exit 1, no fault of this node: not drained): ")
    assert "CPU-only build" in line and not log.exists()


@pytest.mark.e2e
def test_a_suite_that_cannot_start_drains_nothing(tmp_path: Path) -> None:
    done = prolog(tmp_path, CLUSTER_PROFILE="no-such-profile", SLURMD_NODENAME="c3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("cluster-acceptance quick on c3: REVIEW (exit 4, no fault of this node")
