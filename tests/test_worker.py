"""The node's probe worker: which probes it runs, how the nodes agree to keep it, the logs it hands each
probe, and, end to end on local-cpu, several probes in one job, a crash and a hang that end it while the
next probe runs in a fresh one, and no process left behind."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

from acceptance.plugin.options import on_off
from acceptance.run import launcher, reaper
from acceptance.run import worker_pool as worker_module
from acceptance.run.placement import Placement
from acceptance.run.worker_pool import EARLY, Worker, Workers, copy_logs, log_sizes
from acceptance.schema.topology import Topology
from tests.test_faults import Run, assert_nothing_left, hung_connectivity

CPU = Topology(device="cpu", backend="gloo", ranks_per_node=2)
ONE_NODE = Placement(1, 0, "127.0.0.1", 29400, "default")
HOST = re.escape(socket.gethostname())
FAST = ["tests_cluster/test_connectivity.py", "tests_cluster/test_compute.py", "tests_cluster/test_storage.py"]
# the probe lists these tests expect hold only when no compute figure is measured again: tolerance 1, as
# two CPU ranks on two loaded cores have read one 39% under their median, close to local-cpu's 50%, and
# a second reading (compute-again-1) would add a probe to the list
ONE_READING = ["--cluster-set", "compute.tolerance=1"]


def workers(topo: Topology = CPU, placement: Placement = ONE_NODE, enabled: bool = True) -> Workers:
    return Workers(enabled, Path("/nonexistent/workers"), topo, placement, {"OMP_NUM_THREADS": "1"}, 180.0)


def test_the_worker_takes_full_world_probes_with_the_sessions_environment() -> None:
    pool = workers()
    for probe in ("connectivity", "health", "compute", "storage", "collectives", "internode", "isolation"):
        assert pool.takes(probe, {}, CPU, ONE_NODE), probe
    assert pool.takes("connectivity", {"ACCEPTANCE_NODE_RANK": "0"}, CPU, ONE_NODE)


def test_training_a_smaller_world_and_a_variable_of_its_own_keep_a_job_of_their_own() -> None:
    pool = workers()
    assert not pool.takes("training", {}, CPU, ONE_NODE)
    assert not pool.takes("training", {}, CPU.model_copy(update={"ranks_per_node": 1}), ONE_NODE)
    assert not pool.takes("compute", {}, CPU.model_copy(update={"ranks_per_node": 1}), ONE_NODE)
    assert not pool.takes("internode", {"NCCL_ALGO": "Ring"}, CPU, ONE_NODE)
    two = Placement(2, 1, "gpu-01", 29400, "slurm")
    one_of_two = Placement(1, 0, "gpu-01", 29400, "slurm, one node of 2")
    assert workers(placement=two).takes("connectivity", {"ACCEPTANCE_NODE_RANK": "1"}, CPU, two)
    assert not workers(placement=two).takes("connectivity", {}, CPU, one_of_two)
    assert not workers(enabled=False).takes("compute", {}, CPU, ONE_NODE)


def test_under_srun_every_probe_keeps_a_job_of_its_own() -> None:
    srun = CPU.model_copy(update={"launcher": "srun"})
    assert not workers(srun).takes("compute", {}, srun, ONE_NODE)
    assert workers(srun).session_env == {}  # the probe reads SLURM_NODEID there


def test_only_one_node_under_torchrun_starts_its_worker_with_the_session() -> None:
    two = Placement(2, 1, "gpu-01", 29400, "slurm")  # the nodes start theirs together, at the first probe
    srun = CPU.model_copy(update={"launcher": "srun"})
    for pool in (workers(placement=two), workers(srun), workers(enabled=False)):
        assert not pool.start_early("run", 60.0) and pool.current is None


class FakeWorker:
    alive = True
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("tokens", "kept"),
    [(["03-storage", "03-storage"], True), (["03-storage", ""], False), (["03-storage", "05-storage"], False)],
    ids=["every-node-keeps-it", "a-node-lost-its-worker", "a-node-started-another"],
)
def test_the_nodes_keep_their_workers_only_together(tokens: list[str], kept: bool) -> None:
    pool, fake = workers(), FakeWorker()
    pool.current, pool.started_at = cast(Worker, fake), "03-storage"
    assert pool.token == "03-storage"
    pool.agree(tokens)
    assert (pool.current is not None) is kept and fake.closed is not kept
    assert pool.token == ("03-storage" if kept else "")


def test_a_probe_gets_its_part_of_the_workers_logs_with_their_times(tmp_path: Path) -> None:
    folder, out = tmp_path / "worker", tmp_path / "probe"
    rank = folder / "logs" / "run_x" / "attempt_0" / "1"
    rank.mkdir(parents=True)
    (folder / "torchrun.log").write_text("start\nfirst probe\n")
    (rank / "stdout.log").write_text("first probe\n")
    (rank / "stderr.log").write_text("")
    before = log_sizes(folder)
    with open(folder / "torchrun.log", "a") as log:
        log.write("[default1]: Traceback ...\n")
    (rank / "error.json").write_text(json.dumps({"message": "boom"}))
    os.utime(rank / "error.json", ns=(1_000_000_000, 1_000_000_000))
    copy_logs(folder, out, before)
    assert (out / "torchrun.log").read_text() == "[default1]: Traceback ...\n"
    copied = out / "logs" / "run_x" / "attempt_0" / "1"
    assert (copied / "stdout.log").read_text() == (copied / "stderr.log").read_text() == ""
    assert (copied / "error.json").stat().st_mtime_ns == 1_000_000_000  # diagnose orders errors by time


def test_the_worker_switch_reads_on_or_off() -> None:
    assert on_off("on") is True and on_off(" OFF ") is False
    with pytest.raises(Exception, match="expected on or off"):
        on_off("maybe")


def probes(run: Run) -> list[dict[str, Any]]:
    return list(run.evidence()["probes"])


def rank_pids(run: Run, probe: dict[str, Any]) -> dict[int, int]:
    states = [json.loads(p.read_text()) for p in (run.folder / probe["out_dir"]).glob("rank-*.json")]
    return {s["rank"]: s["pid"] for s in states}


def worker_folders(run: Run) -> list[str]:
    folder = run.folder / "workers"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.e2e
def test_successive_probes_run_in_one_worker_job(suite: pytest.Pytester) -> None:
    run = Run(suite, "", [*FAST, *ONE_READING])
    assert run.wait() == pytest.ExitCode.OK, run.output
    found = probes(run)
    assert [(p["key"], p["status"]) for p in found] == [("connectivity", "ok"), ("storage", "ok"), ("compute", "ok")]
    # one torchrun start, with the session (before its first probe's folder), whose ranks ran every probe:
    # the same processes in every probe's heartbeats
    assert worker_folders(run) == [EARLY]
    first_probe = run.folder / found[0]["out_dir"] / "spec.json"
    assert (run.folder / "workers" / EARLY / "spec.json").stat().st_mtime_ns <= first_probe.stat().st_mtime_ns
    pids = [rank_pids(run, p) for p in found]
    assert len(pids[0]) == 2 and pids[0] == pids[1] == pids[2]
    assert len({tuple(p["argv"]) for p in found}) == 1 and "acceptance.probes.worker" in found[0]["argv"]
    requests = run.folder / "workers" / EARLY / "requests"
    assert json.loads((requests / "4.json").read_text()) == {"exit": True}  # told to exit at the session's end
    for probe in found:  # each probe's folder as a job of its own leaves it
        out = run.folder / probe["out_dir"]
        for name in ("spec.json", "result.json", "rank-0.json", "rank-1.json", "torchrun.log"):
            assert (out / name).is_file(), f"{out / name} is missing"
        assert list((out / "logs").rglob("stdout.log")), "per-rank logs are missing"
        assert {json.loads(p.read_text())["status"] for p in out.glob("rank-*.json")} == {"done"}
    assert "[cluster] storage: ok in " in run.output
    assert_nothing_left(run.mark)


@pytest.mark.e2e
def test_a_crash_fails_its_probe_and_the_next_one_runs_in_a_fresh_worker(suite: pytest.Pytester) -> None:
    run = Run(suite, "crash@1:barrier latency", [*FAST[:2], *ONE_READING])  # a phase of the connectivity probe only
    assert run.wait() == pytest.ExitCode.TESTS_FAILED, run.output
    headline = rf"probe connectivity failed: rank 1 \(host {HOST}, local rank 1\) raised RuntimeError: injected crash"
    assert re.search(headline, run.output), run.output
    found = probes(run)
    assert [(p["key"], p["status"]) for p in found] == [("connectivity", "failed"), ("compute", "ok")]
    assert worker_folders(run) == [EARLY, "02-compute"]
    assert not set(rank_pids(run, found[0]).values()) & set(rank_pids(run, found[1]).values())
    assert_nothing_left(run.mark)


@pytest.mark.e2e
def test_a_hang_times_out_naming_the_rank_and_the_next_probe_runs(suite: pytest.Pytester) -> None:
    run = Run(suite, "hang@1:barrier latency", [*FAST[:2], *ONE_READING], timeout_s=60)
    assert run.wait() == pytest.ExitCode.TESTS_FAILED, run.output
    assert re.search(hung_connectivity(60, "--cluster-timeout 60"), run.output), run.output
    found = probes(run)
    assert [(p["key"], p["status"]) for p in found] == [("connectivity", "failed"), ("compute", "ok")]
    assert worker_folders(run) == [EARLY, "02-compute"]
    assert_nothing_left(run.mark)


@pytest.mark.e2e
def test_with_the_worker_off_every_probe_is_a_job_of_its_own(suite: pytest.Pytester) -> None:
    run = Run(suite, "", [*FAST[:2], *ONE_READING, "--cluster-worker", "off"])
    assert run.wait() == pytest.ExitCode.OK, run.output
    found = probes(run)
    assert [p["status"] for p in found] == ["ok", "ok"] and worker_folders(run) == []
    assert not set(rank_pids(run, found[0]).values()) & set(rank_pids(run, found[1]).values())
    assert "acceptance.probes.compute" in found[1]["argv"]
    assert_nothing_left(run.mark)


class Torchrun:
    """A worker's torchrun that outlives its ranks (its agent's bookkeeping), until it is ended."""

    returncode = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        raise subprocess.TimeoutExpired("torchrun", timeout or 0)


def closing_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int, named: int) -> tuple[Worker, list[str]]:
    """A worker that served one probe, whose ``named`` ranks (of two) leave when told to exit; the calls that
    end a job, recorded."""
    worker = Worker.__new__(Worker)
    worker.folder, worker.spec, worker.ranks, worker.nodes = tmp_path, "worker-spec.json", 2, nodes
    worker.served, worker.last_out, worker.proc = 1, tmp_path / "probe", cast(Any, Torchrun())
    exit_posted = tmp_path / "requests" / "2.json"
    monkeypatch.setattr(launcher, "local_ranks", lambda out, arg: [101, 102][:named])
    monkeypatch.setattr(reaper, "runs", lambda pid, arg: not exit_posted.exists())
    ended: list[str] = []
    monkeypatch.setattr(reaper, "end", lambda proc, ranks, hung: ended.append("end"))
    monkeypatch.setattr(worker_module, "EXIT_GRACE_S", 0.2)
    return worker, ended


def test_on_one_node_closing_waits_for_the_ranks_and_the_session_end_for_torchrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, ended = closing_worker(tmp_path, monkeypatch, nodes=1, named=2)
    pool = workers()
    pool.current = worker
    pool.close()
    assert json.loads((tmp_path / "requests" / "2.json").read_text()) == {"exit": True}
    assert ended == [] and pool.leaving == [worker]  # the ranks left; torchrun still exits beside the next job
    pool.shut_down()
    assert ended == ["end"] and pool.leaving == []  # it never exited: ended at the session's end


@pytest.mark.parametrize(("nodes", "named"), [(2, 2), (1, 1)], ids=["several-nodes", "a-rank-unnamed"])
def test_otherwise_closing_waits_for_torchrun_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int, named: int
) -> None:
    """On several nodes torchrun's store holds the port the next job meets at; with a rank its heartbeats do
    not name, only the job's exit says that every rank has gone. A torchrun that does not exit is ended."""
    worker, ended = closing_worker(tmp_path, monkeypatch, nodes, named)
    worker.close()
    assert ended == ["end"]
