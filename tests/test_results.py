"""A probe's result is checked against its family's type where it is read: a field that is off is named."""

from __future__ import annotations

import json

import pytest

from acceptance.families.drift import DriftResult
from acceptance.schema.results import ResultMismatch, validated

DRIFT: dict[str, object] = {"nodes": [], "gpus": [], "no_gpus": None, "injected": [], "from_probe": "kept"}


def test_a_result_that_matches_goes_on_as_it_is() -> None:
    found = validated("drift", DriftResult, DRIFT)
    assert found is DRIFT and found["from_probe"] == "kept"  # type: ignore[typeddict-item]


def test_a_result_that_does_not_match_names_the_probe_and_the_field() -> None:
    want = r"probe drift's result does not match DriftResult: nodes: Input should be a valid list"
    with pytest.raises(ResultMismatch, match=want):
        validated("drift", DriftResult, {**DRIFT, "nodes": "node-0"})


def test_a_missing_field_is_named() -> None:
    bad = {**json.loads(json.dumps(DRIFT))}
    del bad["gpus"]
    with pytest.raises(ResultMismatch, match=r"gpus: Field required"):
        validated("drift", DriftResult, bad)
