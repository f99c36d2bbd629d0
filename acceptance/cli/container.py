"""Running the installed acceptance suite: ``cluster-acceptance run`` and the container's entry point.

The suite ships inside the package (``acceptance.suite``, built from ``tests_cluster/`` of the source tree),
so a pip-installed plugin runs it without a checkout; in a source checkout that is not installed, the
checkout's ``tests_cluster/`` is the suite.

``python -m acceptance.cli.container [PYTEST-ARGS...]`` is the container's entry point: the profile comes
from CLUSTER_PROFILE, and the evidence goes to ``CLUSTER_EVIDENCE/<run id>`` (default ``/results/<run
id>``), the run id being CLUSTER_RUN_ID or ``<UTC time>-<host>``, so a run never overwrites the last
one's evidence. Without CLUSTER_PROFILE it refuses to start: a suite with no profile would skip every
test and exit 0, which must never read as a pass.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import acceptance
from acceptance.atomic_file import host_part
from acceptance.cli.usage import USAGE_ERROR

DEFAULT_EVIDENCE = "/results"


class EntryError(Exception):
    """Bad input to the entry point: one line and the usage-error status, never a traceback."""


def suite_dir() -> Path:
    """Where the acceptance suite is: the installed ``acceptance.suite``, else a checkout's ``tests_cluster/``."""
    spec = importlib.util.find_spec("acceptance.suite")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    checkout = Path(acceptance.__file__).resolve().parent.parent / "tests_cluster"
    if checkout.is_dir():
        return checkout
    raise EntryError(f"the acceptance suite is not installed beside {Path(acceptance.__file__).parent}: reinstall")


def suite_args(tests: Path | str, profile: str, evidence: str | None, extra: list[str]) -> list[str]:
    """pytest's arguments for one run of the suite: no cache folder (the suite may be read-only), and the
    suite as rootdir, so test ids (``test_connectivity.py::test_world_size``, compared between the nodes)
    do not depend on where the package is installed or where the run starts."""
    out = ["--cluster-evidence", evidence] if evidence else []
    return ["-p", "no:cacheprovider", f"--rootdir={tests}", str(tests), "--cluster-profile", profile, *out, *extra]


def run_id(env: Mapping[str, str]) -> str:
    """This run's name: CLUSTER_RUN_ID (the same on every node of a run), else the time and this host."""
    given = env.get("CLUSTER_RUN_ID", "").strip()
    if given:
        return given
    return f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{host_part()}"


def pytest_args(env: Mapping[str, str], extra: list[str]) -> list[str]:
    profile = env.get("CLUSTER_PROFILE", "").strip()
    if not profile:
        raise EntryError(
            "CLUSTER_PROFILE is not set: name the profile to run (e.g. -e CLUSTER_PROFILE=h200-x2); "
            "local-cpu runs anywhere"
        )
    tests = env.get("CLUSTER_TESTS") or str(suite_dir())
    if not Path(tests).is_dir():
        raise EntryError(f"CLUSTER_TESTS={tests!r}: no such folder (expected the acceptance tests)")
    evidence = str(Path(env.get("CLUSTER_EVIDENCE", DEFAULT_EVIDENCE)) / run_id(env))
    return suite_args(tests, profile, evidence, extra)


def main(argv: list[str] | None = None) -> int:
    import pytest

    try:
        args = pytest_args(os.environ, sys.argv[1:] if argv is None else argv)
    except EntryError as exc:
        print(f"cluster-acceptance container: {exc}", file=sys.stderr)
        return USAGE_ERROR
    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())
