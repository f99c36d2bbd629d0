"""The training section's peaks: per GPU, dense, one per precision, so that MFU divides by the peak of the
precision the run uses (``precision: fp32`` trains on TF32 tensor cores, at half the bf16 rate on H100/H200)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

Precision = Literal["bf16", "fp16", "fp32"]


def _per_precision(value: Any) -> Any:
    """A single number used to be the peak "at this precision": wrong as soon as the precision is overridden."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(
            "give the dense peak per precision, e.g. {bf16: 989.4, fp16: 989.4, fp32: 494.7} (fp32 trains on TF32), "
            "so that MFU divides by the peak of the precision the run uses"
        )
    return value


Peaks = Annotated[dict[Precision, Annotated[float, Field(gt=0)]] | None, BeforeValidator(_per_precision)]
