"""How one collective was timed: the mode, and apart from it the reason it is not the mode asked for or how it
departs from it. The evidence's ``timing`` is the two in words (``Timing.label``): ``nccl``, ``cuda_graph``,
``eager``, or one of them followed by its reason in brackets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# what a profile asks for (``collectives.timing``): auto is nccl for the whole world on GPUs, a CUDA graph inside a
# subgroup, eager on the CPU (``probes.collectives.timing_of``)
TimingAsked = Literal["auto", "nccl", "cuda_graph", "eager"]


def calls_nccl(asked: TimingAsked) -> bool:
    """Whether a sweep timed as ``asked`` calls libnccl directly on GPUs (through the C loop, which needs a C
    compiler): ``nccl``, and ``auto`` for the whole world."""
    return asked in ("auto", "nccl")


# nccl: libnccl called directly from one loop timed by the host, nccl-tests' time at every size
# (``probes.nccl_calls``); cuda_graph: the loop captured in a CUDA graph, timed on the device, without NCCL's host
# work (faster than nccl-tests below 1 MiB); eager: torch.distributed's calls timed by the host, its Python and
# work objects included (the CPU's only mode)
TimingMode = Literal["nccl", "cuda_graph", "eager"]
# no_nccl: the direct calls were asked for (or ``auto``'s) and no communicator of the probe's own could be made;
# from_python: NCCL called directly, the calls issued from Python where the C loop could not be built (slower than
# nccl-tests below 1 MiB); graph_failed: a CUDA graph could not capture the collective, timed eagerly instead
ReasonKind = Literal["no_nccl", "from_python", "graph_failed"]
_SAID: dict[ReasonKind, str] = {
    "no_nccl": "",
    "from_python": "issued from Python: ",
    "graph_failed": "CUDA graph capture failed: ",
}


@dataclass(frozen=True)
class Reason:
    kind: ReasonKind
    words: str  # the cause as the failing part said it (a compiler's last line, NCCL's or torch's error)

    def __str__(self) -> str:
        return f"{_SAID[self.kind]}{self.words}"


@dataclass(frozen=True)
class Timing:
    mode: TimingMode
    reason: Reason | None = None

    @property
    def label(self) -> str:
        return self.mode if self.reason is None else f"{self.mode} ({self.reason})"
