"""A staged job's gate, between the plugin that starts the job ahead of its turn and the job's ranks.

The plugin starts a job while other probes still have the node (``acceptance.run.launcher.stage``), with
``gate`` in its spec: the path of a file in the job's folder. Each rank starts (torchrun, ``import torch``)
and waits for the file (``acceptance.probes.rank.wait_at_gate``), touching no GPU and joining no process
group: IMPORT lets it import what its probe needs (the probes then running are timed on the GPU's clock,
which imports on the host cannot move), after which it waits again; GO (the node is free) lets it go on,
importing first if it had not; CANCEL tells it the run ended without the job. Each word is written
atomically; the plugin's replace the one before, and a probe's IMPORT (``rank.let_staged_import``) is
written only as the first word, never over the plugin's.
"""

from __future__ import annotations

GATE = "gate"  # the file's name in the job's folder
IMPORT, GO, CANCEL = "import", "go", "cancel"
# a rank's heartbeat phases at the gate: waiting for IMPORT, importing (what a probe timed on the host waits
# out: ``acceptance.run.staged_jobs``), then waiting for GO
WAIT_TO_IMPORT, IMPORTING, WAIT_FOR_NODE = "wait to import", "preload", "wait for the node"
POLL_S = 0.02  # how often a waiting rank looks for the file: one stat, against seconds of waiting
