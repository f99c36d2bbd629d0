"""A newcomer's first hour: README's walkthrough and the next commands the tool suggests work as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from acceptance.cli import init as init_cli
from acceptance.cli import main as cli_main
from acceptance.cli import sweep
from acceptance.cli.main import main
from acceptance.families.collectives import COLLECTIVES
from acceptance.probes.node_survey import detect
from acceptance.profile import loader
from tests.test_init import sources

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _commands(text: str, start: str) -> list[list[str]]:
    """The indented command lines of ``text`` that start with ``start``, split as a shell would."""
    return [shlex.split(m.group(1)) for m in re.finditer(rf"^ +({re.escape(start)}.*)$", text, re.M)]


def _seen(seen: list[list[str]], args: list[str]) -> int:
    seen.append(list(args))
    return 0


def test_run_takes_the_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run --tier quick`` ended in pytest's "unrecognized arguments: --tier"."""
    seen: list[list[str]] = []
    monkeypatch.setattr("pytest.main", lambda args: _seen(seen, args))
    assert main(["run", "--profile", "local-cpu", "--tier", "quick"]) == 0
    assert "--tier" not in seen[0] and seen[0][seen[0].index("--cluster-tier") + 1] == "quick"


def test_init_for_several_nodes_names_the_one_node_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After ``init --nodes 4`` the suggested command, run on the one node init ran on, needs the node count
    overridden: the message names ``--cluster-set topology.nodes=1``."""
    monkeypatch.setattr(init_cli, "survey", lambda: detect(sources(tmp_path, None)))
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--name", "my-cluster", "--nodes", "4"]) == 0
    printed = capsys.readouterr().out
    nexts = [line for line in printed.splitlines() if line.startswith("next")]
    assert nexts and "--cluster-set topology.nodes=1" in " ".join(nexts), printed
    assert (tmp_path / "thresholds" / "my-cluster.yaml").is_file()


def test_readme_walkthrough_runs_the_profile_init_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 2's init writes thresholds/my-cluster.yaml; step 3 runs that profile on one node, as written."""
    (init,) = [c for c in _commands(README, "cluster-acceptance init") if "--name" in c] or [
        shlex.split(m) for m in re.findall(r"`(cluster-acceptance init --name [^`]+)`", README)
    ]
    name = init[init.index("--name") + 1]
    (step3,) = [c for c in _commands(README, "cluster-acceptance run --profile") if "topology.nodes=1" in c]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "thresholds").mkdir()
    (tmp_path / "thresholds" / f"{name}.yaml").write_text(f"name: {name}\nextends: local-cpu\n")
    profile = step3[step3.index("--profile") + 1]
    assert loader.find(profile).resolve() == (tmp_path / "thresholds" / f"{name}.yaml").resolve()
    seen: list[list[str]] = []
    monkeypatch.setattr("pytest.main", lambda args: _seen(seen, args))
    assert cli_main.main(step3[1:]) == 0
    assert seen[0][-2:] == ["--cluster-set", "topology.nodes=1"]


def test_sweep_defaults_on_the_cpu_stop_where_gloo_finishes() -> None:
    """The default -e 1G timed out on the CPU at 512M; without -e, the CPU sweep ends at 16M."""
    args = sweep.SweepArgs("1M", None, 2, ["all_reduce"], None, None, None, None, None, None, None)
    sizes = COLLECTIVES.section_of(sweep.load_profile(args).model).sizes
    assert sizes[0] == "1M" and sizes[-1] == sweep.CPU_MAX_BYTES == "16M"
    given = sweep.SweepArgs("1M", "64M", 2, ["all_reduce"], None, None, None, None, "local-cpu", None, None)
    assert COLLECTIVES.section_of(sweep.load_profile(given).model).sizes[-1] == "64M"
    assert COLLECTIVES.section_of(sweep.load_profile(given).model).spread_iters == 0  # busbw alone, as nccl-tests
