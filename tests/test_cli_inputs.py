"""Options that name nothing, or a number below their bound, are one line (exit 4) naming the option."""

from __future__ import annotations

import pytest

from acceptance.cli.main import main


@pytest.mark.parametrize("given", [",", " , ,", ""])
def test_sweep_ops_naming_no_operation(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--ops", given]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--ops" in err and "all_reduce" in err, err


@pytest.mark.parametrize("given", ["-3", "0", "x"])
def test_init_nodes_below_one_says_one_bound(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["init", "--nodes", given])
    assert exit_.value.code == 4
    err = capsys.readouterr().err
    assert "--nodes" in err and f"expected a whole number >= 1, got {given!r}" in err, err
