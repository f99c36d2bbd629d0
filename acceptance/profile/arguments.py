"""Command-line numbers taken as a profile takes them: ``--cluster-timeout`` and ``sweep --timeout`` as
``timeouts``, ``compare --tolerance`` as ``baseline``."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from acceptance.schema.fields import MAX_SECONDS, Seconds, Tolerance


def _option(kind: Any, expected: str) -> Callable[[str], float]:
    """An argparse type validated by the profile's own field type; argparse turns the error into a usage
    error naming the option."""
    adapter = TypeAdapter(kind)

    def convert(text: str) -> float:
        try:
            number = float(text)
            # said apart from the rest: the number itself is fine, only too large for the ranks' timers
            if kind is Seconds and math.isfinite(number) and number > MAX_SECONDS:
                raise argparse.ArgumentTypeError(f"expected at most {MAX_SECONDS} seconds (7 days), got {text!r}")
            return float(adapter.validate_python(number))
        except ValueError:  # not a number, or pydantic's ValidationError (a ValueError)
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    return convert


positive_seconds = _option(Seconds, "a finite number of seconds above 0")
tolerance = _option(Tolerance, "a finite number of 0 or more")
