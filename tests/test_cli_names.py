"""One name per option across the commands, mirroring pytest's --cluster-* names; old spellings hidden."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from acceptance.cli import bench_train
from acceptance.cli.main import main, parser


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(command: argparse.ArgumentParser) -> dict[str, str]:
    """option string -> destination."""
    return {s: a.dest for a in command._actions for s in a.option_strings}


@pytest.mark.parametrize("name", ["junit", "merge", "report", "rebaseline", "export", "init"])
def test_a_command_that_writes_one_file_names_it_with_o_and_output(name: str) -> None:
    found = options(subcommands()[name])
    assert found["-o"] == found["--output"] == "output"


@pytest.mark.parametrize("name", ["run", "sweep"])
def test_a_command_that_writes_an_evidence_folder_names_it_evidence(name: str) -> None:
    assert options(subcommands()[name])["--evidence"] == "evidence"
    assert "--out" not in subcommands()[name].format_help()


def test_the_old_sweep_out_still_reaches_the_evidence_folder() -> None:
    args = parser().parse_args(["sweep", "--out", "somewhere"])
    assert args.evidence == Path("somewhere")


def test_bench_train_names_the_scaling_baseline_as_the_profile_does() -> None:
    assert bench_train.parse_args(["--scaling-baseline"]).scaling_baseline is True
    assert bench_train.parse_args(["--baseline"]).scaling_baseline is True  # the old spelling, hidden
    assert bench_train.parse_args([]).scaling_baseline is False
    assert bench_train.parse_args(["--evidence", "e"]).evidence == Path("e")


def test_show_get_reaches_a_threshold_whose_metric_name_holds_dots(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "local-cpu", "--get", "thresholds.compute.copy_gbps_min.min"]) == 0
    assert capsys.readouterr().out.strip() == "0.05"
    assert main(["show", "local-cpu", "--get", "thresholds.compute.nothing"]) == 4
    assert "thresholds has no key 'compute'" in capsys.readouterr().err
