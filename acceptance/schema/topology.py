"""The profile's ``topology:``: how many nodes, ranks and GPUs a run has, on which device, backend and launcher."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from acceptance.schema.fields import PositiveInt, Strict

# the node's own rank, which the plugin hands to every probe of its node (``acceptance.run.worker_pool``):
# torchrun's GROUP_RANK is assigned anew by each rendezvous, so it cannot say which machine an isolation
# round's "node 3" is (``acceptance.probes.links``)
NODE_ENV = "ACCEPTANCE_NODE_RANK"


class Topology(Strict):
    nodes: PositiveInt = 1
    ranks_per_node: PositiveInt | None = None  # processes per node; default: gpus_per_node on cuda, 2 on cpu
    gpus_per_node: Annotated[int, Field(ge=0)] = 0
    gpu_model: str | None = None
    device: Literal["cuda", "cpu"] = "cuda"
    backend: Literal["nccl", "gloo"] = "nccl"
    launcher: Literal["torchrun", "srun"] = "torchrun"
    rdzv_port: Annotated[int, Field(gt=0, lt=65535)] = 29400  # multi-node: the nodes' store uses rdzv_port + 1
    srun_args: list[str] = []  # launcher srun: extra srun options, e.g. --gpus-per-node=8 or --container-image=...

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        if self.device == "cpu" and self.backend != "gloo":
            raise ValueError("device cpu needs backend gloo (NCCL runs on GPUs only)")
        if self.device == "cuda" and self.gpus_per_node < 1:
            raise ValueError("device cuda needs gpus_per_node >= 1")
        return self

    @property
    def nproc_per_node(self) -> int:
        if self.ranks_per_node is not None:
            return self.ranks_per_node
        return self.gpus_per_node if self.device == "cuda" else 2


def topology_of(profile: object) -> Topology:
    """The ``topology:`` of a profile model (``acceptance.profile.model.ProfileModel``, built above the
    families from their list), typed for a family's rules."""
    found = getattr(profile, "topology", None)
    assert isinstance(found, Topology), f"not a profile model: {type(profile).__name__}"
    return found
