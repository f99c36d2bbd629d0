"""The fault matrix: real torchrun jobs on local-cpu, real faults and real signals, and what each one leaves.

Each case checks the exit status, the message (naming the rank), the evidence (complete, never PASS), and
that no process of the run is left: every process the run starts inherits a marker variable, and the
process table (/proc) is searched for it. Faults come from the ranks' ACCEPTANCE_TEST_FAULT knob
(``acceptance.probes.rank``): crash, hang (sleeps) or stop (SIGSTOPs itself) at a phase.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from acceptance.run.worker_pool import EARLY
from tests.harness import PLUGIN_ARGS, ROOT, evidence, free_port
from tests.test_multinode import run_nodes

pytestmark = pytest.mark.e2e  # every test runs the suite in a pytest subprocess and breaks its ranks

HOST = re.escape(socket.gethostname())
MARK = "ACCEPTANCE_FAULT_MARK"  # inherited by pytest, torchrun and every rank of one case
TIMEOUT_S = 60  # --cluster-timeout: enough for two ranks to import torch on a loaded two-core machine
VERDICT_SLACK_S = 15  # the feature's promise: a verdict within the probe's timeout + 15 s
# pytest's own end after the verdict (the evidence, JUnit, the summary) on a loaded machine
PYTEST_END_SLACK_S = 30
LEFTOVER_POLL_S = 10.0  # SIGKILL takes effect at once; this only absorbs a loaded machine's scheduling
HARNESS_TIMEOUT_S = 300  # only so that a broken run cannot hang CI
SMALL = ["--cluster-set", "collectives.ops=[all_reduce, all_gather]", "--cluster-set", "collectives.sizes=[64K, 8M]"]
CONNECTIVITY = ["tests_cluster/test_connectivity.py"]
COLLECTIVES = [*SMALL, "tests_cluster/test_collectives.py"]


class Run:
    """One pytest of the suite in its own session, with a fault, watched from outside."""

    def __init__(
        self,
        suite: pytest.Pytester,
        fault: str,
        args: list[str],
        profile: str = "local-cpu",
        timeout_s: int | None = TIMEOUT_S,
    ) -> None:
        self.mark = uuid.uuid4().hex
        self.folder = suite.path / "evidence"
        # by path: this checkout's profile, not an installed copy of another checkout's
        # (one argument: pytest reads a separate value as a path when it looks for its rootdir)
        argv = [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider",
                f"--cluster-profile={ROOT / 'thresholds' / profile}.yaml", f"--cluster-evidence={self.folder}",
                *(["--cluster-timeout", str(timeout_s)] if timeout_s else []), *args]  # fmt: skip
        env = {**os.environ, MARK: self.mark, "ACCEPTANCE_TEST_FAULT": fault}
        self.proc = subprocess.Popen(
            argv, cwd=suite.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.output = ""

    def wait(self) -> int:
        try:
            self.output, _ = self.proc.communicate(timeout=HARNESS_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return self.proc.returncode

    def wait_for_stopped_rank(self) -> tuple[float, float]:
        """Until a rank of this run sits stopped (state T): the monotonic times the probe was seen to start
        (its folder appeared) and the rank to stop."""
        started = None
        while self.proc.poll() is None:
            if started is None and list(self.folder.glob("probes/*/spec.json")):
                started = time.monotonic()
            if started is not None and any(state == "T" for _, state, _ in processes(self.mark)):
                return started, time.monotonic()
            time.sleep(0.1)
        raise AssertionError(f"pytest ended before a rank stopped:\n{self.proc.communicate()[0]}")

    def evidence(self) -> dict[str, Any]:
        return evidence(self.folder)


def processes(mark: str) -> list[tuple[int, str, str]]:
    """(pid, state, command line) of every live process whose environment holds ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or f"{MARK}={mark}".encode() not in (entry / "environ").read_bytes():
                continue
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or a zombie
            continue
        state = stat[stat.rfind(")") + 2]
        if state != "Z":
            found.append((int(entry.name), state, cmdline))
    return found


