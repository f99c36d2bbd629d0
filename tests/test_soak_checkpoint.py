"""The soak's checkpoints: the cadence every rank agrees on in its round's one all_reduce, the ``partial.json``
a checkpoint leaves (the NVML watch still sampling), and a stopped soak judged on its last checkpoint: each
count on what it measured, and the stop itself a figure that fails the run, naming the seconds soaked."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pynvml
import pytest
import torch
import torch.distributed as dist

from acceptance.families import soak as rules
from acceptance.probes import soak as probe
from acceptance.probes.rank import Ctx, Heartbeat
from acceptance.probes.soak_watch import SoakWatch
from acceptance.profile.judge import Judge
from acceptance.schema.bounds import Threshold
from tests.test_judge import _profile
from tests.test_soak_rules import CONFIG, Nvml, gemm, healthy, result

# a soak small enough for the CPU in a fraction of a second per round
SMALL: rules.SoakConfig = {
    **CONFIG,
    "duration_s": 30.0,
    "checkpoint_s": 10.0,
    "matmul_size": 32,
    "fp8": False,
    "round_s": 0.01,
    "window_s": 0.5,
    "host_memory_size": "64K",
    "allreduce_size": "4K",
}
STOPPED = "the soak probe failed: rank 1 was killed (SIGKILL)"


def test_checkpoints_fall_on_the_multiples_of_checkpoint_s() -> None:
    assert rules.next_checkpoint(0.0, 300.0) == 300.0
    assert rules.next_checkpoint(299.9, 300.0) == 300.0
    assert rules.next_checkpoint(300.0, 300.0) == 600.0  # the one just taken is behind
    assert rules.next_checkpoint(1234.5, 300.0) == 1500.0  # a round longer than the cadence skips the passed ones
    assert rules.next_checkpoint(1.4, 1.5) == 1.5


def test_the_kill_fault_is_parsed_with_its_share_of_the_duration_or_refused() -> None:
    assert probe.parse_faults("gemm@1;kill@1:0.3") == [probe.Fault("gemm", 1, 0.5), probe.Fault("kill", 1, 0.3)]
    for bad in ("kill@1:1.5", "kill@1:0", "kill@x:0.3"):
        with pytest.raises(ValueError, match=probe.FAULT_ENV):
            probe.parse_faults(bad)


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[Ctx]:
    """A world of one rank on the CPU (gloo), as a probe's rank sees it."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    beat = Heartbeat(tmp_path, {"rank": 0, "node_rank": 0, "local_rank": 0, "host": "here"})
    try:
        yield Ctx(0, 1, 0, 1, 0, "here", torch.device("cpu"), "gloo", {}, tmp_path, beat)
    finally:
        beat.state["status"] = "done"  # its thread's last beat
        dist.destroy_process_group()


def _soaked(state: probe.Soak, seconds: float) -> None:
    """As if the soak had run ``seconds`` so far: the rounds read their time from ``t0``."""
    state.t0 = time.perf_counter() - seconds


def test_a_checkpoint_round_leaves_the_records_so_far_in_partial_json(one_rank: Ctx) -> None:
    partial = one_rank.out / probe.PARTIAL
    state = probe.Soak.prepare(one_rank, SMALL, probe.parse_faults("gemm@0"))
    state.start()
    _soaked(state, 5.0)
    assert not state.round() and not state.checkpoint_due and state.checkpoint_at == 10.0
    assert not partial.exists()
    _soaked(state, 12.0)
    assert not state.round() and state.checkpoint_due  # the agreed time passed 10 s
    state.checkpoint()
    assert state.checkpoint_at == 20.0 and not state.checkpoint_due and state.checkpoints == 1
    written = json.loads(partial.read_text())
    assert written["complete"] is False and 12.0 <= written["soaked_s"] < 20.0
    # the final result's shape, marked incomplete: the rules read it as they read a result
    assert set(written) == rules.SoakResult.__required_keys__ | {"complete", "soaked_s"}
    assert written["injected"] == ["rank 0: one element of its second bfloat16 result flipped"]
    (mine,) = written["ranks"]
    assert mine["rounds"] == 2 and mine["seconds"] >= 12.0
    assert mine["gemm"][0]["wrong_elements"] == 1 and mine["gemm"][0]["first_bad"] is not None
    _soaked(state, 14.0)
    assert not state.round() and not state.checkpoint_due  # the next one is at 20 s
    _soaked(state, 31.0)
    assert state.round()  # the time is up: the final record, no checkpoint
    final = state.record()
    assert final["rounds"] == 4 and final["gemm"][0]["digest"] == mine["gemm"][0]["digest"]
    assert json.loads(partial.read_text()) == written  # the last checkpoint's, until the result replaces it


