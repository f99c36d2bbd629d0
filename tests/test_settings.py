"""The run's settings: one precedence for each (command line > environment > ini > profile > default), each
value with where it came from, a bad one a usage error naming its source, and the origins on the header."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.plugin import options
from acceptance.plugin.settings import DEFAULT, Origin, PytestModes, RunSettings, Setting, Sources
from tests.harness import PLUGIN_ARGS, evidence

PROFILE = """
name: synthetic
topology: {nodes: 1, ranks_per_node: 2, device: cpu, backend: gloo}
thresholds:
  connectivity.barrier_latency_us: {max: 100, source: "test"}
"""
CONNECTIVITY = "def test_latency(check):\n    check('connectivity.barrier_latency_us', 10, 'us')\n"


def _sources(
    cli: dict[str, object] | None = None, env: dict[str, str] | None = None, ini: dict[str, object] | None = None
) -> Sources:
    return Sources(cli or {}, env or {}, ini or {})


@pytest.mark.parametrize(
    ("cli", "env", "ini", "want"),
    [
        ("slurm", "kubernetes", "off", Setting("slurm", Origin("option", "--cluster-drain"))),
        (None, "kubernetes", "off", Setting("kubernetes", Origin("environment", "CLUSTER_DRAIN"))),
        (None, "", "slurm", Setting("slurm", Origin("ini", "cluster_drain"))),  # an empty variable is unset
        (None, None, "", None),
    ],
)
def test_a_setting_comes_from_the_first_source_that_gives_it(
    cli: str | None, env: str | None, ini: str, want: Setting[str] | None
) -> None:
    sources = _sources({"cluster_drain": cli}, {} if env is None else {"CLUSTER_DRAIN": env}, {"cluster_drain": ini})
    assert sources.given(options.DRAIN) == want
    fallback = Setting("off", DEFAULT)
    assert sources.setting(options.DRAIN, fallback) == (want or fallback)


def test_an_environment_and_an_ini_value_are_converted_as_the_option_is() -> None:
    found = _sources(env={"CLUSTER_WORKER": " OFF "}, ini={"cluster_timeout": "90"})
    assert found.given(options.WORKER) == Setting(False, Origin("environment", "CLUSTER_WORKER"))
    assert found.optional(options.TIMEOUT) == Setting(90.0, Origin("ini", "cluster_timeout"))
    assert found.optional(options.NODES) == Setting(None, DEFAULT)


@pytest.mark.parametrize(
    ("option", "env", "ini", "message"),
    [
        (options.DRAIN, {"CLUSTER_DRAIN": "sideways"}, {}, "environment variable CLUSTER_DRAIN: expected one of off, "),
        (options.DRAIN, {}, {"cluster_drain": "sideways"}, "ini key cluster_drain: expected one of off, slurm, "),
        (options.NODES, {}, {"cluster_nodes": "0"}, "ini key cluster_nodes: expected a whole number >= 1, got '0'"),
        (options.EVIDENCE, {}, {"cluster_evidence": " "}, "ini key cluster_evidence: expected a folder path, got an"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_where_it_was_given(
    option: options.Option[object], env: dict[str, str], ini: dict[str, object], message: str
) -> None:
    with pytest.raises(pytest.UsageError, match=message):
        _sources(env=env, ini=ini).given(option)


def test_a_repeated_option_takes_the_command_line_s_values_else_the_ini_s_lines() -> None:
    both = _sources({"cluster_set": ["a=1", "b=2"]}, ini={"cluster_set": ["c=3"]})
    assert both.listed(options.SET) == Setting(("a=1", "b=2"), Origin("option", "--cluster-set"))
    ini = _sources({"cluster_set": []}, ini={"cluster_set": ["c=3"]})
    assert ini.listed(options.SET) == Setting(("c=3",), Origin("ini", "cluster_set"))
    assert _sources().listed(options.SET) == Setting((), DEFAULT)


def _profile(folder: Path, extra: str = "") -> str:
    path = folder / "synthetic.yaml"
    path.write_text(PROFILE + extra)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "cli", "env", "want", "origin"),
    [
        ("", {}, {}, "standard", "default"),
        ("tier: quick\n", {}, {}, "quick", "profile key tier"),
        ("tier: quick\n", {"cluster_set": ["tier=burn-in"]}, {}, "burn-in", "--cluster-set tier"),
        ("tier: quick\n", {}, {"CLUSTER_TIER": "burn-in"}, "burn-in", "environment variable CLUSTER_TIER"),
        ("tier: quick\n", {"cluster_tier": "standard"}, {"CLUSTER_TIER": "burn-in"}, "standard", "--cluster-tier"),
    ],
)
def test_the_tier_falls_through_to_the_profile_and_then_the_default(
    tmp_path: Path, extra: str, cli: dict[str, object], env: dict[str, str], want: str, origin: str
) -> None:
    settings = RunSettings.resolve(_sources({"cluster_profile": _profile(tmp_path, extra), **cli}, env))
    assert (settings.tier.value.name, str(settings.tier.origin)) == (want, origin)


def test_the_ini_file_comes_before_the_profile(tmp_path: Path) -> None:
    given = _sources({"cluster_profile": _profile(tmp_path, "tier: burn-in\n")}, ini={"cluster_tier": "quick"})
    settings = RunSettings.resolve(given)
    assert settings.tier == Setting(settings.tier.value, Origin("ini", "cluster_tier"))
    assert settings.tier.value.name == "quick"


def test_what_no_source_gave_says_so(tmp_path: Path) -> None:
    settings = RunSettings.resolve(_sources({"cluster_profile": _profile(tmp_path)}, {"CLUSTER_RUN_ID": "job-7"}))
    assert settings.profile_name.origin == Origin("option", "--cluster-profile")
    assert settings.drain == Setting("off", DEFAULT) and settings.worker == Setting(True, DEFAULT)
    assert settings.timeout == Setting(None, Origin("profile", "timeouts"))
    assert settings.evidence == settings.baseline == Setting(None, DEFAULT)
    assert settings.run_tag == Setting("job-7", Origin("environment", "CLUSTER_RUN_ID"))
    assert settings.line() == "cluster settings: tier standard (default), drain off (default), worker on (default)"


def test_a_placement_field_names_where_it_was_given(tmp_path: Path) -> None:
    name = _profile(tmp_path)
    by_option = RunSettings.resolve(_sources({"cluster_profile": name, "cluster_nodes": 1}))
    assert by_option.placement_origin == "command line"
    by_ini = RunSettings.resolve(_sources({"cluster_profile": name}, ini={"cluster_nodes": "1", "cluster_head": "h"}))
    assert by_ini.placement_origin == "ini key cluster_nodes, ini key cluster_head"


def test_xdist_is_refused_before_the_profile_is_read() -> None:
    with pytest.raises(pytest.UsageError, match="without -n"):
        RunSettings.resolve(_sources({"cluster_profile": "no-such-profile"}), PytestModes(xdist=True))
    with pytest.raises(pytest.UsageError, match="unknown profile 'no-such-profile'"):
        RunSettings.resolve(_sources({"cluster_profile": "no-such-profile"}))


def test_the_header_and_the_evidence_name_where_the_settings_came_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_connectivity=CONNECTIVITY)
    pytester.makefile(".yaml", synthetic=PROFILE + "tier: burn-in\n")
    pytester.makeini("[pytest]\ncluster_tier = quick\ncluster_nodes = 1\ncluster_evidence = from-ini\n")
    monkeypatch.setenv("CLUSTER_PROFILE", "synthetic.yaml")
    monkeypatch.setenv("CLUSTER_WORKER", "off")
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-timeout", "30", "--cluster-set", "env.HF_TOKEN=hf_secret")
    result.stdout.fnmatch_lines(
        [
            "cluster topology: * (from ini key cluster_nodes)",
            "cluster evidence: from-ini",
            "cluster settings: tier quick (ini key cluster_tier), drain off (default), "
            "worker off (environment variable CLUSTER_WORKER), timeout 30 s (--cluster-timeout), "
            "set env.HF_TOKEN (--cluster-set)",
        ]
    )
    assert "hf_secret" not in result.stdout.str()
    data = evidence(pytester.path / "from-ini")
    assert data["tier"]["name"] == "quick" and data["topology"]["source"] == "ini key cluster_nodes"
