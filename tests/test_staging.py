"""A job started ahead of its turn: its ranks wait at the gate, the run that reaches it opens the gate, a
job the run never reached is cancelled and leaves nothing behind, and the plugin starts the training job
only beside probes timed on the GPU."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch.distributed

from acceptance.families import staging
from acceptance.families.collectives import Collectives
from acceptance.families.heartbeat import RankIdentity
from acceptance.plugin import training_stage
from acceptance.plugin.settings import PytestModes
from acceptance.plugin.training_stage import TrainingStage, stage_point
from acceptance.probes import compute as compute_probe
from acceptance.probes import rank as rank_module
from acceptance.probes import train_strategies
from acceptance.probes.rank import Ctx, Heartbeat, ProbeSpec, wait_at_gate
from acceptance.probes.train_strategies import compile_threads, preload, start_compile_workers
from acceptance.profile.loader import load
from acceptance.run import cluster_run, executor, staged_jobs
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.placement import Placement
from acceptance.schema.family import Family
from tests.test_faults import HARNESS_TIMEOUT_S, MARK, assert_nothing_left

IDENT: RankIdentity = {"rank": 0, "node_rank": 0, "local_rank": 0, "host": "here"}


def _phases(path: Path) -> list[str]:
    return [name for name, _ in json.loads(path.read_text())["phases"]]


def _say(gate: Path, word: str) -> None:
    (gate.parent / "word").write_text(word)
    (gate.parent / "word").rename(gate)  # atomically, as the launcher writes it


@pytest.mark.parametrize(
    ("first", "then", "imported", "goes_on", "phases"),
    [
        (staging.IMPORT, staging.GO, True, True, ["preload", "wait for the node", "init process group"]),
        (staging.GO, None, True, True, ["preload", "wait for the node", "init process group"]),  # its turn came first
        (staging.IMPORT, staging.CANCEL, True, False, ["preload", "wait for the node", "end"]),
        (staging.CANCEL, None, False, False, ["end"]),  # the run ended before the job's imports
    ],
)
def test_a_rank_imports_on_its_word_then_waits_for_the_node(
    tmp_path: Path, first: str, then: str | None, imported: bool, goes_on: bool, phases: list[str]
) -> None:
    beat = Heartbeat(tmp_path, IDENT, phase=staging.WAIT_TO_IMPORT)
    gate, calls = tmp_path / staging.GATE, []

    def preload() -> None:
        calls.append(json.loads(beat.path.read_text())["phase"])  # what a probe timed on the host waits out
        if then is not None:
            _say(gate, then)

    waiting = threading.Timer(0.05, _say, (gate, first))  # the word comes while the rank waits for one
    waiting.start()
    try:
        assert wait_at_gate(gate, beat, preload) is goes_on
        waiting.join()
        assert calls == ([staging.IMPORTING] if imported else [])
        assert json.loads(beat.path.read_text())["status"] == ("running" if goes_on else "cancelled")
        assert _phases(beat.path) == [staging.WAIT_TO_IMPORT, *phases]
    finally:
        beat.state["status"] = "done"  # its thread's last beat: no thread left beating for later tests


def _run(tmp_path: Path) -> ClusterRun:
    return ClusterRun(load("local-cpu"), Placement(1, 0, "127.0.0.1", 29400, "default"), tmp_path / "ev", worker=False)


@pytest.mark.e2e
def test_a_staged_job_runs_when_its_probe_comes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARK, f"staged-{tmp_path.name}")
    run = _run(tmp_path)
    try:
        assert run.stage("connectivity", run.spec("connectivity"), "connectivity")
        assert not run.stage("connectivity", run.spec("connectivity"), "connectivity")  # once per key
        result = run.probe("connectivity")
    finally:
        run.close()
    assert result["missing_ranks"] == []
    record = run.evidence.doc.probes[0]
    assert record.status == "ok" and record.staged_s is not None and record.staged_s >= 0
    folder = run.evidence_dir / cast(str, record.out_dir)
    assert folder.name == "01-connectivity" and (folder / staging.GATE).read_text() == staging.GO
    assert json.loads((folder / "spec.json").read_text())["gate"] == str(folder / staging.GATE)
    assert _phases(folder / "rank-1.json")[:4] == [
        "wait to import",
        "preload",
        "wait for the node",
        "init process group",
    ]
    assert json.loads((folder / "rank-0.json").read_text())["cuda_at_gate"] is False
    assert_nothing_left(f"staged-{tmp_path.name}")


def _wait_at_gate(folder: Path, phase: str, ranks: int = 2) -> None:
    """Until every rank of a staged job waits at its gate in ``phase``: a rank cancelled before it gets there
    (a loaded machine can take longer than the launcher's grace to start torchrun and import torch) is killed
    instead, and leaves no word of its own."""
    deadline = time.monotonic() + HARNESS_TIMEOUT_S
    while time.monotonic() < deadline:
        states = [p.read_text() for p in folder.glob("rank-*.json")]
        if len(states) == ranks and all(json.loads(s)["phases"][-1][0] == phase for s in states):
            return
        time.sleep(0.2)
    raise AssertionError(f"the ranks of {folder} did not reach their gate in {HARNESS_TIMEOUT_S} s")


@pytest.mark.e2e
def test_a_job_the_run_never_reaches_is_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARK, f"cancelled-{tmp_path.name}")
    run = _run(tmp_path)
    spec = run.spec("connectivity")
    assert run.stage("connectivity", spec, "connectivity")
    _wait_at_gate(run.evidence_dir / "probes" / "01-connectivity", staging.WAIT_TO_IMPORT)
    _say(run.evidence_dir / "probes" / "01-connectivity" / staging.GATE, staging.IMPORT)  # as compute says it
    _wait_at_gate(run.evidence_dir / "probes" / "01-connectivity", staging.WAIT_FOR_NODE)
    # the same key with another spec: the staged job is cancelled and a fresh one runs in a folder of its own
    result = run.probe("connectivity", {**spec, "note": "another spec"})
    assert run.stage("compute", run.spec("compute"), "compute")
    _wait_at_gate(run.evidence_dir / "probes" / "03-compute", staging.WAIT_TO_IMPORT)  # never let import
    run.close()  # the session ends before compute's turn
    assert result["missing_ranks"] == []
    record = run.evidence.doc.probes[0]
    assert record.out_dir == "probes/02-connectivity" and record.staged_s is None
    for name in ("01-connectivity", "03-compute"):
        folder = run.evidence_dir / "probes" / name
        assert (folder / staging.GATE).read_text() == staging.CANCEL
        states = [json.loads(p.read_text()) for p in sorted(folder.glob("rank-*.json"))]
        assert [s["status"] for s in states] == ["cancelled", "cancelled"]  # each left at its gate
        assert not (folder / "result.json").exists()
    assert [p.key for p in run.evidence.doc.probes] == ["connectivity"]  # a cancelled job is not a probe
    assert_nothing_left(f"cancelled-{tmp_path.name}")


def _items(*modules: str) -> list[Any]:
    return [SimpleNamespace(path=Path(f"tests_cluster/{m}.py"), nodeid=f"tests_cluster/{m}.py::t{i}")
            for m in modules for i in (1, 2)]  # fmt: skip


def _cluster(device: str, timing: str = "auto") -> Any:
    collectives = Collectives.model_validate({"timing": timing})
    return SimpleNamespace(
        topology=SimpleNamespace(device=device), profile=SimpleNamespace(model=SimpleNamespace(collectives=collectives))
    )


def test_the_training_job_imports_at_the_first_probe_that_lets_it() -> None:
    order = ("test_connectivity", "test_storage", "test_compute", "test_collectives", "test_internode", "test_training")
    assert stage_point(_cluster("cuda"), _items(*order)) == "tests_cluster/test_compute.py::t1"
    # the sweeps' loops and their spread pass are timed by the host, under every timing: they wait for the
    # imports, and are never where they start
    for timing in ("auto", "nccl", "eager", "cuda_graph"):
        assert stage_point(_cluster("cuda", timing), _items("test_collectives", "test_training")) is None
        assert stage_point(_cluster("cuda", timing), _items("test_compute", "test_collectives", "test_training")) == (
            "tests_cluster/test_compute.py::t1"
        )
    assert stage_point(_cluster("cuda"), _items("test_storage", "test_compute", "test_training")) == (
        "tests_cluster/test_compute.py::t1"
    )


def _test_thread_sleeps(monkeypatch: pytest.MonkeyPatch, on_sleep: Callable[[list[float]], None]) -> list[float]:
    """Replace ``time.sleep`` (the module the wait polls through) for this test's thread: each call is
    recorded, then ``on_sleep`` sees the record. Other threads (a heartbeat another test in this process
    left running beats with ``time.sleep`` too) still sleep for real and are not counted."""
    real, caller, polls = time.sleep, threading.get_ident(), list[float]()

    def sleep(seconds: float) -> None:
        if threading.get_ident() != caller:
            real(seconds)
            return
        polls.append(seconds)
        on_sleep(polls)

    monkeypatch.setattr(time, "sleep", sleep)
    return polls


def test_a_probe_timed_by_the_host_waits_until_a_staged_jobs_ranks_are_past_their_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def beat(rank: int, phase: str) -> None:
        (tmp_path / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "phase": phase}))

    def poll(polls: list[float]) -> None:
        if len(polls) == 2:
            beat(1, staging.IMPORTING)  # the second rank's first heartbeat: still importing
        if len(polls) == 3:
            beat(0, "wait for the node")
            beat(1, "init process group")

    polls = _test_thread_sleeps(monkeypatch, poll)
    ended: list[int | None] = [None]
    job = SimpleNamespace(proc=SimpleNamespace(poll=lambda: ended[0]), out_dir=tmp_path)
    jobs = staged_jobs.StagedJobs()
    jobs.add("training-0", 7, {}, cast(Any, job))
    beat(0, staging.IMPORTING)
    jobs.wait_for_imports(2, limit_s=3600)
    assert len(polls) == 3  # one rank without a heartbeat, then one still importing, then both at the gate
    beat(0, staging.IMPORTING)
    ended[0] = 1  # a job that ended imports no more
    jobs.wait_for_imports(2, limit_s=3600)
    assert len(polls) == 3
    ended[0] = None
    jobs.wait_for_imports(2, limit_s=0)
    assert len(polls) == 3  # past its limit the probe starts, without another look


def test_a_rank_told_to_import_counts_as_importing_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def beat(phase: str) -> None:
        for rank in (0, 1):
            (tmp_path / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "phase": phase}))

    polls = _test_thread_sleeps(monkeypatch, lambda _: beat(staging.WAIT_FOR_NODE))  # past imports by the next look
    job = SimpleNamespace(proc=SimpleNamespace(poll=lambda: None), out_dir=tmp_path)
    jobs = staged_jobs.StagedJobs()
    jobs.add("training", 1, {}, cast(Any, job))
    beat(staging.WAIT_TO_IMPORT)
    jobs.wait_for_imports(2, limit_s=3600)
    assert polls == []  # no word yet: waiting to import is quiet
    _say(tmp_path / staging.GATE, staging.IMPORT)
    jobs.wait_for_imports(2, limit_s=3600)
    assert len(polls) == 1  # the word is there: about to import, so the probe waits


@pytest.mark.parametrize(
    ("device", "modules"),
    [
        ("cpu", ("test_collectives", "test_training")),  # timed by the host: nothing may run beside it
        ("cuda", ("test_compute", "test_storage", "test_training")),  # disk figures: nothing beside them either
        ("cuda", ("test_training",)),  # nothing before it
        ("cuda", ("test_compute", "test_collectives")),  # no training selected
    ],
)
def test_otherwise_the_training_job_starts_at_its_turn(device: str, modules: tuple[str, ...]) -> None:
    assert stage_point(_cluster(device), _items(*modules)) is None


def _stage_at(
    monkeypatch: pytest.MonkeyPatch, preflight_ok: bool | None, setupplan: bool = False
) -> tuple[str | None, list[str]]:
    """Where the training job is let import, and what happened to it: ``staged`` at collection, ``import``."""
    order = ("test_storage", "test_compute", "test_training")
    preflight = None if preflight_ok is None else SimpleNamespace(ok=preflight_ok)
    settings = SimpleNamespace(modes=PytestModes(probes=not setupplan))
    events: list[str] = []
    run = _cluster("cuda")

    def let_import_within(key: str, probe: str) -> bool:
        events.append(f"import {key} within {probe}")
        return True

    def stage_first(run: object, strategies: list[str], base: object) -> bool:
        events.append("staged")
        return True

    run.let_import_within = let_import_within
    owner = SimpleNamespace(collect_only=False, preflight=preflight, run=run, settings=settings)
    monkeypatch.setattr(training_stage, "needed", lambda run, items: ["ddp"])
    monkeypatch.setattr(training_stage, "baseline", lambda run, items: None)
    monkeypatch.setattr(training_stage, "stage_first", stage_first)
    stage = TrainingStage(owner)
    items = _items(*order)
    stage.pytest_collection_finish(cast(pytest.Session, SimpleNamespace(items=items)))
    at = stage.at
    for item in items:
        stage.pytest_runtest_setup(cast(pytest.Item, item))
    return at, events


def test_the_job_starts_at_collection_and_imports_at_the_first_module_timed_on_the_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for preflight in (True, None):
        # compute lets it import once its host links are measured (imports beside them slow their copies)
        staged = ["staged", "import training within compute"]
        assert _stage_at(monkeypatch, preflight) == ("tests_cluster/test_compute.py::t1", staged)
    assert _stage_at(monkeypatch, False) == (None, [])  # the node lacks its GPUs: the training tests skip
    assert _stage_at(monkeypatch, True, setupplan=True) == (None, [])  # --setup-plan runs no fixture, so no probe


def test_a_failed_preload_is_left_to_the_strategy_that_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed raises ImportError
    # deliberately incomplete: the training section has only what preload reads
    spec = cast(ProbeSpec, {"training": {"model": "tiny", "compile": "none"}, "strategies": ["ddp", "zero1"]})
    preload(spec)  # ddp's job goes on; zero1 fails alone when it imports deepspeed itself
    with pytest.raises(ImportError):
        import deepspeed  # noqa: F401


@pytest.mark.parametrize("probe", ["compute", "collectives", "internode", "isolation", "connectivity", "storage", "x"])
def test_a_probe_whose_figures_the_hosts_activity_moves_waits_for_a_staged_jobs_imports(probe: str) -> None:
    # compute lets the imports start itself, once its host links are measured; the sweeps time loops on the host
    assert ClusterRun._beside_imports(probe) is False


def test_only_a_probe_timed_on_the_gpu_alone_runs_beside_them(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_only = Family("gpu_only", "figures in CUDA events alone", Collectives, (), probes=("p",), gpu_timed=True)
    monkeypatch.setattr(cluster_run, "family_of_probe", lambda probe: gpu_only)
    assert ClusterRun._beside_imports("p") is True
    for flag in ("host_loops", "lets_import"):
        flagged = dataclasses.replace(gpu_only, host_loops=flag == "host_loops", lets_import=flag == "lets_import")
        monkeypatch.setattr(cluster_run, "family_of_probe", lambda probe, found=flagged: found)
        assert ClusterRun._beside_imports("p") is False


def test_a_probe_waits_for_a_stuck_staged_job_once_then_cancels_it(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    cancelled: list[bool] = []
    waits = iter([0.0, 5.0, executor.IMPORTS_WAIT_S])
    staged = SimpleNamespace(
        jobs={"training": object()},
        wait_for_imports=lambda ranks, limit: next(waits),
        cancel_all=lambda: cancelled.append(True),
    )
    fake = SimpleNamespace(_staged=staged, topology=SimpleNamespace(nproc_per_node=2), say=said.append)
    for key in ("connectivity", "collectives", "storage"):
        executor.Executor.quiet_host(cast(executor.Executor, fake), key)
    assert said == [
        "collectives: waited 5.0 s for the staged job's imports (its figures move with the host)",
        f"storage: a staged job still starting or importing after {executor.IMPORTS_WAIT_S:.0f} s is cancelled",
    ]
    assert cancelled == [True]  # its probe starts a job of its own at its turn


def test_the_compute_run_after_the_stage_point_carries_the_gate_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(tmp_path)
    specs: dict[str, Any] = {}

    def record(name: str, spec: Any, key: str, *args: object, **kwargs: object) -> dict[str, Any]:
        specs[key] = spec
        return {}

    monkeypatch.setattr(run, "_run", record)
    monkeypatch.setattr(
        run.executor, "gate", lambda key: tmp_path / "01-training" / staging.GATE if key == "training" else None
    )
    try:
        assert not run.let_import_within("no-such-job", "compute")
        assert run.let_import_within("training", "compute")
        run.probe("compute")
        run.probe("compute", key="compute-again-1")
    finally:
        run.close()
    assert specs["compute"]["let_import"] == str(tmp_path / "01-training" / staging.GATE)
    assert "let_import" not in specs["compute-again-1"]  # a re-measure lets nothing import


@pytest.mark.parametrize(
    ("rank", "before", "after"), [(0, None, "import"), (1, None, None), (0, "go", "go"), (0, "cancel", "cancel")]
)
def test_a_probe_lets_the_staged_job_import_once_every_rank_is_there_and_never_over_the_plugins_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: int, before: str | None, after: str | None
) -> None:
    gate, met = tmp_path / staging.GATE, []
    if before is not None:
        _say(gate, before)
    monkeypatch.setattr(torch.distributed, "barrier", lambda: met.append(rank))
    rank_module.let_staged_import(cast(Ctx, SimpleNamespace(spec={"let_import": str(gate)}, rank=rank)))
    assert met == [rank]  # every rank waits for the others first
    assert (gate.read_text() if gate.exists() else None) == after
    assert sorted(p.name for p in tmp_path.iterdir()) == ([staging.GATE] if after else [])  # no file left behind
    rank_module.let_staged_import(cast(Ctx, SimpleNamespace(spec={}, rank=rank)))
    assert met == [rank]  # no gate named: nothing to wait for


def test_a_gate_that_cannot_be_written_leaves_the_probe_standing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.distributed, "barrier", lambda: None)
    gate = tmp_path / "gone" / staging.GATE  # its folder removed: the job imports at GO instead
    rank_module.let_staged_import(cast(Ctx, SimpleNamespace(spec={"let_import": str(gate)}, rank=0)))
    assert not gate.exists()


def test_the_per_gpu_probe_measures_the_host_links_before_it_lets_the_staged_job_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []

    def measure(figure: str) -> Callable[..., tuple[float, None, list[float]]]:
        def run(*args: object) -> tuple[float, None, list[float]]:
            order.append(figure)
            return 1.0, None, []

        return run

    monkeypatch.setattr(compute_probe, "MEASURES", {"matmul_tflops": measure("matmul_tflops")})
    monkeypatch.setattr(
        compute_probe, "host_links", lambda ctx, cfg, only: {f: measure(f)() for f in compute_probe.HOST_LINKS}
    )
    monkeypatch.setattr(compute_probe, "let_staged_import", lambda ctx: order.append("let import"))
    monkeypatch.setattr(compute_probe, "identity", lambda ctx: {"host": "here", "rank": 0, "gpu": None})
    cfg = {"figures": None, "duration_s": 0}
    ctx = SimpleNamespace(spec={"compute": cfg}, phase=lambda name: None, gather=lambda row: [row])
    compute_probe.run(cast(Ctx, ctx))
    assert order == ["h2d_gbps", "d2h_gbps", "let import", "matmul_tflops"]


@pytest.mark.parametrize(
    ("cores", "ranks", "threads"), [(64, 4, 16), (32, 2, 16), (16, 1, 16), (16, 4, 4), (2, 4, 1), (256, 2, 32)]
)
def test_each_rank_compiles_on_its_share_of_the_nodes_cores(cores: int, ranks: int, threads: int) -> None:
    assert compile_threads(cores, ranks) == threads


MODEL_IMPORTS = ["import transformers", "import transformers.models.gpt2.modeling_gpt2"]  # the tiny model's


def test_a_staged_job_starts_its_compile_workers_before_it_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import config

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(12)))
    started: list[str] = []
    monkeypatch.setattr("torch.utils._triton.has_triton_package", lambda: False)  # no pool started in pytest
    monkeypatch.setattr(train_strategies, "start_compile_workers", _recording(started, train_strategies))
    # what it imports, recorded, not imported: the imports are torch's and transformers' own
    importer = SimpleNamespace(import_module=lambda name: started.append(f"import {name}"))
    monkeypatch.setattr(train_strategies, "importlib", importer)
    spec = cast(ProbeSpec, {"training": {"model": "tiny", "compile": "blocks"}, "strategies": ["ddp"]})
    with config.patch(compile_threads=None):  # torch's way to change its config for a while
        preload(spec)
        # three ranks on this node (LOCAL_WORLD_SIZE): started before the imports, up before it waits
        assert started == ["start 3", *MODEL_IMPORTS, "import torch._inductor.compile_fx", "up"]
        assert config.compile_threads == 4
    started.clear()
    preload(cast(ProbeSpec, {"training": {"model": "tiny", "compile": "none"}, "strategies": ["ddp"]}))
    assert started == MODEL_IMPORTS  # nothing compiles: no compile workers, no Inductor


def _recording(started: list[str], module: Any) -> Any:
    real = module.start_compile_workers

    def start(local_ranks: int) -> Any:
        started.append(f"start {local_ranks}")
        real(local_ranks)
        return lambda: started.append("up")

    return start


def test_the_compile_workers_follow_the_users_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import config

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(12)))
    monkeypatch.setattr("torch.utils._triton.has_triton_package", lambda: False)  # no pool started in pytest
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "5")
    with config.patch(compile_threads=None):
        start_compile_workers(3)
        assert config.compile_threads is None  # Inductor decides from the variable itself (decide_compile_threads)
        monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS")
        start_compile_workers(3)
        assert config.compile_threads == 4


@pytest.mark.parametrize(
    ("warm_pool", "start_method", "started"),
    [("1", "subprocess", True), ("0", "subprocess", False), ("1", "fork", False)],
)
def test_the_compile_workers_start_early_only_apart_from_the_rank_and_where_the_user_lets_them(
    monkeypatch: pytest.MonkeyPatch, warm_pool: str, start_method: str, started: bool
) -> None:
    """Inductor's own switch (TORCH_WARM_POOL=0) is kept; workers forked from the rank would have it prepare the
    fork itself, CUDA included: only a pool of its own process (Inductor's default, subprocess) starts early."""
    from torch._inductor import async_compile, config

    warmed: list[bool] = []
    monkeypatch.setattr("torch.utils._triton.has_triton_package", lambda: True)
    monkeypatch.setattr(async_compile, "maybe_warm_pool", lambda: warmed.append(True))
    monkeypatch.setenv("TORCH_WARM_POOL", warm_pool)
    with config.patch(worker_start_method=start_method, compile_threads=None):
        wait = start_compile_workers(2)
    assert bool(warmed) is started
    assert (wait == async_compile.AsyncCompile.wait_pool_ready) is started  # a bound method: equal, not the same
