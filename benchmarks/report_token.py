"""``cluster-acceptance report`` on evidence holding one unbroken 1 MB token, against the same evidence
without it: the masking's cost in a whole report (CPU only, no GPU needed).

    python benchmarks/report_token.py [REPEATS]

Prints the best of REPEATS (3) wall times of each report and their ratio.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from acceptance.cli.main import main

# a whole run: the 2x H200 reference evidence, plots and all
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "evidence" / "h200-x2" / "evidence.json"
TOKEN = "https://u:" + "a" * 2**20 + "@host"  # the shape that cost 114 s at 256 KB with a quadratic pattern


def best_report_s(folder: Path, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        for name in ("report.html", "report.md"):
            (folder / name).unlink(missing_ok=True)
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["report", str(folder)]) == 0
        best = min(best, time.perf_counter() - start)
    return best


def main_(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain, token = Path(tmp, "plain"), Path(tmp, "token")
        for folder in (plain, token):
            folder.mkdir()
            shutil.copy(FIXTURE, folder / "evidence.json")
        data = json.loads((token / "evidence.json").read_text())
        data["errors"].append(f"probe failed: {TOKEN}")
        (token / "evidence.json").write_text(json.dumps(data))
        best_report_s(plain, 1)  # warm: imports, the plot library's font cache
        plain_s, token_s = best_report_s(plain, repeats), best_report_s(token, repeats)
    print(f"plain report {plain_s:.2f} s, report with a 1 MB token {token_s:.2f} s, ratio {token_s / plain_s:.2f}")


if __name__ == "__main__":
    main_(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
