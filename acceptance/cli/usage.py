"""The command line's usage errors: one line and pytest's exit status for them, never a traceback."""

from __future__ import annotations

import argparse
import sys
from typing import Annotated, NoReturn

import pytest
from pydantic import Field, TypeAdapter

# the status `pytest --cluster-profile ...` gives bad input, so that a pipeline reads both commands alike
USAGE_ERROR = int(pytest.ExitCode.USAGE_ERROR)


class Parser(argparse.ArgumentParser):
    """argparse with pytest's usage-error status (argparse's own is 2); subcommands inherit it."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def tolerance(text: str) -> float:
    """The type of ``compare --tolerance``: as a profile's ``baseline.tolerance`` takes it (finite, 0 or more)."""
    try:
        return TypeAdapter(Annotated[float, Field(ge=0, allow_inf_nan=False)]).validate_python(float(text))
    except ValueError:  # not a number, or pydantic's ValidationError (a ValueError)
        raise argparse.ArgumentTypeError(f"expected a finite number of 0 or more, got {text!r}") from None
