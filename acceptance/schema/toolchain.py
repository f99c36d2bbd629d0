"""A compiler that one of the probes' dependencies builds code with at its first call, as a family declares it.

torch.compile, DeepSpeed's ops and the collectives' C loop each build code on the node, each with the
compiler its own project looks for. A family says which of them its probes need under its section
(``Behaviour.builds_with``); the preflight looks each up the way its project does (``acceptance.run.toolchain``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Need:
    """A compiler one of the probes' dependencies builds with, looked up as that dependency does."""

    family: str  # the family whose tests need it
    builds: str  # what builds with it
    variable: str  # the variable it reads first
    commands: tuple[str, ...]  # what it looks for on PATH otherwise, in its order
    source: str  # where the dependency does the lookup
    stops: bool = True  # without it the family cannot run (else it runs another way, and says so)
