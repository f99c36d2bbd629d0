"""Tiers: a selection derived from the registry, deselected pytest's way after -m and -k, whose whole is a
verdict (never PARTIAL); the drain list a run that does not PASS writes, and the terminal's lines."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from acceptance.evidence.drain import cause_of
from acceptance.evidence.model import Case
from acceptance.probes import fabric as fabric_probe
from acceptance.profile import tiers as tiers_module
from acceptance.profile.registry import FAMILIES
from acceptance.profile.tiers import TIERS, first_tier, tier_named
from acceptance.run import fabric_readings
from acceptance.schema.family import Family
from tests.harness import PLUGIN_ARGS, ROOT, evidence

PROFILE = """
name: synthetic
topology: {nodes: 1, ranks_per_node: 2, device: cpu, backend: gloo}
thresholds:
  connectivity.barrier_latency_us: {max: 100, source: "test"}
  training.ddp.tokens_per_s_per_gpu: {min: 100, source: "test"}
"""
CONNECTIVITY = "def test_latency(check):\n    check('connectivity.barrier_latency_us', {value}, 'us')\n"
TRAINING = "def test_tokens(check):\n    check('training.ddp.tokens_per_s_per_gpu', 50, 'tokens/s')\n"


def test_the_tiers_nest_and_come_from_the_registry() -> None:
    quick, standard, burn_in = ({f.name for f in TIERS[n].families} for n in ("quick", "standard", "burn-in"))
    assert quick == {f.name for f in FAMILIES if f.quick}
    assert standard == {f.name for f in FAMILIES if not f.opt_in}
    assert burn_in == {f.name for f in FAMILIES}
    assert quick < standard < burn_in
    assert quick >= {"connectivity", "health", "drift", "compute"}
    assert not quick & {"storage", "collectives", "internode", "training"}
    assert all(first_tier(f) == "burn-in" for f in FAMILIES if f.opt_in)


def test_each_tier_has_a_budget_on_the_cpu_or_says_why_not() -> None:
    assert TIERS["quick"].budget("cpu") == 15 and TIERS["quick"].budget("cuda") == 30
    assert TIERS["standard"].budget("cuda") == 120
    with pytest.raises(ValueError, match="expected one of quick, standard, burn-in, got 'fast'"):
        tier_named("fast")


# the quick tier's other families, each a module of one test: a run of the tier whole is a verdict
QUICK_REST = {
    f.module: "def test_one(cluster):\n    pass\n" for f in TIERS["quick"].families if f.name != "connectivity"
}
QUICK = 1 + len(QUICK_REST)  # the tests of a quick run of the synthetic suite


@pytest.fixture(autouse=True)
def _recorded_fabric(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic suite's fabric module reads a recorded sysfs tree in this process: the fast tier starts
    no process, and the reading's own subprocess is the e2e tests' (tests/test_fabric.py)."""
    if request.node.get_closest_marker("e2e"):
        return
    tree = ROOT / "tests" / "data" / "fabric" / "before"
    monkeypatch.setattr(fabric_readings, "read", lambda root: fabric_probe.read(tree, pci=tree / "no-pci"))


def _suite(pytester: pytest.Pytester, latency: float = 10) -> None:
    pytester.makepyfile(test_connectivity=CONNECTIVITY.format(value=latency), test_training=TRAINING, **QUICK_REST)
    pytester.makefile(".yaml", synthetic=PROFILE)


def test_quick_deselects_the_other_families_and_its_whole_is_a_verdict(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "--cluster-tier", "quick"
    )
    result.assert_outcomes(passed=QUICK, deselected=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "cluster tier: quick (*); deselected 1 test(s), not in the quick tier (--cluster-tier): training 1",
            "connectivity  PASS          1 figure(s) gated *  bounds: 1 profile",
            "tier quick: * s of its 15 s budget",
            "verdict: PASS; * families judged; evidence: *",
        ]
    )
    # the training bound belongs to another tier: neither an error nor a line of thresholds left unchecked
    assert "training.ddp" not in result.stdout.str()
    data = evidence(pytester.path / "ev")
    assert data["verdict"] == "PASS" and data["partial"] is False
    assert data["tier"]["name"] == "quick" and data["tier"]["deselected"] == {"training": 1}
    assert data["tier"]["budget_s"] == 15 and data["tier"]["wall_s"] >= 0
    assert not (pytester.path / "ev" / "drain.json").exists()  # a PASS drains nothing


def test_standard_runs_both_and_the_profile_s_tier_is_the_default(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    result.assert_outcomes(passed=QUICK, failed=1)  # training's figure
    pytester.makefile(".yaml", synthetic=PROFILE + "tier: quick\n")
    again = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev2")
    again.assert_outcomes(passed=QUICK, deselected=1)
    # the deselection names where the tier came from: the profile, not an option the run never had
    again.stdout.fnmatch_lines(
        ["cluster tier: quick (*); deselected 1 test(s), not in the quick tier (profile key tier):*"]
    )
    # the option wins over the profile's tier
    third = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev3", "--cluster-tier", "standard"
    )
    third.assert_outcomes(passed=QUICK, failed=1)


