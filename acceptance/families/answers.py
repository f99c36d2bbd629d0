"""The contract between a probe's answers and the rules: an answer the probe could not give.

A query a probe cannot answer (an older GPU, no permission, a lost GPU) becomes
``{"not_measured": "<query>: <reason>"}``, an answer no rule can take for a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from typing_extensions import TypeIs

NOT_MEASURED = "not_measured"


class NotMeasured(TypedDict):
    """An answer the probe could not give, and why."""

    not_measured: str


def not_measured(reason: str) -> NotMeasured:
    return {"not_measured": reason}


def is_measured(answer: object) -> bool:
    return not (isinstance(answer, dict) and NOT_MEASURED in answer)


def unanswered(answer: object) -> TypeIs[NotMeasured]:
    """``not is_measured(answer)``, telling the type checker which of an answer's types it is."""
    return not is_measured(answer)


def gpu_label(host: str, gpu: Mapping[str, object]) -> str:
    """A GPU as a person finds it: host, index and the start of its UUID."""
    uuid = gpu.get("uuid")
    short = f"{uuid[:8]}..." if isinstance(uuid, str) else "UUID not measured"
    return f"{host} GPU {gpu.get('index')} ({short})"


def clock_events_text(events: dict[str, float]) -> str:
    """``sw_power_cap 100%, hw_thermal 12%`` (each reason's share of the samples), or ``none``."""
    if not events:
        return "none"
    return ", ".join(f"{name} {share:.0%}" for name, share in sorted(events.items(), key=lambda e: -e[1]))