def assert_nothing_left(mark: str) -> None:
    deadline = time.monotonic() + LEFTOVER_POLL_S
    while (left := processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, "processes outlived the run:\n" + "\n".join(f"{p} [{s}] {c}" for p, s, c in left)


def assert_failed_evidence(run: Run, complete: bool) -> dict[str, Any]:
    data = run.evidence()
    assert data["verdict"] != "PASS" and data["complete"] is complete, data
    return data


def junit_errors(run: Run) -> int:
    suite = ET.parse(run.folder / f"junit-{socket.gethostname()}.xml").getroot().find("testsuite")
    assert suite is not None
    return int(suite.get("errors") or 0) + int(suite.get("failures") or 0)


def test_a_crashed_rank_is_named_once(suite: pytest.Pytester) -> None:
    run = Run(suite, "crash@1", CONNECTIVITY)
    assert run.wait() == pytest.ExitCode.TESTS_FAILED, run.output
    headline = rf"probe connectivity failed: rank 1 \(host {HOST}, local rank 1\) raised RuntimeError: injected crash"
    # pytest's short summary repeats each message (whole when CI is set), and the drain line below the
    # verdict gives the node's reason: count the failure sections only
    failures = run.output.split("short test summary info")[0].split("cluster acceptance: profile")[0]
    assert len(re.findall(headline, failures)) == 1, run.output
    # the other eight tests of the probe point at the first one instead of repeating its log
    assert failures.count("see tests_cluster/test_connectivity.py::test_world_size above") == 8, run.output
    data = assert_failed_evidence(run, complete=True)
    assert [p["status"] for p in data["probes"]] == ["failed"]
    assert junit_errors(run) == 9
    assert_nothing_left(run.mark)
    # an error of the suite's own code, naming neither the device nor the network: for review, never drained
    [node] = json.loads((run.folder / "drain.json").read_text())["nodes"]
    assert (node["severity"], node["category"], node["action"]) == ("review", "suite", "review")


def test_a_rank_s_device_fault_drains_its_node(suite: pytest.Pytester) -> None:
    """The other side of a crash in the suite's own code: a rank that raised a device fault's error (the words
    of an uncorrectable ECC error) is the node's hardware, and the node drains."""
    run = Run(suite, "ecc@1", CONNECTIVITY)
    assert run.wait() == pytest.ExitCode.TESTS_FAILED, run.output
    assert "uncorrectable ECC error" in run.output, run.output
    [node] = json.loads((run.folder / "drain.json").read_text())["nodes"]
    assert (node["severity"], node["category"], node["action"]) == ("drain", "hardware", "drain node")
    assert_nothing_left(run.mark)


def hung_connectivity(timeout_s: int, origin: str) -> str:
    """The message of a connectivity probe whose rank 1 hung in 'barrier latency' (``hang@1:barrier latency``),
    its limit set by ``origin``."""
    return (
        rf"probe connectivity timed out after {timeout_s} s \({re.escape(origin)}\) and was killed: "
        rf"rank 1 \(host {HOST}, local rank 1\) "
        r"stopped progressing \d+ s ago in phase 'barrier latency' \(progress \d+; pid \d+\); the others wait for it: "
        rf"rank 0 \(host {HOST}, local rank 0\) in phase 'barrier latency'"
    )


def test_a_hung_rank_is_named_with_its_phase(suite: pytest.Pytester) -> None:
    """The limit given as a profile key (``--cluster-set timeouts.connectivity``), not ``--cluster-timeout``:
    a probe killed there is the operator's setting all the same, and the drain list drains nothing for it."""
    limit = ["--cluster-set", f"timeouts.connectivity={TIMEOUT_S}"]
    run = Run(suite, "hang@1:barrier latency", [*limit, *CONNECTIVITY], timeout_s=None)
    assert run.wait() == pytest.ExitCode.TESTS_FAILED, run.output
    # the message says whose setting stopped it: the key, its value and the option that set it
    origin = f"timeouts.connectivity = {TIMEOUT_S} s, --cluster-set timeouts.connectivity={TIMEOUT_S}"
    assert re.search(hung_connectivity(TIMEOUT_S, origin), run.output), run.output
    assert "timed out after" in assert_failed_evidence(run, complete=True)["probes"][0]["error"]
    assert_nothing_left(run.mark)
    [node] = json.loads((run.folder / "drain.json").read_text())["nodes"]
    assert (node["severity"], node["category"], node["action"]) == ("review", "environment", "fix a setting")


def test_a_stopped_rank_gives_a_verdict_within_the_timeout(suite: pytest.Pytester) -> None:
    run = Run(suite, "stop@1:all_reduce 8M", COLLECTIVES)
    started, stopped = run.wait_for_stopped_rank()
    assert run.wait() == pytest.ExitCode.TESTS_FAILED, run.output
    since_start, since_stop = time.monotonic() - started, time.monotonic() - stopped
    # the timeout counts from the probe's start, and a stopped rank ignores SIGTERM: the launcher must not
    # wait for torchrun to give up on it. The verdict is the probe's record; pytest's own end comes on top
    wall_s = run.evidence()["probes"][0]["wall_s"]
    assert wall_s <= TIMEOUT_S + VERDICT_SLACK_S, f"the probe ended {wall_s:.1f} s after it started"
    assert since_start < TIMEOUT_S + PYTEST_END_SLACK_S, f"pytest ended {since_start:.1f} s after the probe started"
    culprit = (
        rf"rank 1 \(host {HOST}, local rank 1\) stopped progressing \d+ s ago in phase 'all_reduce 8M' "
        r"\(progress \d+; pid \d+; process stopped \(SIGSTOP or a debugger\)\); the others wait for it: rank 0"
    )
    assert re.search(culprit, run.output), run.output
    sys.stderr.write(f"stopped rank: verdict {since_start:.1f} s after the probe started, {since_stop:.1f} s after "
                     f"the stop (timeout {TIMEOUT_S} s)\n")  # fmt: skip
    assert_failed_evidence(run, complete=True)
    assert_nothing_left(run.mark)


def test_sigkill_of_pytest_takes_every_process_with_it(suite: pytest.Pytester) -> None:
    run = Run(suite, "stop@1:start", CONNECTIVITY)
    run.wait_for_stopped_rank()
    assert processes(run.mark), "the probe's processes should be running now"
    run.proc.kill()
    assert run.wait() == -signal.SIGKILL
    assert_nothing_left(run.mark)


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT], [signal.SIGINT, signal.SIGINT]],
                         ids=["SIGTERM", "SIGINT", "double-SIGINT"])  # fmt: skip
