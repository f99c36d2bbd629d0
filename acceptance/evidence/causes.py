"""What a failure is a fault of, and what to do about it: only the node's own faults drain it.

A run fails for two kinds of reasons. The node's own faults: its hardware (a GPU missing or slow, a port
down), its fabric (a link across nodes an isolation blamed on it), its configuration (another process on
its GPUs). And faults of the suite's own environment: its install (a CPU-only torch under a GPU profile),
its settings (the profile, the options, a time limit the operator gave), the run itself (its evidence
folder, the nodes' meeting, an interrupt); and another job that started on the run's GPUs while it measured
(foreign load: rerun when the GPU is the run's alone). Draining a node for the second kind takes healthy nodes out of
service: one broken image or one missing variable would drain every node of a cluster. So every failure
carries a category, and the category says the action; a scheduler acts only on ``drain`` ones.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from acceptance.verdicts import NODE_FAULTS, Category

Action = Literal["drain node", "drain GPU", "fix the install", "fix a setting", "rerun", "review"]
_REVIEW: dict[Category, Action] = {
    "software": "fix the install",
    "environment": "fix a setting",
    "foreign load": "rerun",
    "suite": "review",
}


def category_of(raw: object, default: Category) -> Category:
    """A category as a document stored it; ``default`` for none (a document from before categories)."""
    return next((c for c in get_args(Category) if c == raw), default)


def node_fault(category: Category) -> bool:
    """Whether a failure of ``category`` is the node's own: only those drain it."""
    return category in NODE_FAULTS


def action(category: Category, gpus: bool = False) -> Action:
    """What to do about a failure of ``category``; ``gpus``: it names the node's GPUs, not the node."""
    if node_fault(category):
        return "drain GPU" if gpus else "drain node"
    return _REVIEW[category]


# the words a line starts with when another job's process is its cause (the preflight's, a slowed figure's)
FOREIGN_LOAD_FIRST = "foreign load: "


def cause_first(text: str, category: Category) -> str:
    """``text`` with its cause in its first words: a figure slowed by another job's process says so first,
    as the preflight's line of a process there from the start does."""
    if category == "foreign load" and not text.startswith(FOREIGN_LOAD_FIRST):
        return FOREIGN_LOAD_FIRST + text
    return text


# A probe that raised is the node's hardware's fault only where the error says so. These are the texts the
# device's own faults give (CUDA Runtime API, enum cudaError: cudaErrorECCUncorrectable, cudaErrorNvlinkUncorrectable,
# cudaErrorHardwareStackError, cudaErrorLaunchFailure; NVML's nvmlReturn_t NVML_ERROR_GPU_IS_LOST; the driver's
# XID 79 "GPU has fallen off the bus", NVIDIA's XID catalog), in the error or in the log tail that follows it.
_HARDWARE_SIGNS = re.compile(
    r"uncorrectable ECC error|uncorrectable NVLink error|hardware stack error|unspecified launch failure"
    r"|GPU is lost|fallen off the bus|\bXid\b",
    re.IGNORECASE,
)
# an error of the device, its libraries or the network between ranks: whose fault it is stays the figures' guess
_DEVICE_OR_NETWORK = re.compile(
    r"cuda|nccl|gloo|nvml|cudnn|cublas|nvlink|ecc|accelerator|distributed|connect|socket|network|peer|timed? ?out",
    re.IGNORECASE,
)
_MISSING_MODULE = re.compile(r"^(ModuleNotFoundError|ImportError)\b")
_RAISED = re.compile(r"^probe \S+ failed: .*? raised (?P<error>.*)$", re.MULTILINE)


def crash_category(message: str) -> Category | None:
    """Whose fault a probe's crash is, from its message (``acceptance.run.diagnose.crash``: "probe P failed:
    rank R (...) raised ERROR", then the rank's log tail): the node's hardware where the error or its log
    shows a fault of the device; the install for a module that would not import; the suite itself for an
    error of its own code that names neither the device nor the network (no evidence against the node: review,
    never drain); None for the rest (a CUDA, NCCL or network error without a device fault: the figures'
    guess stands), and for a message that is no crash."""
    raised = _RAISED.search(message)
    if raised is None:
        return None
    if _HARDWARE_SIGNS.search(message):
        return "hardware"
    error = raised.group("error")
    if _MISSING_MODULE.match(error):
        return "software"
    return None if _DEVICE_OR_NETWORK.search(error) else "suite"
