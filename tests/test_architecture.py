"""The shape of the package, checked: imports run one way, probes stay apart, the suite uses the public API.

Size is kept in check by ruff's complexity rules (pyproject.toml), not by a cap on lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ROOT

PACKAGE = ROOT / "acceptance"
# what each part may import (besides itself); the leaves import nothing of the package
LEAVES = ("atomic_file", "regular_file", "numbers", "masking", "json_types", "verdicts")
ALLOWED: dict[str, set[str]] = {
    "atomic_file": set(),
    "regular_file": set(),
    "numbers": set(),
    "masking": set(),
    "json_types": set(),
    "verdicts": set(),
    # the types a family declares itself with, below the families; the list of families, the profile model
    # built from it, the loader and the judge above them (acceptance.profile)
    "schema": {"numbers"},
    "families": {"schema", "numbers"},
    "profile": {"schema", "families", "numbers", "masking", "regular_file"},
    "evidence": {"atomic_file", "regular_file", "numbers", "masking"},
    "multinode": set(),
    "probes": {"schema", "masking", "profile", "families", "numbers", "atomic_file"},  # masking: their env records
    "run": {"schema", "masking", "profile", "families", "evidence", "multinode", "numbers", "atomic_file"},
    "reports": {"schema", "masking", "profile", "families", "evidence", "numbers", "atomic_file"},
    "plugin": {
        "schema",
        "masking",
        "run",
        "profile",
        "families",
        "evidence",
        "multinode",
        "reports",
        "numbers",
        "atomic_file",
    },
    "cli": {
        "schema",
        "masking",
        "plugin",
        "run",
        "profile",
        "families",
        "evidence",
        "multinode",
        "reports",
        "numbers",
        "atomic_file",
        "regular_file",
    },
}
# the JSON types are plain type aliases, and the verdict vocabulary is one set of words and the one decision
# of a run's verdict: any part may name them
for _part, _allowed in ALLOWED.items():
    if _part not in LEAVES:
        _allowed |= {"json_types", "verdicts"}
TORCH_ALLOWED = ("probes",)  # everything else imports torch lazily, inside the function that needs it


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def imports(path: Path, module_level_only: bool = False, type_only: bool = False) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import of ``path``; imports for type checking only are skipped unless
    ``type_only`` asks for them too (a cycle through them is still a cycle for the reader and the checker)."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if not type_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    for node in nodes:
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)


def part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def internal_graph() -> dict[str, set[str]]:
    names = {name for name, _ in modules()}
    graph: dict[str, set[str]] = {}
    for name, path in modules():
        found = imports(path, type_only=True)
        graph[name] = {m for m, _ in found if m in names and m != name and not name.startswith(m + ".")}
    return graph


def test_imports_follow_the_layers() -> None:
    wrong = []
    for name, path in modules():
        mine = part(name)
        if mine not in ALLOWED:
            continue
        for target, line in imports(path):
            theirs = part(target) if target.startswith("acceptance.") else None
            if theirs and theirs != mine and theirs not in ALLOWED[mine]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {mine} imports {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_every_part_is_in_the_layer_table() -> None:
    parts = {part(name) for name, _ in modules()} - {""}
    assert parts <= set(ALLOWED), f"parts without a layer: {parts - set(ALLOWED)}"


def test_no_import_cycles() -> None:
    graph = internal_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_torch_only_at_module_level_in_probes() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for name, path in modules()
        if part(name) not in TORCH_ALLOWED
        for target, line in imports(path, module_level_only=True)
        if target == "torch" or target.startswith("torch.")
    ]
    assert not wrong, f"module-level torch imports outside probes/: {wrong}"


def test_only_the_plugin_and_the_commands_import_pytest() -> None:
    # the commands start pytest (the container's entry point runs the suite); nothing else may need it
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for name, path in modules()
        if part(name) not in ("plugin", "cli")
        for target, line in imports(path)
        if target == "pytest" or target.startswith("_pytest")
    ]
    assert not wrong, f"pytest imported outside acceptance/plugin/: {wrong}"


SUITE = ROOT / "tests_cluster"
PUBLIC_API = "acceptance.plugin.api"


@pytest.mark.parametrize("path", sorted(SUITE.glob("*.py")), ids=lambda p: p.name)
def test_the_suite_uses_the_public_api_alone(path: Path) -> None:
    """A test module reads figures and checks them; what it needs of the run comes through one module, and
    besides it only its own family's torch-free rules (``acceptance.families.<family>``)."""
    own_rules = f"acceptance.families.{path.stem.removeprefix('test_')}"
    allowed = (PUBLIC_API, own_rules)
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for target, line in imports(path)
        if target.startswith("acceptance")
        and not any(target == a or target.startswith(f"{a}.") for a in allowed)
        and not (target == "acceptance.families" and own_rules in {t for t, _ in imports(path)})
    ]
    assert not wrong, f"the suite imports past {PUBLIC_API}: {wrong}"


