"""benchmarks/nccltests_table.py and nccltests_spread.py: nccl-tests' table and the suite's sweep side by side,
and what the spread rule said of a run (inputs in tests/data/nccltests, laid out as nccl-tests prints)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.harness import ROOT

DATA = ROOT / "tests" / "data" / "nccltests"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


table = _load("nccltests_table")
spread_script = _load("nccltests_spread")


def test_the_column_compared_is_the_one_whose_buffers_the_suite_uses() -> None:
    text = (DATA / "plain" / "all_reduce.txt").read_text()
    rows = table.parse_nccl_tests(text, "all_reduce")  # the suite's all_reduce is in place
    assert [(r.size, r.time_us) for r in rows] == [(8, 12.4), (2097152, 29.0)]
    a2a = table.parse_nccl_tests((DATA / "plain" / "alltoall.txt").read_text(), "all_to_all")  # out of place
    assert [(r.size, r.time_us) for r in a2a] == [(0, 6.1), (64, 15.0), (2097152, 40.0)]
    assert all(r.p99_us is None for r in rows)


def test_per_iteration_columns_are_read_with_i_1() -> None:
    (row,) = table.parse_nccl_tests((DATA / "per_iter" / "all_reduce.txt").read_text(), "all_reduce")
    assert (row.time_us, row.p99_us, row.cv_pct) == (12.9, 19.0, 13.2)


def test_sizes_pair_on_the_bytes_moved_and_ratios_are_flagged_by_size() -> None:
    ours = table.parse_sweep(DATA / "sweep-evidence.json")
    assert [(r.op, r.size) for r in ours if r.op == "all_to_all"] == [("all_to_all", 64), ("all_to_all", 2097152)]
    pairs = table.pair(ours, table.read_dir(DATA / "plain"), table.read_dir(DATA / "per_iter"))
    found = {(p.op, p.size): p for p in pairs}
    # 12.4 / 13.0 = 0.954: inside 0.9-1.1 below 1 MiB
    assert found[("all_reduce", 8)].ratio == pytest.approx(12.4 / 13.0) and not found[("all_reduce", 8)].flagged
    assert found[("all_reduce", 8)].per_iter is not None
    # 29.0 / 29.5 = 0.983 from 1 MiB: inside 0.95-1.05
    assert not found[("all_reduce", 2097152)].flagged
    # 40 / 36 = 1.11 at 2 MiB: outside 0.95-1.05
    assert found[("all_to_all", 2097152)].flagged
    # nccl-tests' 0 B call (a part rounded down to 16 B) has no partner, and says why
    zero = found[("all_to_all", 0)]
    assert zero.ours is None and zero.ratio is None and "0 B" in zero.reason
    text = table.table(pairs)
    assert text.count("| all_to_all | 64 |") == 1  # the suite's repeated size (same_as) once


def test_the_table_exits_1_when_a_ratio_is_outside_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    assert table.main([str(DATA / "plain"), str(DATA / "sweep-evidence.json")]) == 1
    assert "1 outside the bounds" in capsys.readouterr().out


def test_the_table_exits_0_when_every_ratio_is_inside(tmp_path: Path) -> None:
    doc = json.loads((DATA / "sweep-evidence.json").read_text())
    rows = doc["tests"][0]["measurements"]["sweep"]["rows"]
    doc["tests"][0]["measurements"]["sweep"]["rows"] = [r for r in rows if r["op"] == "all_reduce"]
    (tmp_path / "evidence.json").write_text(json.dumps(doc))
    assert table.main([str(DATA / "plain"), str(tmp_path)]) == 0


def _evidence(tmp_path: Path, verdict: str, rank: int) -> Path:
    checks = [
        {
            "metric": "collectives.rank_p99_ratio",
            "value": 4.2,
            "bound": "<= 3",
            "verdict": verdict,
            "detail": f"rank {rank}",
        },
        {"metric": "collectives.rank_cv_excess", "value": 0.1, "bound": "<= 0.5", "verdict": "pass", "detail": ""},
    ]
    test = {"nodeid": "x::test_rank_spread", "measurements": {"standout": {"rank": rank}}, "checks": checks}
    (tmp_path / "evidence.json").write_text(json.dumps({"tests": [test]}))
    return tmp_path


def test_the_spread_script_says_whether_the_slowed_rank_was_named(tmp_path: Path) -> None:
    assert spread_script.main([str(_evidence(tmp_path, "fail", 3)), "--slowed-rank", "3"]) == 0
    assert spread_script.main([str(_evidence(tmp_path, "fail", 1)), "--slowed-rank", "3"]) == 1  # another rank
    assert spread_script.main([str(_evidence(tmp_path, "pass", 3)), "--slowed-rank", "3"]) == 1  # not failed
    assert spread_script.main([str(_evidence(tmp_path, "pass", 3))]) == 0  # healthy, passed
    assert spread_script.main([str(_evidence(tmp_path, "fail", 3))]) == 1  # healthy, a false alarm