def test_the_watch_gives_its_record_so_far_and_keeps_sampling() -> None:
    lib = Nvml()
    watch = SoakWatch("GPU-1", 0.01, lib)
    watch.start(0.0)
    while not (watch.xids and len(watch.samples) >= 2):
        watch._stop.wait(0.01)
    lib.ecc[pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED] = 2  # an uncorrectable error in the soak's first hour
    snap = watch.snapshot()
    before, after = cast(rules.Counters, snap["before"]), cast(rules.Counters, snap["after"])
    assert (before["ecc_uncorrected"], after["ecc_uncorrected"]) == (0, 2)
    assert isinstance(snap["xids"], list) and snap["xids"][0]["xid"] == 79
    taken = len(snap["samples"])
    while len(watch.samples) <= taken + 2:  # still sampling
        watch._stop.wait(0.01)
    assert len(snap["samples"]) == taken  # the snapshot's samples are a copy
    record = watch.stop()
    assert len(record["samples"]) > taken + 2 and record["after"] == snap["after"]


def _stopped(ranks: list[rules.RankSoak], soaked_s: float, duration_s: float) -> rules.SoakResult:
    """A soak's last checkpoint as the runner reads it back after the probe failed (JSON and all)."""
    for r in ranks:
        r["seconds"] = soaked_s
    partial = rules.checkpointed(result(ranks, duration_s=duration_s), soaked_s)
    found = rules.from_partial(json.loads(json.dumps(partial)), STOPPED)
    assert found is not None
    return found


def test_a_stopped_soak_is_judged_on_what_it_measured_and_never_passes() -> None:
    ranks = healthy(4)
    bad = {"where": "element 9 (row 0, column 9)", "got": "3.5", "want": "1.5"}
    ranks[2]["gemm"][0] = gemm(wrong_elements=3, wrong_calls=1, first_bad=bad)
    nvml = ranks[1]["nvml"]
    assert nvml is not None
    after = cast(dict[str, Any], copy.deepcopy(nvml["after"]))
    after["ecc_uncorrected"] = 1  # read at the checkpoint: the watch had not stopped
    nvml["after"] = cast(rules.Counters, after)
    found = _stopped(ranks, 7200.0, 14400.0)  # stopped in hour 3 of a 4-hour soak, checkpointed at 2 h
    figures = {f.metric: f for f in rules.counts(found)}
    wrong = figures["soak.gemm_wrong_elements"]
    assert wrong.value == 3
    assert wrong.findings == [
        "node 1 (gpu-1) GPU 0 (GPU-00000002-0000) rank 2: bfloat16: 3 wrong element(s) in 1 of 1000 results; "
        "first at element 9 (row 0, column 9): got 3.5, expected 1.5"
    ]
    ecc = figures["soak.ecc_new_errors"]
    assert ecc.value == 1 and ecc.findings[0].startswith("node 0 (gpu-0) GPU 1 (GPU-00000001-0000) rank 1: 1 new")
    whole = rules.completed(found)
    assert whole.value == 0.5
    assert whole.findings == [
        "the soak stopped at 7200 of 14400 s: its figures are those of its last checkpoint (soak.checkpoint_s 300 s)"
    ]
    assert whole.unmeasured == [f"soak stopped after 7200 of 14400 s: {STOPPED}"]
    judge = Judge(_profile("p", {}))
    judged = judge.judge(whole.metric, whole.value, whole.unit, whole.detail, Threshold(min=1.0))
    assert judged.failed and judged.message.startswith("soak.completed_fraction = 0.5 fraction, expected >= 1")


def test_a_checkpoint_taken_as_the_time_ran_out_still_fails_as_stopped() -> None:
    """The last round's checkpoint may come at the soak's end: its fraction is 1, its stop is not a pass."""
    whole = rules.completed(_stopped(healthy(2), 120.0, 120.0))
    assert whole.value == 1.0 and whole.unmeasured == [f"soak stopped after 120 of 120 s: {STOPPED}"]


def test_a_soak_that_ran_to_its_end_completed_it() -> None:
    ranks = healthy(2)
    ranks[0]["seconds"] = 119.999  # its clock started a little after the one whose time ran out first
    whole = rules.completed(result(ranks))
    assert (whole.value, whole.findings, whole.unmeasured) == (1.0, [], [])


@pytest.mark.parametrize(
    "found",
    [
        {},  # stopped before its first checkpoint
        {"parts": {}},
        {"ranks": [], "complete": False},
        cast(dict[str, Any], result(healthy(2))),  # a final result is no checkpoint
    ],
)
def test_a_probe_that_left_no_checkpoint_has_nothing_to_judge(found: dict[str, Any]) -> None:
    assert rules.from_partial(found, STOPPED) is None
