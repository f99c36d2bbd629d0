"""The element types a profile may name, without torch: the one table every side derives its own from.

``significand_bits`` is the precision p (stored mantissa bits + the implicit leading bit): every integer
in [0, 2**p] is exactly representable, which the collectives' data check builds on. Sources: IEEE 754-2008
table 3.5 (binary16 p = 11, binary32 p = 24); bfloat16 is binary32 with 16 mantissa bits cut (p = 8,
Intel's "BFLOAT16 - Hardware Numerics Definition", 2018). ``nccl_tests`` is nccl-tests' name for the type
(``test_typenames`` in NVIDIA/nccl-tests src/common.cu), so tables read alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str  # the profile's spelling, and torch's attribute name (torch.bfloat16)
    nbytes: int
    significand_bits: int
    nccl_tests: str

    @property
    def exact_integers(self) -> int:
        """The largest n such that every integer in [0, n] is exactly representable."""
        return 2**self.significand_bits


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("bfloat16", nbytes=2, significand_bits=8, nccl_tests="bfloat16"),
        DType("float16", nbytes=2, significand_bits=11, nccl_tests="half"),
        DType("float32", nbytes=4, significand_bits=24, nccl_tests="float"),
    )
}
DTYPE_NAMES = tuple(DTYPES)
