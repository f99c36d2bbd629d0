"""What an installation gives: one version everywhere, the suite inside the package (``cluster-acceptance
run``), and a DeepSpeed op cache per environment."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import acceptance
from acceptance.cli import container
from acceptance.cli.main import main
from acceptance.profile import loader as profiles
from acceptance.run.launcher import child_env
from tests.harness import PLUGIN_ARGS, ROOT, evidence


def suite_files(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.py")}


def test_version_is_the_package_attribute(capsys: pytest.CaptureFixture[str]) -> None:
    assert 'version = {attr = "acceptance.__version__"}' in (ROOT / "pyproject.toml").read_text()
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"cluster-acceptance {acceptance.__version__}\n"


def test_the_pytest_header_names_the_version(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "local-cpu", "--collect-only")
    result.stdout.fnmatch_lines([f"cluster-acceptance {acceptance.__version__} (*)", "cluster profile: local-cpu *"])


def test_the_suite_is_found_with_every_module() -> None:
    found = container.suite_dir()
    assert suite_files(found) == suite_files(ROOT / "tests_cluster")
    assert {"__init__.py", "conftest.py", "test_connectivity.py"} <= suite_files(found)


def recorder(seen: list[list[str]], status: int) -> Callable[[list[str]], int]:
    """A stand-in for pytest.main that records its arguments."""

    def fake(args: list[str]) -> int:
        seen.append(args)
        return status

    return fake


def test_run_hands_the_installed_suite_to_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(pytest, "main", recorder(seen, 0))
    assert main(["run", "--profile", "local-cpu", "--evidence", "ev", "--", "-k", "connectivity", "-x"]) == 0
    suite = str(container.suite_dir())
    assert seen == [["-p", "no:cacheprovider", f"--rootdir={suite}", suite, "--cluster-profile", "local-cpu",
                     "--cluster-evidence", "ev", "-k", "connectivity", "-x"]]  # fmt: skip


def test_run_takes_the_profile_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(pytest, "main", recorder(seen, 3))
    monkeypatch.setenv("CLUSTER_PROFILE", "h200-x2")
    assert main(["run"]) == 3  # pytest's exit status
    assert seen[0][4:6] == ["--cluster-profile", "h200-x2"] and "--cluster-evidence" not in seen[0]


def test_run_without_a_profile_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CLUSTER_PROFILE", raising=False)
    monkeypatch.setattr(pytest, "main", lambda args: pytest.fail(f"pytest ran: {args}"))
    assert main(["run", "-k", "connectivity"]) == 4
    assert "cluster-acceptance run: name the profile: --profile NAME" in capsys.readouterr().err


def test_other_commands_refuse_arguments_they_do_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["list", "-k", "x"])
    assert exit_info.value.code == 4
    assert "unrecognized arguments: -k x" in capsys.readouterr().err


def test_show_get_prints_one_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "local-cpu", "--get", "topology.gpus_per_node"]) == 0
    assert main(["show", "local-cpu", "--get", "collectives.iters", "--set", "collectives.iters=3"]) == 0
    assert main(["show", "local-cpu", "--get", "collectives.sizes"]) == 0
    sizes = json.dumps(profiles.load("local-cpu").model.model_dump(mode="json")["collectives"]["sizes"])
    assert capsys.readouterr().out == f"0\n3\n{sizes}\n"


def test_show_get_names_the_keys_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "local-cpu", "--get", "topology.gpus"]) == 4
    err = capsys.readouterr().err
    assert "--get topology.gpus: topology has no key 'gpus'; its keys: nodes, ranks_per_node, gpus_per_node" in err


def test_report_help_names_the_plot_it_writes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps help at the terminal's width, and breaks at hyphens
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "an HTML report (one self-contained file)" in out and " busbw.png" not in out


def test_probes_get_an_op_cache_of_this_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert child_env({})["TORCH_EXTENSIONS_DIR"] == str(Path(sys.prefix) / "var" / "cache" / "torch_extensions")


def test_an_op_cache_the_user_chose_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/scratch/ops")
    assert child_env({})["TORCH_EXTENSIONS_DIR"] == "/scratch/ops"
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    assert child_env({"TORCH_EXTENSIONS_DIR": "/from/profile"})["TORCH_EXTENSIONS_DIR"] == "/from/profile"


@pytest.mark.e2e
def test_the_wheel_carries_the_suite_and_the_profiles(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for name in ("acceptance", "thresholds", "tests_cluster"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    (wheel,) = tmp_path.glob("cluster_acceptance-*.whl")
    assert wheel.name.startswith(f"cluster_acceptance-{acceptance.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"acceptance/suite/{name}" for name in suite_files(ROOT / "tests_cluster")}
    assert shipped <= names and "acceptance/thresholds/local-cpu.yaml" in names
    assert not any(n.startswith(("tests/", "tests_cluster/")) for n in names)
    # every module and data file of the package: a package missing from pyproject's list imports in a
    # checkout and fails once installed (the container image, a wheel)
    package = ROOT / "acceptance"
    ours = {f"acceptance/{p.relative_to(package)}" for p in package.rglob("*") if p.suffix in (".py", ".yaml", ".json")}
    ours = {n for n in ours if "__pycache__" not in n}
    assert ours <= names, f"not in the wheel: {sorted(ours - names)}"


@pytest.mark.e2e
def test_run_passes_the_installed_suite_through_pytest(tmp_path: Path) -> None:
    folder = tmp_path / "ev"
    argv = [sys.executable, "-m", "acceptance.cli.main", "run", "--profile", "local-cpu", "--evidence", str(folder),
            "--", "-k", "connectivity"]  # fmt: skip
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^cluster-acceptance \S+ \(", out.stdout, re.M), out.stdout
    data = evidence(folder)
    passed = [t["nodeid"] for t in data["tests"] if t["outcome"] == "passed"]
    # test ids relative to the suite, wherever it is installed and wherever the run started
    assert passed and all(nodeid.startswith("test_connectivity.py::") for nodeid in passed), passed


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(*extras: str) -> set[str]:
    """The distributions the installed package requires: its dependencies and those of ``extras``."""
    names: set[str] = set()
    for requirement in importlib.metadata.requires("cluster-acceptance") or []:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"""extra\s*==\s*["']([\w-]+)["']""", requirement)
        if name is not None and (extra is None or extra.group(1) in extras):
            names.add(_normal(name.group(0)))
    return names


def _imported(*paths: Path) -> set[str]:
    """The top-level names that the Python files under ``paths`` import, wherever in a file they do."""
    names: set[str] = set()
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*.py")))]
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"acceptance", "tests", "tests_cluster", "conftest", "__future__"}


