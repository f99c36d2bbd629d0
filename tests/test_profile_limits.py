"""Hostile input to the profile and the run options: names that would be paths, an empty evidence path,
seconds too large for the ranks' timers, YAML that would expand without end, a folder given as a profile,
overrides whose errors must name the option, and thousands of errors at once. Each is refused before
anything runs, in one message that names where."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from acceptance.plugin.options import folder_path
from acceptance.profile import strict_yaml
from acceptance.profile.arguments import positive_seconds
from acceptance.profile.loader import MAX_PROBLEMS, load
from tests.harness import PLUGIN_ARGS
from tests.test_profile import BASE, error_of, write


@pytest.mark.parametrize("name", ["x/../../../../tmp/escaped", "../up", "..", ".hidden", "a b", "a:b", ""])
def test_profile_name_must_be_a_plain_name(here: Path, name: str) -> None:
    write(here, "p", f"name: {name!r}\n{BASE}")
    assert error_of("p") == (
        "invalid profile:\n  thresholds/p.yaml:1: name: a profile name is letters, digits, '.', '_' and '-', "
        f"starting with a letter or digit (it names the evidence folder), got {name!r}"
    )


def test_profile_name_plain_ones_load(here: Path) -> None:
    write(here, "p", f"name: H100_x8-v1.2\n{BASE}")
    assert load("p").name == "H100_x8-v1.2"


@pytest.mark.e2e
def test_a_name_with_slashes_writes_nothing(suite: pytest.Pytester) -> None:
    (suite.path / "bad.yaml").write_text(f"name: 'x/../../escaped'\n{BASE}")
    result = suite.runpytest_subprocess(*PLUGIN_ARGS, "--cluster-profile", "bad.yaml", "tests_cluster/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "bad.yaml:1: name: a profile name is letters" in result.stderr.str()
    written = [p.name for p in suite.path.iterdir() if p.name == "acceptance-results" or "escaped" in p.name]
    assert written == [] and not (suite.path.parent / "escaped").exists()


@pytest.mark.parametrize("text", ["", "  "])
def test_empty_evidence_path_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a folder path, got an empty value"):
        folder_path(text)


@pytest.mark.e2e
def test_empty_evidence_option_is_a_usage_error(suite: pytest.Pytester) -> None:
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "--cluster-profile", "local-cpu", "--cluster-evidence", "", "tests_cluster/"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --cluster-evidence: expected a folder path, got an empty value"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (suite.path / "evidence.json").exists() and not (suite.path / "acceptance-results").exists()


@pytest.mark.parametrize("text", ["1e14", "604801", "1e300"])
def test_seconds_beyond_seven_days_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected at most 604800 seconds \\(7 days\\), got {text!r}"):
        positive_seconds(text)
    assert positive_seconds("604800") == 604800.0


@pytest.mark.parametrize("where", ["timeouts: {default: 1e15}", "timeouts: {storage: 604801}"])
def test_profile_seconds_beyond_seven_days_are_refused(here: Path, where: str) -> None:
    write(here, "p", f"name: p\n{BASE}{where}\n")
    error = error_of("p")
    assert error.startswith("invalid profile:\n  thresholds/p.yaml:3: timeouts.") and "at most 604800" in error


@pytest.mark.e2e
def test_huge_cluster_timeout_is_a_usage_error(suite: pytest.Pytester) -> None:
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "--cluster-profile", "local-cpu", "--cluster-timeout", "1e14", "tests_cluster/"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --cluster-timeout: expected at most 604800 seconds (7 days), got '1e14'"])


BOMB = "\n".join(
    ["name: p", "a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
)


def test_alias_bomb_is_refused(here: Path) -> None:
    write(here, "p", BOMB + "\n")
    error = error_of("p")
    assert error.startswith("thresholds/p.yaml:") and "aliases expand to more than" in error


def test_deep_nesting_is_refused(here: Path) -> None:
    write(here, "p", "name: p\ndescription: " + "[" * 5000 + "]" * 5000 + "\n")
    assert error_of("p").startswith("thresholds/p.yaml: nested too deep")


def test_oversized_profile_is_refused(here: Path) -> None:
    write(here, "p", "name: p\n" + "#" * strict_yaml.MAX_BYTES + "\n")
    cap = strict_yaml.MAX_BYTES / 2**20
    assert error_of("p") == f"thresholds/p.yaml: cannot read profile: larger than the {cap:g} MB cap"


def test_a_folder_is_not_a_profile(here: Path) -> None:
    (here / "folder.yaml").mkdir()
    assert error_of("folder.yaml") == "folder.yaml: is a folder, not a profile file"


def test_cluster_set_through_a_number_names_the_option() -> None:
    error = error_of("local-cpu", ["training.steps.x=3"])
    assert (
        error == "invalid profile:\n  --cluster-set training.steps.x=3: training.steps: Input should be a valid integer"
    )


def test_cluster_set_caught_by_its_section_names_the_option() -> None:
    error = error_of("local-cpu", ["training.strategies=[ddp,nosuch]"])
    assert error.startswith("invalid profile:\n  --cluster-set training.strategies=[ddp,nosuch] (in ")
    assert "local-cpu.yaml:" in error and "strategies ['nosuch'] are neither built in" in error


def test_many_problems_are_capped(here: Path) -> None:
    rows = "".join(f"  connectivity.nosuch_{i}: {{min: 1}}\n" for i in range(1_000))
    write(here, "p", f"name: p\n{BASE}thresholds:\n{rows}")
    lines = error_of("p").splitlines()
    assert len(lines) == MAX_PROBLEMS + 2, lines[:3]
    assert lines[-1] == f"  ... and {1_000 - MAX_PROBLEMS} more"


def test_many_schema_problems_are_capped(here: Path) -> None:
    rows = "".join(f"  nosuch_{i}: 1\n" for i in range(500))
    write(here, "p", f"name: p\n{BASE}collectives:\n{rows}")
    lines = error_of("p").splitlines()
    assert len(lines) == MAX_PROBLEMS + 2 and lines[-1] == f"  ... and {500 - MAX_PROBLEMS} more"
