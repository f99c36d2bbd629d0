"""The family registry: one descriptor per family, and everything about a family derived from it."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from acceptance.cli import families
from acceptance.cli.main import main
from acceptance.families.storage import StoragePath, StoragePathConfig
from acceptance.families.training import DeepSpeedRun
from acceptance.families.training.figures import DeepSpeedRunConfig
from acceptance.probes import rank
from acceptance.profile import loader as profiles
from acceptance.profile.loader import load
from acceptance.profile.metrics import SHAPES, better, kind, metric_problem, scale, shape_of
from acceptance.profile.model import ProfileModel, Timeouts
from acceptance.profile.references import table
from acceptance.profile.registry import FAMILIES, WORKER_PROBES, family_of_module
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.placement import Placement
from acceptance.schema.family import Family
from tests.harness import PLUGIN_ARGS, ROOT

IDS = [f.name for f in FAMILIES]


@pytest.mark.parametrize("f", FAMILIES, ids=IDS)
def test_each_family_has_one_name_on_every_side(f: Family[Any]) -> None:
    assert (ROOT / "tests_cluster" / f"{f.module}.py").is_file()
    for probe in f.probes:
        assert (ROOT / "acceptance" / "probes" / f"{probe}.py").is_file()
    assert set(f.in_worker) <= set(f.probes)
    assert ProfileModel.model_fields[f.name].annotation is f.section  # its profile section
    assert isinstance(f.section_of(ProfileModel(name="p")), f.section)
    assert f.name in Timeouts.model_fields  # timeouts.<family>
    assert family_of_module(f.module) is f
    assert all(s.family is f for s in SHAPES if s.pattern.pattern.startswith(rf"^{f.name}\."))


def test_the_worker_set_is_the_registry_s() -> None:
    assert {"training"} & WORKER_PROBES == set()
    assert {"isolation", "collectives", "connectivity"} <= WORKER_PROBES


def test_a_figure_s_shape_says_its_side_kind_and_scale() -> None:
    assert better("collectives.all_reduce.busbw_gbps@1G") == "higher"
    assert better("collectives.all_reduce.busbw_gbps@1024M") == "higher"  # a size spelled otherwise
    assert kind("collectives.all_reduce.wrong@1G") == "correctness"
    assert kind("training.ddp.loss_ratio") == "correctness"
    assert kind("compute.matmul_tflops_min") == "performance"
    assert scale("compute.h2d_gbps_below_median") == "points"
    assert scale("training.zero3.wall_s") == "bound"
    assert shape_of("collectives.all_reduce.nonsense@1G") is None and better("nope.x") == "none"


def test_a_threshold_outside_a_family_s_lists_is_a_typo() -> None:
    profile = ProfileModel(name="p")
    assert metric_problem("collectives.all_reduce.busbw_gbps@1G", profile) is None
    assert metric_problem("collectives.all_reduce.busbw_gbps@2G", profile) == (
        "size '2G' is not in this profile's list ['1M', '16M', '256M', '1G']"
    )
    assert "known shapes" in (metric_problem("colectives.x", profile) or "")


def test_families_lists_every_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["families", "--wide"]) == 0
    out = capsys.readouterr().out
    for f in FAMILIES:
        assert f"-m {f.marker}" in out and f"{f.module}.py" in out and f.doc in out
    assert main(["families", "--metrics"]) == 0
    listed = capsys.readouterr().out
    assert "collectives.<op>.busbw_gbps@<size>" in listed
    assert "compute.matmul_tflops_min" in listed and "health.ecc_uncorrectable_volatile" in listed


def test_the_suite_runs_in_the_registry_s_order(pytester: pytest.Pytester) -> None:
    """With a profile the families run in the registry's order, whatever the file names; without one the
    plugin is inert and another project's tests keep pytest's own order."""
    for f in reversed(FAMILIES):
        pytester.makepyfile(**{f.module: "def test_one(cluster):\n    pass\n"})

    def order(*args: str) -> list[str]:
        result = pytester.runpytest(*PLUGIN_ARGS, "--collect-only", "-q", *args)
        return [line.split("::")[0].removesuffix(".py") for line in result.outlines if "::" in line]

    # an opt-in family (the soak) runs only when the run names it
    assert order("--cluster-profile", "local-cpu") == [f.module for f in FAMILIES if not f.opt_in]
    assert order("--cluster-profile", "local-cpu", "-m", "soak") == ["test_soak"]
    assert order() == sorted(f.module for f in FAMILIES)


def test_the_site_s_reference_page_is_generated_from_the_registry() -> None:
    """The families-and-metrics page is no file in docs/: the site's hook (``docs/hooks.py``) adds it when the
    site is built, as ``cluster-acceptance families --markdown`` prints it, where mkdocs.yml's nav names it."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files

    config = load_config(str(ROOT / "mkdocs.yml"))  # with its hooks, as mkdocs build loads them
    assert not (ROOT / "docs" / "reference.md").exists()
    files = config.plugins.on_files(get_files(config), config=config)
    page = files.get_file_from_path("reference.md")
    assert page is not None and page.generated_by == "docs/hooks.py"
    assert page.content_string == families.markdown()
    assert {"Families and metrics": "reference.md"} in config["nav"]
    hook = files.get_file_from_path("hooks.py")  # the hook's own source is no page of the site
    assert hook is not None and not hook.inclusion.is_included()


