"""Unit tables: sizes, threshold evaluation, number formatting."""

from __future__ import annotations

import math

import pytest

from acceptance.numbers import fmt
from acceptance.profile.loader import evaluate
from acceptance.schema.bounds import Threshold
from acceptance.schema.sizes import SizeError, canonical_size, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("512", 512),
        ("1K", 1024),
        ("64K", 65536),
        ("1M", 2**20),
        ("16M", 16 * 2**20),
        ("1G", 2**30),
        ("4G", 4 * 2**30),
        ("2T", 2 * 2**40),
        (" 8M ", 8 * 2**20),
        (4096, 4096),
    ],
)
def test_parse_size(text: str | int, nbytes: int) -> None:
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("bad", ["1Q", "1.5M", "M", "", "-1M", "1m", "1MB", "1 M", "0", 0, -4, True])
def test_parse_size_rejects(bad: str | int) -> None:
    with pytest.raises(SizeError, match="size"):
        parse_size(bad)


def test_parse_size_error_names_the_input() -> None:
    with pytest.raises(SizeError, match=r"expected a size like 512, 1K, 16M or 4G \(binary units\), got '1Q'"):
        parse_size("1Q")


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(1, "1"), (1000, "1000"), (1024, "1K"), (1536, "1536"), (3 * 2**20, "3M"), (2**30, "1G"), (2**40, "1T")],
)
def test_format_size(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text


@pytest.mark.parametrize(("text", "canon"), [("1024K", "1M"), ("1024M", "1G"), ("65536", "64K"), ("3K", "3K")])
def test_canonical_size(text: str, canon: str) -> None:
    assert canonical_size(text) == canon


@pytest.mark.parametrize(
    ("threshold", "value", "ok", "bound"),
    [
        (Threshold(min=350), 351.0, True, ">= 350"),
        (Threshold(min=350), 350.0, True, ">= 350"),
        (Threshold(min=350), 312.4, False, ">= 350"),
        (Threshold(max=50000), 49999.0, True, "<= 50000"),
        (Threshold(max=50000), 50001.0, False, "<= 50000"),
        (Threshold(min=1, max=2), 1.5, True, ">= 1 and <= 2"),
        (Threshold(min=1, max=2), 2.5, False, ">= 1 and <= 2"),
        (Threshold(eq=0), 0, True, "== 0"),
        (Threshold(eq=0), 3, False, "== 0"),
        (Threshold(ref=100, tol=0.05), 95.0, True, "100 ± 5%"),
        (Threshold(ref=100, tol=0.05), 105.0, True, "100 ± 5%"),
        (Threshold(ref=100, tol=0.05), 94.9, False, "100 ± 5%"),
        (Threshold(ref=100, tol=0.05), 105.1, False, "100 ± 5%"),
        (Threshold(ref=-10, tol=0.1), -10.5, True, "-10 ± 10%"),
        (Threshold(min=1e6), 3.2, False, ">= 1e+06"),
        (Threshold(min=0.05, xfail="known slow link"), 0.01, False, ">= 0.05"),
        (Threshold(min=0), math.nan, False, ">= 0"),
        (Threshold(max=10), math.nan, False, "<= 10"),
        (Threshold(ref=1, tol=0.5), math.nan, False, "1 ± 50%"),
    ],
)
def test_evaluate(threshold: Threshold, value: float, ok: bool, bound: str) -> None:
    assert evaluate(threshold, value) == (ok, bound)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "at least one of min, max, eq, ref"),
        ({"ref": 1.0}, "ref and tol go together"),
        ({"tol": 0.1, "min": 1.0}, "ref and tol go together"),
        ({"eq": 0.0, "min": 1.0}, "eq cannot be combined"),
        ({"min": 1.0, "typo": 2.0}, "Extra inputs are not permitted"),
        ({"ref": 1.0, "tol": -0.1}, "greater than or equal to 0"),
    ],
)
def test_threshold_rejects(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Threshold.model_validate(fields)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (3, "3"),
        (191900, "191,900"),
        (191900.0, "191,900"),
        (1234.5, "1,234"),
        (312.4, "312.4"),
        (0.93, "0.93"),
        (0.012345678, "0.01235"),
        (1e-7, "1e-07"),
    ],
)
def test_fmt(value: float, text: str) -> None:
    assert fmt(value) == text
