"""Every file the user names is read only when it is a regular file under its cap: a symlink to
/dev/zero, a FIFO or a folder is one line (exit 4) naming it, never a hang or a memory error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acceptance.cli.main import main
from tests.harness import ROOT

FAIL = ROOT / "tests" / "data" / "evidence-fail.json"


def _not_files(tmp_path: Path) -> dict[str, Path]:
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    return {"a character device": zero, "a FIFO": fifo}


@pytest.mark.parametrize("command", ["merge", "junit", "report", "export", "show"])
def test_a_reader_refuses_what_is_not_a_regular_file(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for kind, path in _not_files(tmp_path).items():
        if command == "show":
            profile = tmp_path / f"{path.stem}.yaml"
            profile.symlink_to(path)
            argv = ["show", str(profile)]
        else:
            argv = [command, str(path)] + (["-o", str(tmp_path / "out.json")] if command == "merge" else [])
        assert main(argv) == 4
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and kind in err and "not a regular file" in err, err
        assert str(path.stem) in err


def test_the_evidence_cap_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "evidence.json"
    path.write_text(FAIL.read_text())
    monkeypatch.setenv("CLUSTER_EVIDENCE_MAX_MB", "0.001")
    assert main(["merge", str(path), "-o", str(tmp_path / "m.json")]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "MB" in err


def test_extends_takes_a_profile_only_and_never_echoes_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "app.conf"
    other.write_text("x: 1\npassword: hunter2\nzzz: 3\n")
    mapping = tmp_path / "other.yaml"
    mapping.write_text("user_name: alice\npassword: hunter2\n")
    for parent in (other, mapping, Path("/etc/passwd")):
        child = tmp_path / "child.yaml"
        child.write_text(f"name: child\nextends: {parent}\n")
        assert main(["show", str(child)]) == 4
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "extends" in err and "not a profile" in err, err
        assert "hunter2" not in err and "password" not in err and "user_name" not in err and "root:x" not in err