def _config_pairs() -> list[tuple[type[Any], Any]]:
    """Each section model with the TypedDict its probe reads it as (``<Section>Config``, in the family's own
    module or package), and the nested models with theirs."""
    pairs: list[tuple[type[Any], Any]] = []
    for f in FAMILIES:
        module = importlib.import_module(f.section.__module__)
        found = [getattr(m, f"{f.section.__name__}Config", None) for m in (module, *_submodules(module))]
        pairs += [(f.section, config) for config in found if config is not None]
    pairs.append((StoragePath, StoragePathConfig))
    pairs.append((DeepSpeedRun, DeepSpeedRunConfig))
    return pairs


def _submodules(module: ModuleType) -> list[ModuleType]:
    if not hasattr(module, "__path__"):
        return []
    return [importlib.import_module(f"{module.__name__}.{m.name}") for m in pkgutil.iter_modules(module.__path__)]


# a probe reading a section of its spec as its config type (``rank.section``)
_READS = re.compile(r'\bsection\((?:ctx\.)?spec, "(\w+)", (\w+)\)')


def _reads_own_section(f: Family[Any]) -> set[str]:
    """The config types the family's probes read the family's own section as (``section(ctx.spec, "<name>",
    <Type>)``); empty for a family whose probes read none (fabric is read in the node's own pytest, drift's
    probe reads no setting, internode's reads the collectives' section)."""
    sources = [(ROOT / "acceptance" / "probes" / f"{probe}.py").read_text() for probe in f.probes]
    return {shape for text in sources for name, shape in _READS.findall(text) if name == f.name}


def test_every_family_s_probe_config_is_found() -> None:
    """Every family whose probe reads its section has its ``<Section>Config`` beside the section, and its
    probe reads the section as that type: the pairs below cover all of them."""
    paired = {section.__name__: config.__name__ for section, config in _config_pairs()}
    read = {f.section.__name__: _reads_own_section(f) for f in FAMILIES if _reads_own_section(f)}
    assert read, "no probe reads its family's section"
    assert read == {section: {paired.get(section)} for section in read}
    for path in (ROOT / "acceptance" / "probes").glob("*.py"):  # the pattern sees every read
        text = path.read_text()
        calls = len(re.findall(r"\bsection\(", text)) - text.count("def section(")
        assert len(_READS.findall(text)) == calls, path.name


@pytest.mark.parametrize("pair", _config_pairs(), ids=lambda p: p[0].__name__)
def test_a_section_and_its_probe_config_are_one_definition(pair: tuple[type[Any], Any]) -> None:
    """The section model and the TypedDict its probe reads have the same keys (a key the probe takes besides,
    such as a re-measure's ``figures``, is NotRequired, and so is a key an isolation round leaves out); the
    section's defaults, as the spec carries them,
    fill every key the probe reads."""
    section, config = pair
    # the TypedDicts' annotations are strings (PEP 563), which typing's TypedDict reads no NotRequired from
    optional = {key for key, hint in config.__annotations__.items() if "NotRequired[" in str(hint)}
    fields = set(section.model_fields)
    assert set(config.__annotations__) - (optional - fields) == fields, section.__name__
    default = section.model_validate(_example(section)).model_dump(mode="json")
    assert set(default) >= set(config.__annotations__) - optional


