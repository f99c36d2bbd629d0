"""What of this machine the evidence may hold: an allow-list of variables, secrets masked, versions.

The environment also holds credentials, so nothing reaches the evidence unless it is named here; a
name that looks like a credential is dropped or masked even when a prefix would allow it.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping
from importlib import metadata

from acceptance.masking import is_secret, masked_text

# Only these variables reach the evidence: the environment also holds credentials.
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "NVIDIA_", "UCX_", "FI_", "OMPI_MCA_", "DS_", "PYTORCH_")
ENV_NAMES = (
    "OMP_NUM_THREADS",
    "CLUSTER_PROFILE",
    "NNODES",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "JOB_COMPLETION_INDEX",
    "CLUSTER_HEAD",
    "SLURM_JOB_ID",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_GPUS",  # a job's share of its node: the GPUs Slurm gave it
    "SLURM_GPUS_ON_NODE",
    "KUBERNETES_SERVICE_HOST",
)
PACKAGES = ("torch", "pytest", "transformers", "deepspeed", "nvidia-ml-py", "cluster-acceptance")


def allowed_env(env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables the evidence may hold; ``extra``: the profile's own secret words (``secret_names``)."""
    out, extra = {}, tuple(extra)
    for key, value in env.items():
        if is_secret(key, extra):
            continue
        if key in ENV_NAMES or key.startswith(ENV_PREFIXES):
            out[key] = masked_text(value, extra)  # an allowed name may hold a URL with its password
    return dict(sorted(out.items()))


def software() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
