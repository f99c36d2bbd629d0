"""A figure as a family's rules give it to a test: the value to check, the lines that explain it, and what
kept it from being measured.

One type for every family's rules (probe result in, figures out), so that a test module hands each to
``check`` alike (``check(fig)``), and the run checks each alike (``ClusterRun.check``): its metric, value,
unit, detail and bound. The judge decides its verdict; a figure itself decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acceptance.schema.bounds import Threshold


@dataclass
class Figure:
    metric: str
    unit: str
    value: float = 0.0  # meaningful unless ``skip`` says why the figure does not apply (or was not measured)
    # a bound the rules derive from the run itself (the GPUs' own slowdown temperature); a profile threshold
    # of the same name wins
    bound: Threshold | None = None
    findings: list[str] = field(default_factory=list)  # one line per node, GPU, port or field that is off
    # one line per node, GPU or field that could not be read: shown in the detail after "not measured: "
    not_measured: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the figure leaves out, and why: last in the detail
    # what could not be measured, in words: the test fails with it (``check``'s ``unmeasured``), so that a
    # count over the units that did measure is no pass for those that did not; not part of the detail
    unmeasured: list[str] = field(default_factory=list)
    skip: str | None = None  # why the figure does not apply here

    @property
    def detail(self) -> str:
        return "\n".join([*self.findings, *(f"not measured: {line}" for line in self.not_measured), *self.notes])

    @property
    def unmeasured_text(self) -> str | None:
        """``unmeasured`` as the one message a test fails with; None when everything was measured."""
        return "\n".join(self.unmeasured) or None
