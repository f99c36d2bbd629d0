"""The contract between a probe's answers and the rules: an answer the probe could not give.

A query a probe cannot answer (an older GPU, no permission, a lost GPU) becomes
``{"not_measured": "<query>: <reason>"}``, an answer no rule can take for a pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from typing_extensions import TypedDict, TypeIs

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


# what each clock-event reason means (nvml.h, "nvmlClocksEventReasons"): a power cap is a GEMM at the power
# limit, as designed; a thermal or hardware slowdown, a power brake, is a fault of the GPU or its cooling
CLOCK_EVENT_MEANINGS = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sync_boost": "held to another GPU's clocks (sync boost)",
    "sw_thermal": "thermal slowdown (driver)",
    "hw_thermal": "thermal slowdown (hardware)",
    "hw_power_brake": "power brake (external signal)",
}


def clock_events_text(events: dict[str, float]) -> str:
    """``sw_power_cap (power cap) 100%, hw_thermal (thermal slowdown (hardware)) 12%``: each reason, what it
    means and its share of the samples, longest first; or ``none``."""
    if not events:
        return "none"

    def named(name: str) -> str:
        meaning = CLOCK_EVENT_MEANINGS.get(name)
        return f"{name} ({meaning})" if meaning else name

    return ", ".join(f"{named(name)} {share:.0%}" for name, share in sorted(events.items(), key=lambda e: -e[1]))
