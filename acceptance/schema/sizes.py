"""Message sizes, spelled the way nccl-tests parses ``-b``/``-e``: binary suffixes K, M, G, T."""

from __future__ import annotations

import re

_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE_RE = re.compile(r"^(\d+)([KMGT]?)$")


class SizeError(ValueError):
    """A size string that is not an integer with an optional K/M/G/T suffix."""


def parse_size(text: str | int) -> int:
    """``"16M"`` -> 16777216. Integers pass through; anything else raises :class:`SizeError`."""
    if isinstance(text, bool):
        raise SizeError(f"expected a size like 1M or 4G, got {text!r}")
    if isinstance(text, int):
        if text <= 0:
            raise SizeError(f"expected a positive size, got {text}")
        return text
    match = _SIZE_RE.match(str(text).strip())
    if not match:
        raise SizeError(f"expected a size like 512, 1K, 16M or 4G (binary units), got {text!r}")
    value = int(match.group(1)) * _SUFFIX[match.group(2)]
    if value <= 0:
        raise SizeError(f"expected a positive size, got {text!r}")
    return value


def format_size(nbytes: int) -> str:
    """The one spelling used in keys, test ids and tables: the largest exact binary unit."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def canonical_size(text: str | int) -> str:
    """Normalise any accepted spelling (``1024K``) to the canonical one (``1M``)."""
    return format_size(parse_size(text))