def test_an_interrupted_hang_ends_every_process(suite: pytest.Pytester, signals: list[signal.Signals]) -> None:
    run = Run(suite, "stop@1:start", CONNECTIVITY)
    run.wait_for_stopped_rank()
    start = time.monotonic()
    for sig in signals:
        run.proc.send_signal(sig)
        time.sleep(0.5)
    assert run.wait() == pytest.ExitCode.INTERRUPTED, run.output
    assert time.monotonic() - start <= VERDICT_SLACK_S, "ending a stopped rank must not wait for torchrun's grace"
    data = assert_failed_evidence(run, complete=False)
    assert [p["status"] for p in data["probes"]] == ["interrupted"]
    assert_nothing_left(run.mark)


def test_a_busy_rendezvous_port_is_named(tmp_path: Path) -> None:
    port = free_port()
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    envs = [{**common, "NODE_RANK": str(r)} for r in range(2)]
    short = ["--cluster-timeout", "30"]
    with socket.socket() as squatter:  # a leftover store, or another run, holding the port
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        head, _ = run_nodes(tmp_path, envs, extra=[short, short])
    assert head.returncode == pytest.ExitCode.TESTS_FAILED, head.output[-6000:]
    cause = (
        rf"probe connectivity exited with status 1 and left no result; torchrun.log says: .*port: {port}.*EADDRINUSE"
    )
    assert re.search(cause, head.output), head.output[-6000:]
    assert "hint: the rendezvous port is taken on this host" in head.output
    assert "EADDRINUSE" in head.evidence()["probes"][0]["error"]


def test_a_gpu_profile_on_a_cpu_only_torch_is_one_line(suite: pytest.Pytester) -> None:
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this node has an NVIDIA driver: a GPU profile would run its probes here")
    run = Run(suite, "", ["tests_cluster/"], profile="h200-x2")
    assert run.wait() == pytest.ExitCode.TESTS_FAILED, run.output
    line = "profile h200-x2 runs on CUDA GPUs (topology.device: cuda), but this torch * is a CPU-only build*"
    # the line twice: the failing health gate, and the summary's first line, which says the cause and what to do
    shown = [text for text in run.output.splitlines() if text.startswith(("preflight", "cause"))]
    assert len(shown) == 2, run.output
    assert fnmatch.fnmatch(shown[0], f"preflight: {line}") and fnmatch.fnmatch(
        shown[1], f"cause (fix the install): {line}"
    )
    # the soak is opt-in (deselected); the fabric counters need no GPU and are recorded
    assert re.search(r"=+ \d+ skipped, \d+ deselected, 1 error, 1 recorded in ", run.output), run.output
    assert len(run.output.splitlines()) < 60 and "_cuda_setDevice" not in run.output, run.output
    data = assert_failed_evidence(run, complete=True)
    assert data["errors"][0].startswith("preflight: profile h200-x2") and data["probes"] == []
    assert data["cluster"]["preflight"]["ok"] is False
    assert (run.folder / "workers" / EARLY / "torchrun.log").is_file()  # started beside the preflight, then ended
    assert_nothing_left(run.mark)
