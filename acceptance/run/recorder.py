"""A probe's record in the evidence and its progress lines, from start to its end (ok, failed, interrupted).

Every state is written as it happens, so that evidence read during a run, or after a kill, says which
probe was running and what the failed ones had finished (``partial.json``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from acceptance.evidence.model import ProbeRecord
from acceptance.evidence.store import Evidence
from acceptance.json_types import JSONObject
from acceptance.profile.registry import family_named
from acceptance.run import launcher as launch
from acceptance.run.executor import Where
from acceptance.run.progress import read_partial
from acceptance.run.staged_jobs import staged_s


@dataclass
class Recorder:
    evidence: Evidence
    say: Callable[[str], None]

    def started(self, name: str, key: str, env: Mapping[str, str], where: Where, timeout_s: float) -> ProbeRecord:
        record = self.evidence.probe(name, key, env)
        record.out_dir = str(where.out_dir.relative_to(self.evidence.dir))
        self.evidence.write()
        ranks = f"{where.placement.nodes} node(s) x {where.topo.nproc_per_node} rank(s)"
        self.say(f"{key}: started ({name} probe on {ranks}, timeout {timeout_s:g} s)")
        return record

    def interrupted(self, record: ProbeRecord) -> None:
        """The launcher has killed the ranks; said before pytest unwinds."""
        record.status = "interrupted"
        self.evidence.write()
        self.say(f"{record.key}: interrupted")

    def failed(self, record: ProbeRecord, error: launch.ProbeError, where: Where, start: float) -> JSONObject:
        """The failure, and what its ranks finished before it (returned: the parts a caller may still use)."""
        record.staged_s = staged_s(where.staged)
        record.status, record.error, record.wall_s = "failed", str(error), round(time.monotonic() - start, 3)
        partial = read_partial(where.out_dir)
        record.result = partial
        self.evidence.write()
        self.say(f"{record.key}: failed in {record.wall_s:.1f} s (the first test of the probe says why)")
        return partial

    def finished(self, record: ProbeRecord, outcome: launch.ProbeRun, where: Where) -> None:
        record.staged_s = staged_s(where.staged)
        record.status, record.wall_s = "ok", round(outcome.wall_s, 3)
        record.argv, record.result = outcome.argv, outcome.result
        family = family_named(record.name)
        if family is not None and family.describes_nodes and outcome.result:
            self.evidence.record_nodes(outcome.result)
        self.evidence.write()
        self.say(f"{record.key}: ok in {outcome.wall_s:.1f} s")
