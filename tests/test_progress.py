"""Live progress of a running probe (parts finished, one-time builds, stale build locks) and the wall table."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import cast

import pytest

from acceptance.cli import walls
from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.verdict import verdict_of
from acceptance.families.heartbeat import RankIdentity
from acceptance.run import progress
from acceptance.run.progress import Watch, extension_roots
from tests.harness import EVIDENCE, doc


def test_extension_roots_follow_torch() -> None:
    assert extension_roots({"TORCH_EXTENSIONS_DIR": "/x"}) == [Path("/x")]
    assert extension_roots({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == [Path("/c/torch_extensions")]
    assert extension_roots({"HOME": "/h"}) == [Path("/h/.cache/torch_extensions")]


def test_watch_says_parts_builds_and_a_lock_that_was_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "POLL_S", 3600)  # only the test's own looks: a stalled machine cannot add one
    root, out = tmp_path / "ext", tmp_path / "probe"
    (root / "py311_cpu" / "old_op").mkdir(parents=True)
    (root / "py311_cpu" / "old_op" / "lock").touch()
    out.mkdir()
    said: list[str] = []
    watch = Watch("training", out, said.append, {"TORCH_EXTENSIONS_DIR": str(root)})
    with watch:
        assert "torch extension build lock" in said[0] and "old_op" in said[0] and "remove the file" in said[0]
        (root / "new_op").mkdir()
        (root / "new_op" / "lock").touch()
        watch.poll()  # a lock just taken may be a check that the op is up to date: not said yet
        assert len(said) == 1
        old = time.time() - 10
        os.utime(root / "new_op" / "lock", (old, old))
        parts = {"ddp": {"wall_s": 3.25}, "zero2": {"wall_s": 1.0, "error": "boom"}}
        (out / "partial.json").write_text(json.dumps({"parts": parts}))
        watch.poll()
        watch.poll()  # each line once
    assert said[1:] == [
        f"training: one-time build under way: torch extension new_op ({root / 'new_op'})",
        "training: ddp ok in 3.2 s",
        "training: zero2 failed in 1.0 s",
    ]
    stale = watch.stale_locks()
    assert len(stale) == 1 and "old_op" in stale[0]  # the new lock was made during the probe: a build, not stale


def test_watch_hands_over_each_row_once_and_the_last_ones_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe that measures row by row (the sweep): each row once, in order; the rows written after the
    watcher's last look arrive when it ends, before the probe's end is said."""
    monkeypatch.setattr(progress, "POLL_S", 3600)  # only the test's own looks
    rows: list[dict[str, object]] = []
    watch = Watch("collectives", tmp_path, lambda line: None, {}, rows.append)
    with watch:
        (tmp_path / "partial.json").write_text(json.dumps({"rows": [{"size": "1M"}]}))
        watch.poll()
        watch.poll()
        (tmp_path / "partial.json").write_text(json.dumps({"rows": [{"size": "1M"}, {"size": "4M"}]}))
    assert rows == [{"size": "1M"}, {"size": "4M"}]


def _evidence(probes: list[dict[str, object]]) -> EvidenceDoc:
    """A run that passed whole: its verdict as ``read_evidence`` decides it, from one gated figure."""
    measured = [{"outcome": "passed", "checks": [{"metric": "connectivity.world_size", "verdict": "pass"}]}]
    run = doc(started="2026-11-22T06:00:00+00:00", finished="2026-11-22T06:02:30+00:00", probes=probes,
              tests=measured, complete=True, verdict="PASS")  # fmt: skip
    run.verdict = verdict_of(run)
    return run


def test_wall_rows_list_each_strategy_under_its_job() -> None:
    training = {
        "key": "training",
        "status": "ok",
        "wall_s": 40.0,
        "staged_s": 19.04,
        "result": {"strategies": {"ddp": {"wall_s": 12.5}, "zero2": {"wall_s": 8.0, "error": "x"}}},
    }
    rows = walls.rows(_evidence([{"key": "compute", "status": "ok", "wall_s": 5.0}, training]))
    assert rows == [
        ("compute", 5.0, "ok"),
        ("training", 40.0, "ok (staged 19.0 s before)"),  # its wall time counts from the gate's opening
        ("- ddp", 12.5, "ok"),
        ("- zero2", 8.0, "failed"),
        ("suite", 150.0, "PASS"),
    ]


