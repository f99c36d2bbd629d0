"""A staged job's gate, between the plugin that starts the job ahead of its turn and the job's ranks.

The plugin starts a job while another probe still has the node (``acceptance.run.launcher.stage``), with
``gate`` in its spec: the path of a file in the job's folder. Each rank imports what its probe needs and
waits for the file (``acceptance.probes.rank.wait_at_gate``), touching no GPU and joining no process group
until it reads GO; CANCEL tells it the run ended without the job. The file is written atomically, once.
"""

from __future__ import annotations

GATE = "gate"  # the file's name in the job's folder
GO, CANCEL = "go", "cancel"
POLL_S = 0.02  # how often a waiting rank looks for the file: one stat, against seconds of waiting
