"""How far a GEMM's inner products may stray from the exact ones: the soak's fp64 reference check (torch-free:
the soak section validates its ``matmul_size`` with it, the probe bounds its results by it).

Unit roundoffs (half an ulp at 1): bfloat16 keeps 8 significand bits, float32 24 (IEEE 754 binary32; the
bfloat16 format keeps float32's exponent and 8 bits of its significand). Hopper's fp8 tensor cores
accumulate with about 14 bits (DeepSeek-V3 Technical Report, arXiv:2412.19437, section 3.3.2).
"""

from __future__ import annotations

import math

U_BF16, U_FP32, U_FP8_ACCUMULATE = 2.0**-8, 2.0**-24, 2.0**-14
# A bound whose factor gamma (the error over sum |a_i b_i|) is above this says little: gamma = 1 lets a 0
# through where sum a_i b_i = sum |a_i b_i| was wanted. 0.1: the error is at most a tenth of it.
GAMMA_MAX = 0.1
# lambda of the probabilistic bound: each inner product stays within it with probability at least
# 1 - 2 k exp(-lambda^2 (1 - u)^2 / 2), 1 - 3e-18 for k = 8192 (Higham & Mary 2019, below)
LAMBDA = 10.0


def accumulation_gamma(k: int, u: float) -> tuple[float, str] | None:
    """The factor of the bound ``|fl(a.b) - a.b| <= gamma |a|.|b|`` for an inner product of length ``k``
    accumulated with unit roundoff ``u``, and where it comes from; None where no bound of both kinds is
    meaningful (``gamma > GAMMA_MAX``), so that the check is not measured rather than passed.

    Deterministic where it is meaningful: gamma_k = k u / (1 - k u) (Higham, "Accuracy and Stability of
    Numerical Algorithms", 2nd ed., SIAM 2002, §3.1, Lemma 3.1 and eq. 3.5). It needs k u < 1 and grows
    without bound as k u nears 1: for fp8's accumulator (u = 2**-14) it is 1 at k = 8192 (a 0 passes where
    8192 was wanted), a division by zero at 16384 and negative (a bound nothing fails) beyond. There, the
    probabilistic bound of rounding errors that are independent and of mean zero: gamma~_k(lambda) =
    exp(lambda sqrt(k) u + k u^2 / (1 - u)) - 1, about lambda sqrt(k) u (Higham and Mary, "A new approach
    to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019; it assumes rounding errors
    that are independent and of mean zero): 0.057 for fp8 at k = 8192. bfloat16 GEMMs accumulate in
    float32 (u = 2**-24): k u is 5e-4 at k = 8192, deterministic."""
    nu = k * u
    if nu < 1:
        gamma = nu / (1 - nu)
        if gamma <= GAMMA_MAX:
            return gamma, f"deterministic gamma_k = k u / (1 - k u), k = {k}, u = 2^{math.log2(u):g}"
    exponent = LAMBDA * math.sqrt(k) * u + nu * u / (1 - u)
    probable = math.expm1(min(exponent, 1.0))  # past 1 (gamma~ 1.7) it is meaningless anyway: no overflow
    if probable <= GAMMA_MAX:
        return probable, (
            f"probabilistic gamma~_k = exp({LAMBDA:g} sqrt(k) u + k u^2 / (1 - u)) - 1, k = {k}, "
            f"u = 2^{math.log2(u):g} (Higham & Mary 2019)"
        )
    return None


def largest_k(u: float) -> int:
    """The longest inner product that ``accumulation_gamma`` still bounds at ``u``."""
    low, high = 1, 1 << 40
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if accumulation_gamma(mid, u) is not None else (low, mid - 1)
    return low
