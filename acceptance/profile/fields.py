"""The building blocks of every profile section: the strict base model and the checked field types.

Strict on purpose: an unknown key, a wrong type or a number that is not finite is an error, because a
typo in a profile must never turn a gate off (``max: .inf`` holds for every figure, a NaN bound for
none). Sizes are validated here and stored in their canonical spelling (see ``sizes``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from acceptance.profile.sizes import canonical_size

Size = Annotated[str, BeforeValidator(canonical_size)]
PositiveInt = Annotated[int, Field(gt=0)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Tolerance = Annotated[float, Field(ge=0, allow_inf_nan=False)]
RunName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]  # it goes into metric names and test ids


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
