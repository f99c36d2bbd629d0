"""A stored figure's noise (``acceptance.schema.noise``), found through its family's descriptor
(``Behaviour.noise``).
"""

from __future__ import annotations

from acceptance.profile.registry import family_of_metric
from acceptance.schema.noise import Noise
from acceptance.schema.stored import StoredRun


def noise_of(evidence: StoredRun, metric: str) -> Noise | None:
    """The standard error of ``metric`` (canonical) in ``evidence``, else None: its readings are not
    recorded (a barrier's one figure, a correctness count), or too few to tell a spread."""
    family = family_of_metric(metric)
    _, _, rest = metric.partition(".")
    head, _, size = rest.partition("@")
    if family is None or family.behaviour.noise is None:
        return None
    return family.behaviour.noise(evidence, head.split("."), size)
