"""The console script: profiles, evidence files, reports and the standalone sweep (a real torchrun job)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import cast

import jsonschema
import pytest
import yaml

from acceptance.cli.main import main
from acceptance.cli.sweep import row_text, timing_line
from acceptance.families.collectives import CollectiveRow
from acceptance.profile import loader as profiles
from tests.harness import ROOT, schema


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One CPU sweep for the whole module: its evidence folder and what it printed."""
    folder = tmp_path_factory.mktemp("sweep")
    argv = ["sweep", "-b", "64K", "-e", "256K", "--nproc-per-node", "2", "--ops", "all_reduce,all_gather",
            "-w", "1", "-n", "3", "--evidence", str(folder)]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "acceptance.cli.main", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return folder, out.stdout


@pytest.mark.e2e
def test_sweep_prints_an_nccl_tests_table(swept: tuple[Path, str]) -> None:
    _, text = swept
    lines = text.splitlines()
    assert re.match(r"#\s+size\s+count\s+type\s+op\s+time\s+algbw\s+busbw\s+#wrong\s+spread$", lines[2]), lines[2]
    rows = [line.split() for line in lines if line and not line.startswith("#")]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (str(size), str(size // 4), "float", op)
        for op in ("all_reduce", "all_gather")
        for size in (65536, 131072, 262144)
    ]
    for row in rows:
        time_us, algbw, busbw, wrong = float(row[4]), float(row[5]), float(row[6]), int(row[7])
        assert time_us > 0 and wrong == 0 and float(row[8]) >= 0  # the timed windows' spread, in %
        # two ranks: all_reduce moves 2(n-1)/n = 1x algbw, all_gather (n-1)/n = 0.5x (rounded to 2 places)
        assert busbw == pytest.approx(algbw * (1.0 if row[3] == "all_reduce" else 0.5), abs=0.011)
    assert "# Out of bounds values : 0 OK" in lines
    # the timing the rows were measured with (auto on the CPU: the host clock), before the first row
    assert "timing auto" not in text and lines[4] == "# timing: eager (asked: auto)"


def test_a_sweep_prints_each_call_once_where_small_sizes_round_up_to_the_same_parts() -> None:
    """``-b 8`` on two ranks in float: all_gather's parts are at least 16 B per rank, so 8, 16 and 32 B asked
    all move 32 B; the first is printed, the others said in a comment (all_reduce moves what was asked)."""
    moved: set[tuple[str, int]] = set()

    def row(op: str, asked: int, moved_bytes: int) -> CollectiveRow:
        figures = {"time_us": 10.0, "time_us_max": 10.0, "latency_us": 10.0, "algbw_gbps": 0.0, "busbw_gbps": 0.0}
        return cast(CollectiveRow, {"op": op, "size": str(asked), "size_bytes": asked, "bytes": moved_bytes,
                                    "count": moved_bytes // 4, "wrong": 0, "timing": "eager", "slowest_rank": 0,
                                    "busbw_windows_gbps": [], "window_spread": 0.0, **figures})  # fmt: skip

    lines = [row_text(row("all_gather", a, 32), "float32", moved) for a in (8, 16, 32)]
    lines += [
        row_text(row("all_reduce", 8, 8), "float32", moved),
        row_text(row("all_gather", 64, 64), "float32", moved),
    ]
    assert [line.split()[0] for line in lines] == ["32", "#", "#", "8", "64"]
    assert lines[1] == "# all_gather at 16 B asked: the same 32 B call as above (parts of at least 16 B per rank)"


@pytest.mark.e2e
def test_sweep_writes_valid_evidence(swept: tuple[Path, str]) -> None:
    folder, _ = swept
    data = json.loads((folder / "evidence.json").read_text())
    jsonschema.validate(data, schema())
    assert data["complete"] is True and data["verdict"] == "PASS"
    assert data["profile"]["resolved"]["collectives"]["sizes"] == ["64K", "128K", "256K"]
    (probe,) = data["probes"]
    assert probe["status"] == "ok" and (folder / probe["out_dir"] / "result.json").is_file()


@pytest.mark.e2e
def test_junit_from_evidence(swept: tuple[Path, str], tmp_path: Path) -> None:
    folder, _ = swept
    assert main(["junit", str(folder / "evidence.json"), "-o", str(tmp_path / "j.xml")]) == 0
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "1" and suite.get("failures") == "0"
    assert "collectives.all_reduce.busbw_gbps@64K" in (suite.findtext("testcase/system-out") or "")


@pytest.mark.e2e
def test_merge_and_compare(swept: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ev = str(swept[0] / "evidence.json")
    merged, junit = tmp_path / "merged.json", tmp_path / "merged.xml"
    assert main(["merge", ev, ev, "-o", str(merged), "--junit", str(junit)]) == 0
    data = json.loads(merged.read_text())
    jsonschema.validate(data, schema())
    assert len(data["merged_from"]) == 2 and len(data["tests"]) == 2
    assert ET.parse(junit).getroot().find("testsuite") is not None
    capsys.readouterr()
    assert main(["compare", ev, ev]) == 0  # a run against itself: nothing changed, nothing regressed
    out = capsys.readouterr().out
    assert "regressions (figures, gated or not, worse beyond tolerance and noise, or turned FAIL by" in out
    assert "same bound): 0" in out
    assert "differences: none in profile, software, env" in out
    busbw = [line.split() for line in out.splitlines() if line.startswith("collectives.all_reduce.busbw_gbps@64K ")]
    assert busbw and busbw[0][1] == "higher" and busbw[0][2] == busbw[0][3] and busbw[0][4] == "GB/s"


@pytest.mark.e2e
def test_report(swept: tuple[Path, str], tmp_path: Path) -> None:
    out = tmp_path / "r" / "report.html"
    assert main(["report", str(swept[0] / "evidence.json"), "-o", str(out)]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert text.startswith("# Cluster acceptance: PASS\n")
    assert "## Collectives" in text and re.search(r"^\| 65,536 +\| +16,384 \| float32 +\| all_reduce +\|", text, re.M)
    page = out.read_text()
    assert "<h1>Cluster acceptance: PASS</h1>" in page and '<h2 id="collectives">Collectives</h2>' in page
    has_plot = (tmp_path / "r" / "report-busbw.png").is_file()
    assert has_plot == ("![busbw against message size" in text) == ("data:image/png;base64," in page)


def test_report_puts_failures_first(tmp_path: Path) -> None:
    doc = json.loads((ROOT / "tests" / "data" / "evidence-fail.json").read_text())
    jsonschema.validate(doc, schema())
    (tmp_path / "evidence.json").write_text(json.dumps(doc))
    assert main(["report", str(tmp_path / "evidence.json")]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# Cluster acceptance: FAIL\n")
    rows = [line for line in text.splitlines() if line.startswith("| FAIL") or line.startswith("| PASS")]
    assert re.match(r"\| FAIL +\| collectives\.all_reduce\.busbw_gbps@1G +\| +312\.4 \| GB/s +\| >= 350 ", rows[0])
    assert "## Tests that did not pass" in text and "## Probes that did not finish" in text


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--wide"]) == 0  # one line a profile
    out = capsys.readouterr().out
    assert re.search(r"^local-cpu\s+two CPU ranks over gloo on this machine; the suite's self-test\s+\[", out, re.M)
    assert len(out.splitlines()) == len(profiles.available())


def test_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "local-cpu", "--set", "collectives.iters=3"]) == 0
    out = capsys.readouterr().out
    expected = profiles.load("local-cpu", ["collectives.iters=3"])
    assert f"# sha256 {expected.sha256}" in out
    assert yaml.safe_load(out) == expected.resolved


def test_show_applies_the_tier_s_settings_the_profile_gives(capsys: pytest.CaptureFixture[str]) -> None:
    """h100-x1's standard tier (its default) writes a smaller checkpoint than its burn-in."""
    assert main(["show", "h100-x1", "--get", "storage.checkpoint_size"]) == 0
    standard = capsys.readouterr().out.strip()
    assert main(["show", "h100-x1", "--tier", "burn-in", "--get", "storage.checkpoint_size"]) == 0
    burn_in = capsys.readouterr().out.strip()
    assert (standard, burn_in) == ("4G", "13021M")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "no-such-profile"], "cluster-acceptance show: unknown profile 'no-such-profile'"),
        (["junit", "missing.json"], "cluster-acceptance junit: missing.json: cannot read evidence"),
        (["sweep", "-b", "1M", "-e", "64K"], "cluster-acceptance sweep: -b 1M is larger than -e 64K"),
        (["sweep", "-b", "1Q"], "cluster-acceptance sweep: expected a size like 512, 1K, 16M or 4G"),
        (["sweep", "--ops", "allreduce"], "collectives.ops.0: got 'allreduce', input should be 'all_reduce'"),
    ],
)
def test_errors_are_one_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 4
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "-1", "0", "soon"])
def test_a_bad_sweep_timeout_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--timeout", value])
    assert exit_info.value.code == pytest.ExitCode.USAGE_ERROR
    assert f"argument --timeout: expected a finite number of seconds above 0, got {value!r}" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "-0.1", "soon"])
