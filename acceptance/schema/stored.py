"""An earlier run as the regression rule reads it: its checks, its probes' results and its profile.

The evidence document (``acceptance.evidence.model.EvidenceDoc``) sits beside the profile, not below it,
so the judge and the baseline rule name the few fields they read here, as protocols: the evidence model
meets them as it is, and a test can meet them with a small record of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class StoredCheck(Protocol):
    """One figure as a run recorded it (``evidence.model.Check``)."""

    @property
    def metric(self) -> str: ...

    @property
    def value(self) -> int | float | None: ...

    @property
    def unit(self) -> str: ...

    @property
    def bound(self) -> str: ...

    @property
    def verdict(self) -> str: ...

    @property
    def threshold(self) -> Mapping[str, object] | None: ...


class StoredCase(Protocol):
    """One test of the run (``evidence.model.Case``): the checks it made."""

    @property
    def checks(self) -> Sequence[StoredCheck]: ...


class StoredProbe(Protocol):
    """One probe of the run (``evidence.model.ProbeRecord``): its result is the probe's own JSON."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def result(self) -> Mapping[str, object] | None: ...


class StoredProfile(Protocol):
    """The profile the run recorded (``evidence.model.ProfileRecord``), resolved, as JSON."""

    @property
    def resolved(self) -> Mapping[str, object]: ...


class StoredRun(Protocol):
    """A run's evidence as the regression rule reads it (``evidence.model.EvidenceDoc``)."""

    @property
    def profile(self) -> StoredProfile: ...

    @property
    def probes(self) -> Sequence[StoredProbe]: ...

    @property
    def tests(self) -> Sequence[StoredCase]: ...
