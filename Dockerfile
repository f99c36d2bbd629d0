# The acceptance suite in a container: one per node (Slurm with pyxis/enroot, a Kubernetes Indexed Job,
# docker run), or one per machine for a single-node check.
#
#   docker build -t cluster-acceptance .
#   docker run --gpus all --network host --ipc host -e CLUSTER_PROFILE=h200-x2 \
#       -v "$PWD/results:/results" cluster-acceptance
#
# The base is pinned by tag: NGC's PyTorch 25.10 release (CUDA 13.0, NCCL and a torch build matched to it;
# https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/). Everything the suite needs is
# installed here, and models are built from configs, so nothing is downloaded at run time.
FROM nvcr.io/nvidia/pytorch:25.10-py3

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PYTHONUNBUFFERED=1

# The image's torch stays: its pip constraint file pins it, and --no-deps below keeps it untouched.
RUN pip install \
        "deepspeed==0.19.8" \
        "transformers==5.23.0" \
        "junit-xml==1.9" \
        "nvidia-ml-py==13.615.71" \
        "pydantic>=2.6,<3" \
        "pyyaml>=6"

WORKDIR /opt/cluster-acceptance
COPY pyproject.toml README.md conftest.py ./
COPY acceptance ./acceptance
COPY thresholds ./thresholds
COPY tests_cluster ./tests_cluster
RUN pip install --no-deps . && python -c "import acceptance.plugin, deepspeed, transformers, pynvml, junit_xml"

# Evidence (evidence.json, junit-<host>.xml, per-probe logs) goes here: mount a host folder or a volume.
VOLUME ["/results"]
ENV CLUSTER_EVIDENCE=/results \
    CLUSTER_TESTS=/opt/cluster-acceptance/tests_cluster

# The profile comes from CLUSTER_PROFILE (required); arguments after the image name go to pytest,
# e.g. `-k connectivity` or `--cluster-set collectives.sizes=[1G]`.
ENTRYPOINT ["python", "-m", "acceptance.cli.container"]