def test_minus_k_narrows_a_tier_to_a_partial_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_connectivity=CONNECTIVITY.format(value=10) + "def test_other():\n    pass\n")
    pytester.makefile(".yaml", synthetic=PROFILE)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                "--cluster-tier", "quick", "-k", "latency")  # fmt: skip
    result.assert_outcomes(passed=1, deselected=1)
    assert evidence(pytester.path / "ev")["verdict"] == "PARTIAL"


def test_an_unknown_tier_is_a_usage_error_naming_the_option(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-tier", "fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cluster-tier*expected one of quick, standard, burn-in, got 'fast'*"])


def test_a_failing_run_writes_its_drain_list_and_says_what_next(pytester: pytest.Pytester) -> None:
    _suite(pytester, latency=500)
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "--cluster-tier", "quick"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    folder = pytester.path / "ev"
    drain = json.loads((folder / "drain.json").read_text())
    host = evidence(folder)["topology"]["host"]
    assert drain["schema"] == "cluster-acceptance/drain/1" and drain["verdict"] == "FAIL"
    assert drain["tier"] == "quick" and drain["applied"] == []
    [node] = drain["nodes"]
    assert node["node"] == host and node["severity"] == "drain"
    assert node["reason"].startswith("connectivity.barrier_latency_us = 500, bound <= 100")
    result.stdout.fnmatch_lines(
        [
            "connectivity  FAIL *",
            "drain: * (drain): connectivity.barrier_latency_us = 500, bound <= 100*",
            "drain list: ev/drain.json",
            "what next: the probes' logs are under ev/probes; `cluster-acceptance report ev`*",
            "verdict: FAIL; * families judged; evidence: *",
        ]
    )


def test_skip_reasons_are_in_the_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_connectivity=CONNECTIVITY.format(value=10)
        + "import pytest\n\ndef test_a(cluster):\n    pytest.skip('no NIC here')\n"
        + "def test_b(cluster):\n    pytest.skip('no NIC here')\n"
    )
    pytester.makefile(".yaml", synthetic=PROFILE)
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "--cluster-tier", "quick"
    )
    result.stdout.fnmatch_lines(["skipped 2 (connectivity): no NIC here"])


def test_a_burn_in_keeps_every_outcome_on_disk_at_once(pytester: pytest.Pytester) -> None:
    """A checkpoint per test: the file on disk after a test's report holds that test, without waiting for
    the next write (a burn-in stopped by SIGKILL after hours keeps everything it had reported)."""
    pytester.makepyfile(
        test_connectivity=CONNECTIVITY.format(value=10)
        + "import json, pathlib\n\ndef test_zz_seen(cluster):\n"
        + "    data = json.loads((pathlib.Path('ev') / 'evidence.json').read_text())\n"
        + "    done = {t['nodeid'].rpartition('::')[2]: t['outcome'] for t in data['tests']}\n"
        + "    assert done.get('test_latency') == 'passed', done\n"
    )
    pytester.makefile(".yaml", synthetic=PROFILE)
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "--cluster-tier", "burn-in"
    )
    result.assert_outcomes(passed=2)
    assert evidence(Path(pytester.path / "ev"))["tier"]["name"] == "burn-in"


RUN_TIMEOUT_S = 300  # only so that a broken launcher cannot hang CI; nothing here measures speed


@pytest.mark.e2e
def test_the_quick_tier_of_the_real_suite_is_a_verdict(suite: pytest.Pytester) -> None:
    folder = suite.path / "ev"
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", "local-cpu", "--cluster-evidence", str(folder),
        "--cluster-tier", "quick", "tests_cluster/", timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()[-4000:]
    data = evidence(folder)
    assert data["verdict"] == "PASS" and data["partial"] is False
    assert data["tier"]["families"] == [f.name for f in TIERS["quick"].families]
    ran = {t["nodeid"].split("::")[0].rpartition("/")[2] for t in data["tests"]}
    assert ran == {f"{f.module}.py" for f in TIERS["quick"].families}
    assert data["tier"]["wall_s"] > 0 and data["tier"]["budget_s"] == 15


SCONTROL = """#!/bin/sh
printf '%s\\n' "$@" >> "{log}"
"""


