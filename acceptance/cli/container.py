"""The container's entry point: run the acceptance suite with the profile named by CLUSTER_PROFILE.

``python -m acceptance.cli.container [PYTEST-ARGS...]`` runs ``pytest tests_cluster/`` with the evidence in
CLUSTER_EVIDENCE (default ``/results``, the folder to mount). Without CLUSTER_PROFILE it refuses to
start: a suite with no profile would skip every test and exit 0, which must never read as a pass.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

DEFAULT_EVIDENCE = "/results"
DEFAULT_TESTS = "tests_cluster"


class EntryError(SystemExit):
    """Exit with a message instead of a traceback."""


def pytest_args(env: Mapping[str, str], extra: list[str]) -> list[str]:
    profile = env.get("CLUSTER_PROFILE", "").strip()
    if not profile:
        raise EntryError(
            "CLUSTER_PROFILE is not set: name the profile to run (e.g. -e CLUSTER_PROFILE=h200-x2); "
            "local-cpu runs anywhere"
        )
    tests = env.get("CLUSTER_TESTS", DEFAULT_TESTS)
    if not Path(tests).is_dir():
        raise EntryError(f"CLUSTER_TESTS={tests!r}: no such folder (expected the acceptance tests)")
    evidence = env.get("CLUSTER_EVIDENCE", DEFAULT_EVIDENCE)
    return ["-p", "no:cacheprovider", tests, "--cluster-profile", profile, "--cluster-evidence", evidence, *extra]


def main(argv: list[str] | None = None) -> int:
    import pytest

    args = pytest_args(os.environ, sys.argv[1:] if argv is None else argv)
    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())