def test_a_bad_compare_tolerance_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "a.json", "b.json", "--tolerance", value])
    assert exit_info.value.code == pytest.ExitCode.USAGE_ERROR
    assert f"argument --tolerance: expected a finite number of 0 or more, got {value!r}" in capsys.readouterr().err


def test_not_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.json").write_text('{"a": 1}')
    assert main(["report", str(tmp_path / "x.json")]) == 4
    assert "not a cluster-acceptance evidence file" in capsys.readouterr().err


@pytest.mark.e2e
def test_console_script_is_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'cluster-acceptance = "acceptance.cli.main:main"' in text
    script = shutil.which("cluster-acceptance")
    if script is not None:
        assert subprocess.run([script, "list"], capture_output=True, timeout=60).returncode == 0


def test_list_describes_a_child_profile_by_itself_not_by_its_parent(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's example extends h200-x2 (one node, 2x H200) with 4 nodes of 8: ``list`` says what the
    resolved profile is, never the parent's words; a child's own description is shown as written."""
    readme = (ROOT / "README.md").read_text()
    example = readme[readme.index("# thresholds/my-cluster.yaml") :].split("\n\n")[0]
    (here / "thresholds" / "my-cluster.yaml").write_text(textwrap.dedent("       " + example))
    (here / "thresholds" / "mine.yaml").write_text("name: mine\nextends: h200-x2\ndescription: our lab node\n")
    assert main(["list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "one node" not in rows["my-cluster"]
    assert re.search(r"^my-cluster\s+4 node\(s\) x 8x NVIDIA H200 \(nccl\), extends h200-x2\s+\[", rows["my-cluster"])
    assert re.search(r"^mine\s+our lab node\s+\[", rows["mine"])
    assert profiles.load("my-cluster").model.description == ""


def test_a_sweep_says_the_timing_it_used_and_where_it_changed() -> None:
    """The header cannot know how the probe will time the calls (``auto`` picks; NCCL's direct calls fall back
    where libnccl cannot be called, the label saying why): each timing is said before the first row it timed."""
    rows = [
        cast(CollectiveRow, {"timing": t})
        for t in ("cuda_graph (libnccl not callable: x)", "cuda_graph (libnccl not callable: x)", "nccl")
    ]
    shown: list[str] = []
    said = [timing_line(row, "nccl", shown) for row in rows]
    assert said == ["# timing: cuda_graph (libnccl not callable: x) (asked: nccl)", None, "# timing: nccl"]
