"""``cluster-acceptance merge``: never over its own input, every document's errors kept, two runs of one
host labelled apart, documents of different profiles refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acceptance.cli.main import main
from acceptance.evidence.merge import merge
from acceptance.evidence.store import read_evidence
from tests.harness import ROOT

FAIL = ROOT / "tests" / "data" / "evidence-fail.json"


def node(tmp_path: Path, name: str, host: str, errors: list[str], sha: str = "0" * 64, rank: int = 0) -> Path:
    data = json.loads(FAIL.read_text())
    data["topology"]["host"], data["topology"]["node_rank"] = host, rank
    data["errors"] = errors
    data["profile"]["sha256"] = sha
    path = tmp_path / name / "evidence.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("target", ["a", "b", "folder"])
def test_merge_refuses_to_write_over_an_input(tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = node(tmp_path, "a", "node-a", []), node(tmp_path, "b", "node-b", [])
    before = b.read_bytes(), a.read_bytes()
    output = {"a": a, "b": b, "folder": b.parent / "." / "evidence.json"}[target]
    args = [str(a), str(b.parent), "-o", str(output)]
    assert main(["merge", *args]) == 4
    assert (b.read_bytes(), a.read_bytes()) == before
    assert "is one of the inputs" in capsys.readouterr().err
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "m.json"), "--junit", str(a)]) == 4
    assert a.read_bytes() == before[1]


def test_merge_keeps_every_documents_errors(tmp_path: Path) -> None:
    shared = "thresholds that no test checked: connectivity.p2p_min_gbps"
    a = read_evidence(node(tmp_path, "a", "node-a", [shared, "a broke"]))
    b = read_evidence(node(tmp_path, "b", "node-b", [shared, "b broke"], rank=1))
    merged = merge([a, b])
    assert merged.errors == [shared, "node0-node-a: a broke", "node1-node-b: b broke"]  # a shared one once


def test_two_runs_of_one_host_are_labelled_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, again = node(tmp_path, "a", "vm", []), node(tmp_path, "b", "vm", [])
    out = tmp_path / "m.json"
    assert main(["merge", str(first), str(again), "-o", str(out)]) == 1  # FAIL, merged
    assert "2 documents of one node (node0-vm): labelled node0-vm, node0-vm~2" in capsys.readouterr().out
    merged = read_evidence(out)
    ids = [t.nodeid for t in merged.tests]
    assert len(ids) == len(set(ids)) == 6
    assert [m.node for m in merged.merged_from or []] == ["node0-vm", "node0-vm~2"]


def test_documents_of_different_profiles_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = node(tmp_path, "a", "node-a", [])
    b = node(tmp_path, "b", "node-b", [], sha="1" * 64)
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "m.json")]) == 4
    err = capsys.readouterr().err
    assert "different profiles" in err and "000000000000" in err and "111111111111" in err
    assert not (tmp_path / "m.json").exists()