def test_wall_table_compares_two_runs() -> None:
    old = {"key": "training-ddp", "status": "ok", "wall_s": 30.0, "result": {"strategy": "ddp"}}
    new = {"key": "training", "status": "ok", "wall_s": 20.0, "result": {"strategies": {"ddp": {"wall_s": 9.0}}}}
    text = walls.table([walls.rows(_evidence([old])), walls.rows(_evidence([new]))]).splitlines()
    assert text[0].split() == ["probe", "before", "s", "status", "after", "s", "status", "change", "s"]
    assert text[2].split() == ["training-ddp", "30.0", "ok", "-", "-", "-"]
    assert text[3].split() == ["-", "ddp", "30.0", "ok", "9.0", "ok", "-21.0"]  # the strategy, whichever job
    assert text[-1].split() == ["suite", "150.0", "PASS", "150.0", "PASS", "+0.0"]


def test_walls_refuses_an_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert walls.main([str(tmp_path / "missing.json")]) == 4
    assert "cannot read evidence" in capsys.readouterr().err


def test_heartbeat_keeps_each_phase_and_when_it_began(tmp_path: Path) -> None:
    from acceptance.probes.rank import Heartbeat

    # deliberately incomplete: the rank alone, which names the heartbeat's file
    beat = Heartbeat(tmp_path, cast(RankIdentity, {"rank": 0}), phase="import probe")
    beat.update(phase="write")
    beat.update(progress_at=0.0)  # not a phase: no new entry
    beat.update(phase="read")
    beat.update(phase="end", status="done")
    state = json.loads((tmp_path / "rank-0.json").read_text())
    assert [name for name, _ in state["phases"]] == ["import probe", "write", "read", "end"]
    starts = [at for _, at in state["phases"]]
    assert starts[0] == 0.0 and starts == sorted(starts) and starts[-1] <= state["elapsed_s"]


def test_walls_phases_from_rank_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probes = [
        {"key": "storage", "status": "ok", "wall_s": 30.0, "out_dir": "probes/01-storage"},
        {"key": "health", "status": "ok", "wall_s": 1.0, "out_dir": "probes/02-health"},  # no heartbeat kept
    ]
    (tmp_path / "probes" / "01-storage").mkdir(parents=True)
    beat = {"phases": [["start", 0.0], ["write", 1.5], ["clean up", 20.0]], "elapsed_s": 26.25}
    (tmp_path / "probes" / "01-storage" / "rank-0.json").write_text(json.dumps(beat))
    assert walls.phases(tmp_path, _evidence(probes)) == [
        ["storage", "start", "1.5"],
        ["storage", "write", "18.5"],
        ["storage", "clean up", "6.2"],
    ]
    real = EVIDENCE / "h200-x2-zero3-leaf" / "evidence.json"
    (tmp_path / "evidence.json").write_bytes(real.read_bytes())  # its storage probe's folder is probes/04-storage
    (tmp_path / "probes" / "04-storage").mkdir()
    (tmp_path / "probes" / "04-storage" / "rank-0.json").write_text(json.dumps(beat))
    assert walls.main([str(tmp_path), "--phases"]) == 0
    assert [line.split()[-1] for line in capsys.readouterr().out.splitlines() if "clean up" in line] == ["6.2"]
    with pytest.raises(SystemExit) as info:
        walls.main([str(tmp_path), str(tmp_path), "--phases"])  # one evidence file only
    assert info.value.code == 4
    assert "--phases: one" in capsys.readouterr().err


def test_nccl_s_warnings_reach_a_failed_probe_s_message(tmp_path: Path) -> None:
    """NCCL's report goes to a file per rank (``probes.nccl_log``): its warnings still reach the message."""
    from acceptance.run.diagnose import nccl_warnings

    folder = tmp_path / "nccl"
    folder.mkdir()
    (folder / "nccl-gpu1.4242.log").write_text(
        "gpu1:4242:4260 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
        "gpu1:4242:4260 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12\n"
    )
    text = nccl_warnings(folder)
    assert "Got completion from peer" in text and "via P2P" not in text
    assert nccl_warnings(tmp_path / "none") == ""