@pytest.mark.e2e
def test_cluster_drain_slurm_drains_a_failing_node_with_its_reason(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in scontrol on PATH records its argv: one argument each, the reason whole in one."""
    bin_dir, log = suite.path / "bin", suite.path / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL.format(log=log))
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "preflight")
    monkeypatch.setenv("SLURMD_NODENAME", "c7")
    folder = suite.path / "ev"
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", "local-cpu", "--cluster-evidence", str(folder),
        "--cluster-tier", "quick", "--cluster-drain", "slurm", "tests_cluster/", timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    reason = "reason=cluster-acceptance: preflight: injected preflight failure (ACCEPTANCE_TEST_FAULT=preflight)"
    assert log.read_text().splitlines() == ["update", "nodename=c7", "state=drain", reason]
    result.stdout.fnmatch_lines(["drain applied: scontrol update nodename=c7 state=drain reason=*: ok"])
    drain = json.loads((folder / "drain.json").read_text())
    assert drain["nodes"][0]["scheduler_name"] == "c7" and len(drain["applied"]) == 1


def _stand_in_scontrol(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, log = suite.path / "bin", suite.path / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL.format(log=log))
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURMD_NODENAME", "c7")
    return log


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "category"),
    [
        # a GPU profile on this machine's CPU-only torch: the install's fault ("CPU-only build" at the preflight)
        (["--cluster-profile", "h100-x1"], "software"),
        # a time limit the operator gave that no probe can meet
        (["--cluster-profile", "local-cpu", "--cluster-timeout", "1", "-m", "connectivity"], "environment"),
        # the same limit given as a profile key: the operator's all the same
        (
            ["--cluster-profile", "local-cpu", "--cluster-set", "timeouts.default=1", "-m", "connectivity"],
            "environment",
        ),
    ],
    ids=["cpu-only-torch", "timeout-1", "timeouts-default-1"],
)
def test_the_suite_s_own_environment_drains_no_node(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], category: str
) -> None:
    log = _stand_in_scontrol(suite, monkeypatch)
    folder = suite.path / "ev"
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", *args, "--cluster-evidence", str(folder),
        "--cluster-tier", "quick", "--cluster-drain", "slurm", "tests_cluster/", timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not log.exists(), log.read_text()  # scontrol never ran
    drain = json.loads((folder / "drain.json").read_text())
    assert drain["applied"] == [] and drain["nodes"]
    assert {(n["severity"], n["node_fault"]) for n in drain["nodes"]} == {("review", False)}
    assert {r["category"] for n in drain["nodes"] for r in n["reasons"]} >= {category}
    [node] = drain["nodes"]
    result.stdout.fnmatch_lines([f"drain: c7 (review: {node['action']}): *"])
    # one story: the evidence's failed cases, and so the report and JUnit, say the drain list's action
    failed = [t for t in evidence(folder)["tests"] if t["outcome"] in ("failed", "error")]
    assert failed and {cause_of(Case.model_validate(t))[1] for t in failed} == {node["action"]}
    if category == "software":  # the cause first, with what to do; nothing to sweep
        result.stdout.fnmatch_lines(["cause (fix the install): *CPU-only build (no CUDA in it): install *"])
        result.stdout.fnmatch_lines(["what next: fix the install (the cause above), then run again"])


def test_a_bad_drain_way_is_a_usage_error_before_anything_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester)
    monkeypatch.setenv("CLUSTER_DRAIN", "sideways")
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable CLUSTER_DRAIN: expected one of off, slurm, kubernetes*"])
    assert not (pytester.path / "ev" / "evidence.json").exists()


def _running_page(monkeypatch: pytest.MonkeyPatch | None = None, family: Family[Any] | None = None) -> str:
    """docs/running.md as the site shows it: the hooks of mkdocs.yml applied, as ``mkdocs build`` applies
    them; ``family``: one more in the registry's list."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files
    from mkdocs.structure.pages import Page

    if monkeypatch is not None and family is not None:
        monkeypatch.setattr(tiers_module, "FAMILIES", (*FAMILIES, family))
    config = load_config(str(ROOT / "mkdocs.yml"))
    files = config.plugins.on_files(get_files(config), config=config)
    source = files.get_file_from_path("running.md")
    assert source is not None
    page = Page(None, source, config)
    text = config.plugins.on_page_markdown(source.content_string, page=page, config=config, files=files)
    assert isinstance(text, str)
    return text


def _tier_rows(text: str) -> dict[str, str]:
    return {line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")}


def test_the_docs_tiers_table_names_each_tier_s_families_and_budgets() -> None:
    """The table is generated from the registry where running.md marks it: no tier's families are written by
    hand, and each budget's words give the figures the tier holds a run to."""
    assert "| `quick`" not in (ROOT / "docs" / "running.md").read_text()  # the docs hold the mark, not the rows
    rows = _tier_rows(_running_page())
    quick = rows["quick"]
    assert all(f.name in quick for f in TIERS["quick"].families)
    assert not any(f.name in quick for f in FAMILIES if not f.quick and not f.opt_in)
    assert "15 s on local-cpu" in quick and "30 s warm" in quick
    assert "120 s on 2x H200 cold" in rows["standard"]
    assert all(f.name in rows["burn-in"] for f in FAMILIES if f.opt_in)
    for tier in TIERS.values():
        assert all(f"{budget:g} s" in rows[tier.name] for budget in tier.budget_s.values() if budget is not None)


def test_a_family_added_to_the_registry_is_in_the_docs_tiers_table(monkeypatch: pytest.MonkeyPatch) -> None:
    quick = dataclasses.replace(FAMILIES[0], name="newcomer", quick=True)
    rows = _tier_rows(_running_page(monkeypatch, quick))
    assert "newcomer" in rows["quick"] and "newcomer" not in rows["standard"]
    rows = _tier_rows(_running_page(monkeypatch, dataclasses.replace(quick, quick=False, opt_in=True)))
    assert "newcomer (opt-in)" in rows["burn-in"] and "newcomer" not in rows["quick"]


TIERED = (
    PROFILE
    + """tiers:
  quick: {connectivity.barrier_iters: 7}
  burn-in: {connectivity.barrier_iters: 900}
"""
)
ITERS = CONNECTIVITY.format(value=10) + (
    "def test_iters(cluster):\n    assert cluster.profile.model.connectivity.barrier_iters == {want}\n"
)


@pytest.mark.parametrize(("tier", "want"), [("quick", 7), ("standard", 20), ("burn-in", 900)])
def test_a_tier_runs_with_the_profile_s_settings_for_it(pytester: pytest.Pytester, tier: str, want: int) -> None:
    """The profile's ``tiers.NAME`` settings apply to that tier only (standard has none here: the default 20),
    are in the evidence, and are named on the tier's line."""
    pytester.makepyfile(test_connectivity=ITERS.format(want=want))
    pytester.makefile(".yaml", synthetic=TIERED)
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "--cluster-tier", tier
    )
    result.assert_outcomes(passed=2)
    recorded = evidence(pytester.path / "ev")["tier"]["settings"]
    assert recorded == ({} if tier == "standard" else {"connectivity.barrier_iters": want})
    if tier != "standard":
        result.stdout.fnmatch_lines([f"cluster tier: {tier} (*); its settings (profile tiers.{tier}): *={want}*"])


def test_cluster_set_has_the_last_word_over_a_tier_s_settings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_connectivity=ITERS.format(want=11))
    pytester.makefile(".yaml", synthetic=TIERED)
    result = pytester.runpytest(
        *PLUGIN_ARGS,
        *("--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "--cluster-tier", "quick"),
        *("--cluster-set", "connectivity.barrier_iters=11"),
    )
    result.assert_outcomes(passed=2)


def test_a_bad_tier_setting_is_a_usage_error_naming_its_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_connectivity=ITERS.format(want=7))
    pytester.makefile(".yaml", synthetic=PROFILE + "tiers:\n  quick: {connectivity.barrier_itres: 7}\n")
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "--cluster-tier", "quick"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*synthetic.yaml:7 (tiers.quick): connectivity.barrier_itres: unknown key*"])
    pytester.makefile(".yaml", synthetic=PROFILE + "tiers:\n  quick: {tier: standard}\n")
    again = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-tier", "quick")
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines(["*synthetic.yaml:7 (tiers.quick): 'tier': expected a KEY.PATH of a section*"])