def _example(section: type[Any]) -> dict[str, Any]:
    """A section with its required fields filled (a DeepSpeed run needs a base and a config)."""
    return {"base": "zero1", "config": {}} if section is DeepSpeedRun else {}


def test_the_spec_carries_each_family_s_section_under_its_name(tmp_path: Path) -> None:
    """The spec the plugin writes for a family's probe (``ClusterRun.spec``) carries the family's section under
    the family's name, and ``rank.section`` reads it as the probe's config with every key the config needs:
    ``ProbeSpec`` names no family, so a family added to the list needs no key there."""
    run = ClusterRun(load("local-cpu"), Placement(1, 0, "127.0.0.1", 29400, "default"), tmp_path / "ev", worker=False)
    try:
        configs = {section: config for section, config in _config_pairs()}
        for f in FAMILIES:
            if not _reads_own_section(f):
                continue
            config = configs[f.section]
            optional = {key for key, hint in config.__annotations__.items() if "NotRequired[" in str(hint)}
            found = rank.section(cast(rank.ProbeSpec, run.spec(f.name)), f.name, config)
            assert set(found) >= set(config.__annotations__) - optional, f.name
    finally:
        run.close()


# the drain list's hand-kept prefixes before the registry said which figures are a node's own (0cf54b1)
OLD_LOCAL_PREFIXES = ("health.", "compute.", "soak.", "fabric.", "connectivity.p2p_")
# a node's own figures added since (none: the rank that arrives late at the collectives may be held back by a
# task beside the run, so it is named for review, not as the node's own)
LOCAL_SINCE: tuple[str, ...] = ()


def test_a_node_s_own_figures_are_the_registry_s() -> None:
    """``Metric.local`` (else ``Family.local``) says which figures blame the nodes they name: every metric
    the reference page lists, and every figure of the recorded runs, as the drain list's prefixes did."""
    from acceptance.profile.metrics import local
    from tests.test_judge import FIGURES, RUNS

    names = {c["metric"] for run in RUNS for c in json.loads((FIGURES / f"{run}.json").read_text())["checks"]}
    names |= {f"{f.name}.{n}" for f in FAMILIES for m in f.metrics for n in m.each_name}
    assert len(names) > 150
    own = [n for n in names if n.startswith(OLD_LOCAL_PREFIXES) or n in LOCAL_SINCE]
    assert sorted(n for n in names if local(n) != (n in own)) == []
    assert [f.name for f in FAMILIES if f.local] == ["health", "compute", "soak", "fabric"]


@pytest.mark.parametrize("command", [["families"], ["families", "--metrics"], ["references"], ["list"]])
def test_the_tables_fit_a_120_column_terminal_and_wide_prints_them_whole(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A long cell (a family's checks, a reference's source) wraps, so no line is wider than 120 columns;
    ``--wide`` prints the whole table, each row on one line, whatever its width, and holds every word of the
    fitted one (which may leave out a column that repeats another, as the families' section and prefix)."""
    assert main(command) == 0
    fitted = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in fitted) <= 120
    assert main([*command, "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    rows = {"families": len(FAMILIES), "references": len(table().references), "list": len(profiles.available())}
    if command != ["families", "--metrics"]:
        assert len(wide) == rows[command[0]] + (0 if command == ["list"] else 2)  # a header and its rule
    # every row of the wide table is in the fitted text: its name, and its last cell's words (the checks, the
    # source, the path), wrapped
    header = 0 if command == ["list"] else 2
    fitted_words = " ".join(fitted).split()
    for line in wide[header:]:
        cells = re.split(r"\s{2,}", line.strip())
        assert cells[0] in fitted_words, cells[0]
        assert " ".join(cells[-1].split()) in " ".join(fitted_words), cells[-1]
