"""A rank's heartbeat, ``rank-<r>.json``: written by the ranks (``acceptance.probes.rank.Heartbeat``), read by
the launcher and the diagnosis of a hang (``acceptance.run.diagnose``). Torch-free, so both sides share it.
"""

from __future__ import annotations

from typing_extensions import NotRequired, TypedDict


class RankIdentity(TypedDict):
    """Where a rank is, from torchrun's variables, before its process group exists."""

    rank: int
    node_rank: int
    local_rank: int
    host: str
    gpu_uuid: NotRequired[str]  # the GPU it drives, once it has one


class RankState(RankIdentity):
    pid: int
    phase: str
    status: str  # running, done, cancelled
    progress: int
    progress_at: float
    phases: list[list[str | float]]  # [phase, seconds from the heartbeat's start when it began]
    beat_at: NotRequired[float]
    elapsed_s: NotRequired[float]
    cuda_at_gate: NotRequired[bool]  # a staged job's: whether an import initialised CUDA while it waited
