"""The reference workload's job (``acceptance.families.llama8b``): the training probe's run on the spec the
family writes (Llama-3.1-8B's shape, its layers, FSDP2 and ZeRO-3), under a name of its own so that its
timeout, its evidence and its jobs' keys are the family's."""

from __future__ import annotations

from acceptance.probes.rank import main
from acceptance.probes.train_strategies import preload
from acceptance.probes.training import run

if __name__ == "__main__":
    main(run, preload=preload)
