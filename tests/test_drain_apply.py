"""``--cluster-drain`` end to end on the CPU path: which name the drain uses, and what ``drain.json`` holds
when a signal or a SIGKILL cuts the scheduler's commands short. A stand-in ``scontrol`` on PATH logs its
argv; the run fails at its preflight (``ACCEPTANCE_TEST_FAULT=preflight``), so the drain is all it does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import PLUGIN_ARGS

pytestmark = pytest.mark.e2e  # each test runs the suite's quick tier in a pytest subprocess

RUN_TIMEOUT_S = 300  # only so that a broken run cannot hang CI; nothing here measures speed
# logs each call's argv on one line; ``update`` (the drain) sleeps until killed, where the test asks for it,
# after writing its pid beside the log
SCONTROL = """#!/bin/sh
echo "$*" >> "{log}"
if [ "$1" = update ] && [ -n "{sleep}" ]; then
  echo $$ > "{log}.pid"
  exec sleep {sleep}
fi
"""


def _scontrol(folder: Path, monkeypatch: pytest.MonkeyPatch, sleep: str = "") -> Path:
    bin_dir, log = folder / "bin", folder / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL.format(log=log, sleep=sleep))
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "preflight")
    for name in ("SLURMD_NODENAME", "NODE_NAME", "CLUSTER_DRAIN"):
        monkeypatch.delenv(name, raising=False)
    return log


def _argv(evidence: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile",
            "local-cpu", "--cluster-evidence", str(evidence), "--cluster-tier", "quick", "--cluster-drain", "slurm",
            "tests_cluster/"]  # fmt: skip


def test_another_system_s_node_name_is_never_drained(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI agent's ``NODE_NAME`` under ``--cluster-drain slurm``, no ``SLURMD_NODENAME``, and a Slurm that
    knows no node for this host: nothing is drained, and the terminal and drain.json say which name was
    needed."""
    log = _scontrol(suite.path, monkeypatch)
    monkeypatch.setenv("NODE_NAME", "jenkins-agent-7")
    folder = suite.path / "ev"
    result = suite.runpytest_subprocess(*_argv(folder)[3:], timeout=RUN_TIMEOUT_S)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    calls = log.read_text().splitlines() if log.exists() else []
    assert not [c for c in calls if c.startswith("update")], calls  # no drain of any name
    assert "jenkins-agent-7" not in "\n".join(calls)
    drain = json.loads((folder / "drain.json").read_text())
    [node] = drain["nodes"]
    assert node["severity"] == "drain" and node["scheduler_name"] != "jenkins-agent-7"
    [line] = drain["applied"]
    assert line.startswith("slurm: not applied: ") and "SLURMD_NODENAME" in line
    assert drain["commands"] == []
    result.stdout.fnmatch_lines(["drain applied: slurm: not applied: *SLURMD_NODENAME is not set*"])


@contextlib.contextmanager
def _started(suite: pytest.Pytester, log: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The run, started in the background; yields once the stand-in scontrol's ``update`` is running. Ends
    the run and the stand-in, whatever the test left of them (a SIGKILL of the run orphans the stand-in)."""
    folder, pid_file = suite.path / "ev", log.with_name(log.name + ".pid")
    proc = subprocess.Popen(_argv(folder), cwd=suite.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert proc.poll() is None, proc.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "scontrol update never started"
            time.sleep(0.1)
        yield proc, folder
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if pid_file.exists() and not _gone(pid := int(pid_file.read_text())):
            os.kill(pid, signal.SIGKILL)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_drain_runs_leaves_the_verdict_the_list_and_exit_2(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    log = _scontrol(suite.path, monkeypatch, sleep="120")
    monkeypatch.setenv("SLURMD_NODENAME", "c7")
    with _started(suite, log) as (proc, folder):
        drain = json.loads((folder / "drain.json").read_text())  # written before the command ran
        assert drain["nodes"][0]["scheduler_name"] == "c7"
        [running] = drain["commands"]
        assert running["argv"][:3] == ["scontrol", "update", "nodename=c7"] and running["status"] == "running"
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-4000:]
        assert "Traceback" not in output, output[-4000:]
        assert "verdict: FAIL" in output, output[-4000:]
        drain = json.loads((folder / "drain.json").read_text())
        assert drain["interrupted"] == sig.name
        [stopped] = drain["commands"]
        assert stopped["status"] == "interrupted" and stopped["exit"] is None
        assert drain["applied"][-1].startswith("scontrol update nodename=c7 state=drain reason=")
        assert f"interrupted by {sig.name}" in drain["applied"][-1]
        assert _gone(int(log.with_name(log.name + ".pid").read_text()))  # the command it cut short is gone too


def test_a_sigkill_while_the_drain_runs_leaves_the_list(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _scontrol(suite.path, monkeypatch, sleep="120")
    monkeypatch.setenv("SLURMD_NODENAME", "c7")
    with _started(suite, log) as (proc, folder):
        proc.kill()
        proc.communicate(timeout=RUN_TIMEOUT_S)
        drain = json.loads((folder / "drain.json").read_text())
        assert drain["verdict"] == "FAIL" and drain["nodes"][0]["severity"] == "drain"
        assert [c["status"] for c in drain["commands"]] == ["running"]  # what was under way when it died


def test_each_command_s_argv_exit_status_and_last_line_are_recorded(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _scontrol(suite.path, monkeypatch)
    failing = 'echo "slurm_update error: first" >&2\necho "Invalid node name" >&2\nexit 1\n'
    (suite.path / "bin" / "scontrol").write_text(SCONTROL.format(log=log, sleep="") + failing)
    monkeypatch.setenv("SLURMD_NODENAME", "c7")
    folder = suite.path / "ev"
    result = suite.runpytest_subprocess(*_argv(folder)[3:], timeout=RUN_TIMEOUT_S)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    drain = json.loads((folder / "drain.json").read_text())
    [done] = drain["commands"]
    assert done["argv"][:4] == ["scontrol", "update", "nodename=c7", "state=drain"]
    assert (done["status"], done["exit"], done["stderr"]) == ("done", 1, "Invalid node name")
    assert drain["interrupted"] is None
