"""Jobs started ahead of their turn (``launcher.stage``), by probe key, until their run takes them.

A probe that runs as a job of its own pays torchrun's start and its ranks' imports before it measures
anything: 10-18 s to start the training job's ranks and import torch on a fresh 2x or 4x H200, then 14-16 s
of transformers, DeepSpeed and TorchInductor. Started at the session's start, a job does that work in the
shadow of the probes that its imports cannot move and waits at its gate (``acceptance.families.staging``);
the run that reaches its key opens the gate once the node is free (``Executor.launch``). Only on one node
under torchrun: each job there gets a free port of its own (``--standalone``), where several nodes would
meet at one rendezvous port that the running job still holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from acceptance.families import staging
from acceptance.run import diagnose
from acceptance.run import launcher as launch


@dataclass
class StagedJob:
    seq: int  # its number in the session: its folder's prefix
    spec: Mapping[str, object]
    job: launch.Staged


class StagedJobs:
    def __init__(self) -> None:
        self.jobs: dict[str, StagedJob] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.jobs

    def add(self, key: str, seq: int, spec: Mapping[str, object], job: launch.Staged) -> None:
        self.jobs[key] = StagedJob(seq, spec, job)

    def match(self, key: str, spec: Mapping[str, object], as_staged: bool) -> StagedJob | None:
        """The job staged for ``key``, when the run asks for this spec and ``as_staged`` (the whole world,
        no variables of its own, as every job is staged): its gate opens on it, and it stays here, cancelled
        at the end, until ``take``. One staged for another run is cancelled now, and a fresh job starts."""
        found = self.jobs.get(key)
        if found is not None and (found.spec != spec or not as_staged):
            launch.cancel(self.jobs.pop(key).job)
            return None
        return found

    def take(self, key: str) -> StagedJob:
        """Hand the job to the run that opens its gate (``launcher.run``), which ends it from then on."""
        return self.jobs.pop(key)

    def gate(self, key: str) -> Path | None:
        """The gate of the job staged for ``key`` (``staging.GATE`` in its folder), else None."""
        found = self.jobs.get(key)
        return None if found is None else found.job.out_dir / staging.GATE

    def wait_for_imports(self, ranks: int, limit_s: float) -> float:
        """Wait until no rank of a staged job is starting or importing (each of its ``ranks`` waits at its gate
        with no word to act on, or the job has ended), at most ``limit_s``: a probe whose figures the host's
        activity moves then runs on a quiet host. The seconds waited."""
        start = time.monotonic()
        while not all(_imported(found.job, ranks) for found in self.jobs.values()):
            if time.monotonic() - start >= limit_s:
                break
            time.sleep(staging.POLL_S)
        return time.monotonic() - start

    def cancel_all(self) -> None:
        """The session is over: end every job no run took (each exits at its gate)."""
        while self.jobs:
            launch.cancel(self.jobs.popitem()[1].job)


def staged_s(staged: StagedJob | None) -> float | None:
    """How long a staged job had imported and waited when its gate opened; None for a job started at its turn."""
    opened = staged.job.opened if staged is not None else None
    return None if staged is None or opened is None else round(opened - staged.job.started, 3)


def _imported(job: launch.Staged, ranks: int) -> bool:
    """Whether each of the job's ``ranks`` has a heartbeat and is not importing, nor about to (waiting to
    import while its gate already says IMPORT or GO), or the job ended."""
    if job.proc.poll() is not None:
        return True
    busy = {staging.IMPORTING}
    if launch.gate_word(job) in (staging.IMPORT, staging.GO):
        busy.add(staging.WAIT_TO_IMPORT)
    states = diagnose.rank_states(job.out_dir)
    return len(states) >= ranks and all(state.get("phase") not in busy for state in states)
