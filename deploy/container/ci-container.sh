#!/usr/bin/env bash
# The Dockerfile built and run where no container registry and no Docker daemon are: Debian's podman,
# runc and mmdebstrap (root). A Debian root filesystem made by mmdebstrap, plus torch's CPU build
# (deploy/container/cpu-base.Containerfile), is the base given to the Dockerfile's BASE_IMAGE. Then, in
# the image: pip check; the local-cpu suite as the image's non-root user, its evidence in a mounted
# folder, to PASS; and two containers on the host network as the two nodes of one run, which must reach
# the same verdict, PASS.
#
#   deploy/container/ci-container.sh [OUT]      (default OUT: ci-results/container)
#
# pip in the builds reaches the index as pip does on this machine (its configuration files, PIP_*
# variables, certificates and local wheel folders, mounted for the build only: deploy/container/
# pip_settings.py); TORCH_INDEX_URL, as in .ci/run, adds an index for torch. PYTHON (default python3)
# reads those settings. Nothing of the host's settings goes into an image. DEBIAN_MIRROR: the Debian
# mirror for the base (default http://deb.debian.org/debian).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "${1:-$root/ci-results/container}"
OUT="$(cd "${1:-$root/ci-results/container}" && pwd)" # as given, from where the script was started
cd "$root"
PYTHON="${PYTHON:-python3}"
DEBIAN_IMAGE=localhost/cluster-acceptance-debian:bookworm
CPU_IMAGE=localhost/cluster-acceptance-cpu:ci
IMAGE=localhost/cluster-acceptance:ci
USER_ID=10001 # the Dockerfile's USER
step() { echo "--- container: $* (at $SECONDS s)"; }
wall() { echo "--- container: $1 took $((SECONDS - $2)) s"; }
fail() {
  echo "container: $*" >&2
  exit 1
}
[[ $EUID -eq 0 ]] || fail "run as root (podman builds and runs rootful here)"

