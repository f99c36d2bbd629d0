"""The acceptance suite selected without a profile: a usage error, not a green run of skipped tests.

Without a profile the plugin is inert, so another project's tests run as before. But a selection of the
acceptance suite itself (``tests_cluster/``, or the suite installed as ``acceptance.suite``) with no profile
would skip every test and exit 0: a pipeline that forgot the profile would read as green. That selection
is refused with exit 4 and one line that says how to pick a profile and which exist. ``--collect-only``
measures nothing and lists the suite as it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.profile import loader

SUITE_FOLDER = "tests_cluster"
INSTALLED_SUITE = Path(__file__).resolve().parents[1] / "suite"  # acceptance.suite, built from tests_cluster/


def in_the_suite(path: Path) -> bool:
    return SUITE_FOLDER in path.parts or path.resolve().is_relative_to(INSTALLED_SUITE)


def refuse_the_suite(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Raise a usage error when the selection holds a test of the acceptance suite and no profile is given."""
    if config.option.collectonly or not any(in_the_suite(item.path) for item in items):
        return
    names = ", ".join(loader.available()) or "none found"
    raise pytest.UsageError(
        "no cluster profile selected for the acceptance suite: pass --cluster-profile NAME (or set "
        f"CLUSTER_PROFILE); profiles: {names} (local-cpu runs on any machine; `cluster-acceptance list` "
        "describes each)"
    )
