"""The command line's usage errors: one line and pytest's exit status for them, never a traceback."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

import pytest

# the status `pytest --cluster-profile ...` gives bad input, so that a pipeline reads both commands alike
USAGE_ERROR = int(pytest.ExitCode.USAGE_ERROR)


class Parser(argparse.ArgumentParser):
    """argparse with pytest's usage-error status (argparse's own is 2); subcommands inherit it."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")