@pytest.mark.parametrize(
    ("what", "paths", "extras"),
    [
        # the README's `pip install -e '.[test]'`, then its test command
        ("the plugin's tests", ("tests", "tests_cluster", "conftest.py"), ("test",)),
        # `pip install -e '.[docs]'`, then `mkdocs build`, which loads the site's hook
        ("the site's hook", ("docs/hooks.py",), ("docs",)),
        # the package alone, and the optional imports its gpu and report extras are for
        ("the package", ("acceptance",), ("gpu", "report")),
    ],
)
def test_every_extra_holds_what_its_commands_import(what: str, paths: tuple[str, ...], extras: tuple[str, ...]) -> None:
    """A fresh environment with the README's install runs the README's commands: every module they import is
    a declared dependency (or one of the named extras), not one that some other extra happened to bring."""
    distributions = importlib.metadata.packages_distributions()
    declared = _declared(*extras)
    missing = {
        module: distributions.get(module, ["(not installed)"])
        for module in sorted(_imported(*(ROOT / p for p in paths)))
        if not {_normal(d) for d in distributions.get(module, [])} & declared
    }
    assert not missing, f"{what} import modules that no dependency of extras {extras} declares: {missing}"


def _readme_commands() -> ModuleType:
    """``.ci/readme_commands.py``, which CI reads the README's set-up from (a script, not a module of the package)."""
    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / ".ci" / "readme_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_runs_the_readme_s_set_up_as_the_readme_prints_it() -> None:
    """CI takes the install and test commands from the README's text, so the two cannot drift apart: the
    commands are those of the README's sections, and .ci/run runs those sections' commands and no test command
    of its own for the plugin's tests."""
    readme = _readme_commands()
    text = (ROOT / "README.md").read_text()
    install = readme.section_commands(text, "Install")
    plugin_tests = readme.section_commands(text, "Test the plugin")
    assert install[0].startswith("pip install torch==") and install[-1].startswith("pip install -e '.[")
    assert [c for c in plugin_tests if c.startswith("pip ")] == ["pip install -e '.[test]'"]
    assert [c for c in plugin_tests if not c.startswith("pip ")] == ["python -m pytest -n 2 tests/"]
    for command in (*install, *plugin_tests):
        assert f"\n    {command}\n" in text  # as printed, one line each
    ci = (ROOT / ".ci" / "run").read_text()
    assert '.ci/readme_commands.py README.md "Install" "Test the plugin"' in ci
    assert "pytest -n" not in ci and "pip install --quiet -e '.[test]'" not in ci


def test_readme_commands_name_a_missing_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = _readme_commands()
    text = "# x\n\n## Install\n\nNo code here.\n\n## Next\n\n    pip install later\n"
    with pytest.raises(readme.ReadmeError, match="'## Install' has no indented code block"):
        readme.section_commands(text, "Install")
    assert readme.section_commands(text, "Next") == ["pip install later"]
    (tmp_path / "README.md").write_text(text)
    assert readme.main([str(tmp_path / "README.md"), "Test the plugin"]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'README.md'}: no section '## Test the plugin'\n"
    # a command continued on the next line is one command
    block = "## Run\n\n    pip install \\\n        -e .\n    pytest\n"
    assert readme.section_commands(block, "Run") == ["pip install -e .", "pytest"]


def test_the_wheel_lists_every_package_of_the_tree() -> None:
    """The wheel takes the packages pyproject.toml names: a family turned into a package (its report section,
    its part of init) must be named there, or the installed plugin cannot import it."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "acceptance").rglob("__init__.py")}
    assert tree - listed == set(), f"packages of acceptance/ the wheel leaves out: {sorted(tree - listed)}"
