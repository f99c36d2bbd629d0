"""The HTML report in a real browser: headless Chromium loads it offline, its self-check passes (every plot
decoded, no script error), the console shows no error, and a screenshot of the page is taken.

Reports rendered: the committed 2x H200 evidence, the committed two-node run (merged), and a fresh local-cpu
run made here (connectivity, compute and collectives: a subset, so its verdict is PARTIAL). More evidence
folders can be named in ``CLUSTER_REPORT_EVIDENCE`` (``os.pathsep``-separated; ``.ci/run`` passes its
local-cpu suite run). Screenshots go to ``CLUSTER_REPORT_SCREENSHOTS`` when set, else to the test's tmp dir.
Skipped with the reason when no Chromium is installed (``apt-get install -y chromium``; ``.ci/run`` does).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance.cli.main import main
from tests.harness import EVIDENCE, ROOT

pytestmark = pytest.mark.e2e  # every test starts headless Chromium

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# root in a container has no user namespace for Chromium's sandbox; the page is our own file, offline
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chromium() -> str:
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        pytest.skip("no Chromium to render the report in: apt-get install -y chromium (.ci/run installs it)")
    return found


@pytest.fixture(scope="module")
def fresh_local_cpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh local-cpu run of three families: real probes, a subset of the suite."""
    folder = tmp_path_factory.mktemp("local-cpu")
    modules = [f"tests_cluster/test_{m}.py" for m in ("connectivity", "compute", "collectives")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--cluster-profile", "local-cpu", *modules,
         "--cluster-evidence", str(folder), "--cluster-set", "compute.tolerance=1"],  # one reading: see test_worker
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder


def _extra() -> list[str]:
    return [p for p in os.environ.get("CLUSTER_REPORT_EVIDENCE", "").split(os.pathsep) if p]


CASES = [("h200-x2", "PASS"), ("h200-x2-2node", "PASS"), ("fresh-local-cpu", "PARTIAL"), *[(p, "") for p in _extra()]]


def _evidence(case: str, fresh: pytest.FixtureRequest) -> Path:
    if case == "fresh-local-cpu":
        return Path(fresh.getfixturevalue("fresh_local_cpu"))
    return EVIDENCE / case if not Path(case).is_absolute() else Path(case)


def _browser(chromium: str, *args: str) -> subprocess.CompletedProcess[str]:
    # --virtual-time-budget lets the load event and the self-check run before the DOM is dumped
    argv = [chromium, *FLAGS, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000", *args]
    return subprocess.run(argv, capture_output=True, text=True)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CLUSTER_REPORT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize(("case", "verdict"), CASES, ids=[Path(c).name for c, _ in CASES])
def test_report_opens_in_chromium(
    case: str, verdict: str, chromium: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    page = tmp_path / "report.html"
    assert main(["report", str(_evidence(case, request)), "-o", str(page)]) == 0
    text = page.read_text()
    pictures = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(pictures) >= 2 and len(pictures) == text.count("<img ")
    for picture in pictures:
        width, height = _png_size(base64.b64decode(picture))
        assert width >= 300 and height >= 200

    dom = _browser(chromium, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", dom.stdout)
    assert title and title.group(1) == f"report-ok: {len(pictures)} plots", dom.stdout[:500]
    assert 'data-self-check="ok"' in dom.stdout
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    if verdict:
        assert f'<div class="banner v-{verdict}"><h1>Cluster acceptance: {verdict}</h1>' in dom.stdout

    shot = _screenshots(tmp_path) / f"report-{Path(case).name}.png"
    done = _browser(chromium, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    assert _png_size(shot.read_bytes()) == (1280, 2400) and shot.stat().st_size > 50_000  # a page, not a blank
