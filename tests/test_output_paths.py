"""Every output path is checked one way (``merge -o``, ``--junit``, ``junit -o``, ``report -o``, ``export
-o``): never a folder, never a FIFO, never two outputs on one path, never another run's evidence. Each is
one line, exit 4, naming the option and the path, and nothing is written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from acceptance.cli.main import main
from tests.harness import ROOT

FAIL = ROOT / "tests" / "data" / "evidence-fail.json"


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    ours, theirs = tmp_path / "ours" / "evidence.json", tmp_path / "theirs" / "evidence.json"
    for path in (ours, theirs):
        path.parent.mkdir()
        shutil.copy(FAIL, path)
    return ours, theirs


def _cases(tmp_path: Path, ours: Path, theirs: Path) -> dict[str, tuple[list[str], str]]:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    renamed = tmp_path / "kept.json"
    shutil.copy(FAIL, renamed)  # evidence under another name
    out = str(tmp_path / "m.json")
    return {
        "merge -o a folder": (["merge", str(ours), "-o", str(folder)], "is a folder"),
        "merge --junit equal to -o": (["merge", str(ours), "-o", out, "--junit", out], "the same file as -o"),
        "merge -o another run's evidence": (["merge", str(ours), "-o", str(theirs)], "holds a run's evidence"),
        "merge -o evidence renamed": (["merge", str(ours), "-o", str(renamed)], "holds a run's evidence"),
        "merge -o a FIFO": (["merge", str(ours), "-o", str(fifo)], "a FIFO, not a regular file"),
        "junit -o another run's evidence": (["junit", str(ours), "-o", str(theirs)], "holds a run's evidence"),
        "report -o another run's evidence": (["report", str(ours), "-o", str(theirs)], "holds a run's evidence"),
        "report -o a folder": (["report", str(ours), "-o", str(folder)], "is a folder"),
        "report -o into another run's folder": (
            ["report", str(ours), "-o", str(theirs.with_name("report.html"))],
            "is in another run's evidence folder",
        ),
        "merge -o into another run's folder": (
            ["merge", str(ours), "-o", str(theirs.with_name("merged.json"))],
            "is in another run's evidence folder",
        ),
        "report -o its Markdown": (["report", str(ours), "-o", str(tmp_path / "r.md")], "the same file as -o"),
        "export -o its input": (["export", str(ours), "-o", str(ours)], "is one of the inputs"),
    }


def test_every_output_path_is_checked_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours, theirs = _runs(tmp_path)
    before = theirs.read_bytes(), ours.read_bytes()
    for name, (argv, said) in _cases(tmp_path, ours, theirs).items():
        assert main(argv) == 4, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, (name, err)
        assert (theirs.read_bytes(), ours.read_bytes()) == before, name
    assert not (tmp_path / "m.json").exists() and sorted(p.name for p in (tmp_path / "a-folder").iterdir()) == []
    assert sorted(p.name for p in theirs.parent.iterdir()) == ["evidence.json"]


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours, _ = _runs(tmp_path)
    (tmp_path / "afile").write_text("a file, not a folder")
    assert main(["junit", str(ours), "-o", str(tmp_path / "afile" / "j.xml")]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "afile is not a folder" in err, err
