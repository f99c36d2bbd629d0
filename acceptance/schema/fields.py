"""The building blocks of every profile section: the strict base model and the checked field types.

Strict on purpose: an unknown key, a wrong type or a number that is not finite is an error, because a
typo in a profile must never turn a gate off (``max: .inf`` holds for every figure, a NaN bound for
none). Sizes are validated here and stored in their canonical spelling (see ``sizes``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from acceptance.schema.sizes import canonical_size

Size = Annotated[str, BeforeValidator(canonical_size)]
PositiveInt = Annotated[int, Field(gt=0)]
Tolerance = Annotated[float, Field(ge=0, allow_inf_nan=False)]
RunName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]  # it goes into metric names and test ids
# A week bounds every limit in seconds: the ranks turn it into a timedelta, which overflows near 1e14 s, and
# no probe or rendezvous of an acceptance run waits that long on purpose.
MAX_SECONDS = 7 * 24 * 3600
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _at_most_a_week(seconds: float) -> float:
    if seconds > MAX_SECONDS:
        raise ValueError(f"at most {MAX_SECONDS} seconds (7 days)")
    return seconds


def _plain_name(name: str) -> str:
    """A profile's name names its evidence folder: a slash or a ``..`` would put the evidence elsewhere."""
    if not _PLAIN_NAME.fullmatch(name):
        raise ValueError(
            "a profile name is letters, digits, '.', '_' and '-', starting with a letter or digit "
            f"(it names the evidence folder), got {name!r}"
        )
    return name


Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False), AfterValidator(_at_most_a_week)]
ProfileName = Annotated[str, AfterValidator(_plain_name)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


ThrottleReason = Literal["hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal", "sw_power_cap"]


def _absolute(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError(f"expected an absolute path (each node resolves it on its own), got {text!r}")
    return text


AbsolutePath = Annotated[str, AfterValidator(_absolute)]  # each node resolves it on its own
