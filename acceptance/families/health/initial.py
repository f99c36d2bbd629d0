"""Health's part of init's first profile: the driver found as the minimum, and the NVLink link count as the
gate (every link each GPU has wired, where NVML says where each goes)."""

from __future__ import annotations

from collections.abc import Mapping

from acceptance.json_types import JSONObject
from acceptance.schema.initial import Initial, InitialSetup, RowFacts


def section(setup: InitialSetup, _bounds: Mapping[str, RowFacts | None]) -> JSONObject:
    out: JSONObject = {}
    if setup.driver:
        out["min_driver"] = setup.driver
    if setup.nvlink_links:
        out["nvlink_links"] = setup.nvlink_links
    return out


INITIAL = Initial(section, 10)