work="$(mktemp -d)"
node_names=("acceptance-node0-$$" "acceptance-node1-$$") # this run's own: never another run's containers
cleanup() {
  podman rm --force --ignore "${node_names[@]}" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# Podman's defaults fail in a cgroup v1 sandbox (setrlimit RLIMIT_NOFILE; "cgroups in hybrid mode not
# supported"): no default ulimits, cgroupfs, and runc as the runtime
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
EOF
export CONTAINERS_CONF="$work/containers.conf"
podman() { command podman --runtime runc "$@"; }

"$PYTHON" deploy/container/pip_settings.py "$work/pip" "${TORCH_INDEX_URL:-}" >"$work/mounts"
mounts=()
while IFS= read -r mount; do mounts+=(-v "$mount"); done <"$work/mounts"

step "a Debian bookworm root filesystem (mmdebstrap), imported as $DEBIAN_IMAGE"
t=$SECONDS
# Debian's own mirror and keyring, named: on a host of another distribution (Ubuntu CI runners) mmdebstrap
# would otherwise take the host's apt sources
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-dev,g++,ca-certificates \
  --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
  bookworm "$work/debian.tar" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
podman import --quiet "$work/debian.tar" "$DEBIAN_IMAGE" >/dev/null
rm -f "$work/debian.tar"
wall "the Debian base" "$t"

step "the CPU base: torch==2.13.0 for the CPU ($CPU_IMAGE)"
t=$SECONDS
podman build --quiet --network host "${mounts[@]}" --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" \
  -f deploy/container/cpu-base.Containerfile -t "$CPU_IMAGE" deploy/container >/dev/null
wall "the CPU base" "$t"

step "the Dockerfile on that base ($IMAGE)"
t=$SECONDS
podman build --network host "${mounts[@]}" --build-arg "BASE_IMAGE=$CPU_IMAGE" -t "$IMAGE" . \
  >"$OUT/build.log" 2>&1 || {
  tail -n 40 "$OUT/build.log" >&2
  fail "podman build failed; the log: $OUT/build.log"
}
wall "the image build" "$t"
# the host's pip settings were there for the build only
podman run --rm --entrypoint sh "$IMAGE" -c 'test ! -s /etc/pip.conf' || fail "the image keeps a pip.conf"

step "pip check in the image, as its user"
podman run --rm --entrypoint python "$IMAGE" -c 'import os; assert os.getuid() == 10001, os.getuid()'
podman run --rm --entrypoint python "$IMAGE" -m pip check

# the image's user writes the evidence, a cache shared by the runs (DeepSpeed's CPU op is compiled once,
# as .ci/run does for its environment) and a temporary folder the two nodes share as one machine's
for dir in cache tmp one node0 node1; do install -d -m 0755 -o "$USER_ID" -g "$USER_ID" "$OUT/$dir"; done
chmod 1777 "$OUT/tmp"
run_args=(--rm --network host --ipc host -v "$OUT/cache:/home/acceptance/.cache" -v "$OUT/tmp:/tmp")
run_args+=(-e CLUSTER_PROFILE=local-cpu -e OMP_NUM_THREADS=1)

step "DeepSpeed's CPU op, compiled once into the runs' cache"
t=$SECONDS
build='from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()'
podman run "${run_args[@]}" --entrypoint python "$IMAGE" -c "$build" >"$OUT/op-build.log" 2>&1 ||
  fail "DeepSpeed's CPU op did not build: $OUT/op-build.log"
wall "the op build" "$t"

# one evidence.json: complete, the expected verdict, written by the image's user; with a node count, node
# 0's record of every node's verdict
check_evidence() {
  "$PYTHON" - "$1" "$2" "$USER_ID" "${3:-0}" <<'PY'
import json
import sys
from pathlib import Path

path, want, uid, nnodes = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
evidence = json.loads(path.read_text())
if not (evidence["complete"] and evidence["verdict"] == want):
    sys.exit(f"{path}: complete={evidence['complete']} verdict={evidence['verdict']}, expected {want}")
if path.stat().st_uid != uid:
    sys.exit(f"{path}: owned by uid {path.stat().st_uid}, not the image's user {uid}")
cluster = evidence.get("cluster") or {}
nodes = [(v["node_rank"], v["verdict"]) for v in cluster.get("node_verdicts") or []]
if nnodes and nodes != [(rank, want) for rank in range(nnodes)]:
    sys.exit(f"{path}: node verdicts {nodes}, expected {want} from each of {nnodes} nodes")
print(f"{path}: complete, {want}" + (f"; node verdicts {nodes}" if nodes else ""))
PY
}

step "the local-cpu suite in one container"
t=$SECONDS
podman run "${run_args[@]}" -v "$OUT/one:/results" -e CLUSTER_RUN_ID=one "$IMAGE" \
  --junitxml=/results/local-cpu.xml >"$OUT/one.log" 2>&1 || {
  tail -n 40 "$OUT/one.log" >&2
  fail "the local-cpu suite failed in the container: $OUT/one.log"
}
wall "the local-cpu suite in one container" "$t"
check_evidence "$OUT/one/one/evidence.json" PASS

step "the local-cpu suite on two containers as two nodes (host network)"
t=$SECONDS
port="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
node_env=(-e NNODES=2 -e MASTER_ADDR=127.0.0.1 -e "MASTER_PORT=$port" -e CLUSTER_RUN_ID=two)
# Each node a host name of its own, on an address of its own, as on two machines: torchrun's rendezvous tells
# its agents apart by host name and process id, and the two containers' process-id namespaces can give both
# agents the same pid; with one host name the rendezvous then never completes (a probe's timeout, at random).
# The loopback addresses reach this host's network, which both containers share.
hosts=(--add-host container0:127.0.0.2 --add-host container1:127.0.0.3)
pids=()
for rank in 0 1; do
  podman run "${run_args[@]}" --name "${node_names[$rank]}" --hostname "container$rank" "${hosts[@]}" \
    -v "$OUT/node$rank:/results" "${node_env[@]}" -e "NODE_RANK=$rank" "$IMAGE" --cluster-set topology.nodes=2 \
    >"$OUT/node$rank.log" 2>&1 &
  pids+=("$!")
done
status=0
for rank in 0 1; do wait "${pids[$rank]}" || status=$?; done
wall "the local-cpu suite on two containers" "$t"
if [[ $status -ne 0 ]]; then
  tail -n 30 "$OUT/node0.log" "$OUT/node1.log" >&2
  fail "the two-node run failed (exit $status): $OUT/node0.log, $OUT/node1.log"
fi
# each node's evidence in a folder of its own, node<rank>-<host>; node 0's holds every node's verdict
node0=("$OUT"/node0/two/node0-*/evidence.json)
node1=("$OUT"/node1/two/node1-*/evidence.json)
check_evidence "${node0[0]}" PASS 2
check_evidence "${node1[0]}" PASS
# and one evidence file for the cluster, whose verdict is PASS only if every node's is (exit 1 otherwise)
"$PYTHON" -m acceptance.cli.main merge "${node0[0]}" "${node1[0]}" -o "$OUT/two-nodes.json"
step "done"
