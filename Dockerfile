# The acceptance suite in a container: one per node (Slurm with pyxis/enroot, a Kubernetes Indexed Job,
# docker run), or one per machine for a single-node check.
#
#   docker build -t cluster-acceptance .
#   docker run --gpus all --network host --ipc host --user "$(id -u):$(id -g)" -e CLUSTER_PROFILE=h200-x2 \
#       -v "$PWD/results:/results" cluster-acceptance
#
# The base is pinned by tag: NGC's PyTorch 25.10 release (CUDA 13.0, NCCL and a torch build matched to it;
# https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/). Everything the suite needs is
# installed here, and models are built from configs, so nothing is downloaded at run time.
# BASE_IMAGE replaces it with any image whose `python` and `pip` carry torch, e.g. the CPU base that CI
# builds (deploy/container/cpu-base.Containerfile, through deploy/container/ci-container.sh):
#   docker build --build-arg BASE_IMAGE=localhost/cluster-acceptance-cpu:ci -t cluster-acceptance:cpu .
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.10-py3
FROM ${BASE_IMAGE}

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PYTHONUNBUFFERED=1

# The package with every runtime dependency (pytest, numpy, transformers, DeepSpeed, NVML), pinned where
# the suite's figures depend on the version. The image's torch stays: NGC's pip constraint file
# (PIP_CONSTRAINT) pins it, and torch>=2.4 accepts it. pip check fails the build on any conflict.
COPY pyproject.toml README.md /tmp/cluster-acceptance/
COPY acceptance /tmp/cluster-acceptance/acceptance
COPY thresholds /tmp/cluster-acceptance/thresholds
COPY tests_cluster /tmp/cluster-acceptance/tests_cluster
RUN pip install \
        "deepspeed==0.19.8" \
        "transformers==5.23.0" \
        "junit-xml==1.9" \
        "nvidia-ml-py==13.615.71" \
        "/tmp/cluster-acceptance[gpu]" \
    && pip check \
    && rm -rf /tmp/cluster-acceptance \
    && python -c "import acceptance.plugin, acceptance.suite, deepspeed, transformers, pynvml, junit_xml, numpy, pytest" \
    && cluster-acceptance --version

# Not root, and numeric (Kubernetes' runAsNonRoot can check only a number). HOME is writable by any user
# id, so `docker run --user "$(id -u):$(id -g)"` (evidence owned by the host user of the mounted folder)
# finds a place for DeepSpeed's and Triton's caches.
RUN groupadd --gid 10001 acceptance \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/acceptance --shell /bin/bash acceptance \
    && chmod 1777 /home/acceptance \
    && mkdir -p /results \
    && chown 10001:10001 /results
ENV HOME=/home/acceptance
USER 10001:10001
WORKDIR /home/acceptance

# Each run's evidence (evidence.json, junit-<host>.xml, per-probe logs) goes to /results/<run id>, the run
# id being CLUSTER_RUN_ID or the time and host: mount a host folder or a volume here.
VOLUME ["/results"]
ENV CLUSTER_EVIDENCE=/results

# The profile comes from CLUSTER_PROFILE (required); arguments after the image name go to pytest,
# e.g. `-k connectivity` or `--cluster-set collectives.sizes=[1G]`.
ENTRYPOINT ["python", "-m", "acceptance.cli.container"]