def test_an_opt_in_family_asked_for_by_name_joins_the_tier_and_its_bounds_are_enforced(
    pytester: pytest.Pytester,
) -> None:
    """``-m soak`` under the standard tier: the line says standard + soak, no tier budget applies (the soak's
    duration is the profile's), and a soak bound no test checked is a gate left off, as in burn-in."""
    pytester.makepyfile(
        test_connectivity=CONNECTIVITY.format(value=10),
        test_soak="def test_soak(check):\n    check('soak.gemm_wrong_elements', 0, 'elements')\n",
    )
    profile = PROFILE + '  soak.gemm_wrong_elements: {eq: 0, source: "test"}\n'
    profile += '  soak.memory_bad_words: {eq: 0, source: "test"}\n'
    pytester.makefile(".yaml", synthetic=profile)
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev", "-m", "soak"
    )
    result.stdout.fnmatch_lines(["cluster tier: standard (*) + soak (asked for by name: no tier budget)*"])
    result.stdout.fnmatch_lines(["tier standard + soak: * s"])
    assert "budget" not in result.stdout.str().split("tier standard + soak:")[1].splitlines()[0]
    data = evidence(pytester.path / "ev")
    assert data["tier"]["added"] == ["soak"] and data["tier"]["budget_s"] is None
    assert "soak.memory_bad_words" in data["unchecked_thresholds"]
    assert any("no test checked: soak.memory_bad_words" in e for e in data["errors"])
