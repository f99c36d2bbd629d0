"""The list of families, in the order a run takes them: everything that names families reads it.

Each family is one module of ``acceptance.families`` (its profile section, its descriptor, its rules); adding
a family is its module, its probe, its test modules and its entry here (an import and its place in the run
order). No typing names the families one by one, since a type checker cannot follow this list: a family's
section of the profile model is read with its descriptor (``TRAINING.section_of(model)``), and a probe reads
its section of the spec with ``probes.rank.section`` as the config type beside the section model. The profile
model, the timeouts, the markers, the tiers, the run order, the preflight's skips, the probe worker's set and
the docs' reference page and tiers table (built by ``docs/hooks.py``) are derived from this list, and so is
which figures are a node's own hardware (``Family.local``, ``Metric.local``: recorded with each check, the
drain list reads it).

A family's behaviour goes with its descriptor (``Family.behaviour``, one ``Behaviour`` its package defines
beside its rules), which shared code calls through this list: its re-measure (``Behaviour.remeasure``), the
noise of its stored figures (``Behaviour.noise``), the floors init writes from the node's links
(``Behaviour.floors``), its part of init's first profile (``Behaviour.initial``), its section of the report,
its per-GPU export rows and its terminal table (``Behaviour.report``), the compilers its probes build with
(``Behaviour.builds_with``, the preflight's toolchain), whether a leftover process drains
(``Behaviour.leftover_drains``), its ports' first reading (``Behaviour.reads_ports``) and its isolation rounds
(``Behaviour.isolation``); its job started ahead of its turn is ``Family.staged``. Named by hand still, each
for what one family alone has, outside the list (the modules and their reasons: ``NAMING_A_FAMILY`` in
``tests/test_architecture.py``, which keeps the list from growing): the suite's public helpers
(``plugin/api.py``); the training jobs on the run (``run/training_jobs.py``); the failure category that shares
the fabric family's name (``verdicts.py``); and a family's own command outside pytest (``sweep`` for the
collectives, ``bench_train`` for training).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceptance.families.collectives import COLLECTIVES
from acceptance.families.compute import COMPUTE
from acceptance.families.connectivity import CONNECTIVITY
from acceptance.families.drift import DRIFT
from acceptance.families.fabric import FABRIC
from acceptance.families.health import HEALTH
from acceptance.families.internode import INTERNODE
from acceptance.families.llama8b import LLAMA8B
from acceptance.families.soak import SOAK
from acceptance.families.storage import STORAGE
from acceptance.families.training import TRAINING
from acceptance.schema.family import Family

# In the order a run takes them: cheap and diagnostic first, so a missing rank or a sick GPU is named before
# a long sweep; the families timed on the GPU right before training, whose job starts in their shadow; the
# reference workload and the soak (both opt-in) after them: minutes of full load would heat every GPU before
# the suite's timed figures; the fabric's second reading last, after every probe that moved data over the network.
FAMILIES: tuple[Family[Any], ...] = (
    CONNECTIVITY, HEALTH, DRIFT, STORAGE, COMPUTE, COLLECTIVES, INTERNODE, TRAINING, LLAMA8B, SOAK, FABRIC
)  # fmt: skip
BY_NAME: Mapping[str, Family[Any]] = {f.name: f for f in FAMILIES}
WORKER_PROBES = frozenset(p for f in FAMILIES for p in f.in_worker)
PROBES = tuple(dict.fromkeys(p for f in FAMILIES for p in f.probes))


def family_named(name: str) -> Family[Any] | None:
    return BY_NAME.get(name)


def family_of_module(module: str) -> Family[Any] | None:
    """The family whose test module is ``module`` (a file's stem, ``test_collectives``), else None."""
    return next((f for f in FAMILIES if f.module == module), None)


def family_of_probe(probe: str) -> Family[Any] | None:
    """The family that runs the probe ``probe`` (``collectives``, ``isolation``), else None."""
    return next((f for f in FAMILIES if probe in f.probes), None)


def family_of_metric(metric: str) -> Family[Any] | None:
    return BY_NAME.get(metric.split(".", 1)[0])