def test_the_suite_holds_no_run_state() -> None:
    """The suite asks the API; it does not walk pytest's session or rewrite another test's failure."""
    text = "\n".join(p.read_text() for p in sorted(SUITE.glob("*.py")))
    assert "session.items" not in text
    assert "run.isolation" not in text and "judging" not in text


def test_the_type_checker_sees_every_first_party_import() -> None:
    """mypy's leniency for missing imports covers named third-party modules alone: a module of the package that
    is gone (a family removed while something still imports it) is an error, not a silent ``Any``."""
    tomllib = pytest.importorskip("tomllib")
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "ignore_missing_imports" not in mypy
    lenient = [name for o in mypy.get("overrides", []) if o.get("ignore_missing_imports") for name in o["module"]]
    assert lenient, "the third-party modules without types are named"
    assert not [name for name in lenient if name.split(".")[0] in ("acceptance", "tests", "tests_cluster")]


# The modules outside families/, probes/ and the registry that name a family in code (import its module, or
# spell its name or a metric of it in a string), each for its reason. A family's behaviour belongs to its
# descriptor (``Family``: its rules, its re-measure, its noise, its floors, its part of init's first profile,
# its report section, ...) and shared code reaches it through the registry, so
# this list only shrinks: a module that starts naming a family fails the test, and so does one listed here
# that no longer does.
NAMING_A_FAMILY: dict[str, str] = {
    # the suite's public API: the fixtures' helpers of the families whose probes need the run (the fabric's
    # two readings, compute's re-measure, the internode spec, the collectives' causes)
    "plugin/api.py": "the suite's helpers, one per family that needs the run",
    # the training and reference workload's jobs launched on the run, and what the selected tests need of them:
    # a family's module sits below the run (the layers) and cannot launch a job itself
    "run/training_jobs.py": "the training and llama8b jobs on the run",
    # "fabric" here is a failure's category (a link across nodes), a word of the one vocabulary of whose fault
    # a failure is, which shares the family's name
    "verdicts.py": "the fabric category of a failure",
    # a family's own command outside pytest: it launches the family's probe (which families/ may not: the
    # launcher is above it), reads the family's result type and prints the family's table
    "cli/bench_train.py": "training's own command: the strategies' benchmark, its jobs and its table",
    "cli/sweep.py": "the collectives' own command: an nccl-tests-style sweep of their probe, its options and rows",
}


def naming_a_family() -> dict[str, set[str]]:
    """Every module outside families/, probes/ and the registry that names a family in code, with how."""
    from acceptance.profile.registry import FAMILIES

    names = {f.name for f in FAMILIES}
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("families/", "probes/")) or rel == "profile/registry.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        how: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("acceptance.families"):
                modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                how |= {f"imports {m}" for m in modules if m.split(".")[2:3] and m.split(".")[2] in names}
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                how |= {f"'{n}'" for n in names if node.value == n or node.value.startswith(f"{n}.")}
        if how:
            found[rel] = how
    return found


def test_only_the_listed_modules_name_a_family() -> None:
    found = naming_a_family()
    new = [f"{rel}: {', '.join(sorted(how))}" for rel, how in found.items() if rel not in NAMING_A_FAMILY]
    assert not new, "modules that name a family; reach it through its descriptor (the registry):\n" + "\n".join(new)
    stale = sorted(set(NAMING_A_FAMILY) - set(found))
    assert not stale, f"listed as naming a family, yet name none (drop them from NAMING_A_FAMILY): {stale}"
