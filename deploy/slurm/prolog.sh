#!/bin/bash
# Slurm Prolog: the quick tier of cluster-acceptance on this node before every job. A node that fails it
# is drained with the reason and the job is requeued elsewhere: slurmd drains a node whose Prolog exits
# non-zero (slurm.conf(5), "Prolog"), and --cluster-drain slurm first sets the node's reason to the run's
# one line (scontrol update nodename=NODE state=drain reason=...).
#
#   slurm.conf:  Prolog=/opt/cluster-acceptance/prolog.sh
#                PrologFlags=Alloc        # optional: on every node at allocation, not at the first step
#   resume:      scontrol update nodename=NODE state=resume
#
# The same script serves as Epilog (Epilog=...) and as HealthCheckProgram (HealthCheckInterval=...): it
# reads only the variables below and Slurm's SLURMD_NODENAME and SLURM_JOB_ID. It prints one line (the
# verdict, and the reason on a FAIL); the whole output goes to a log beside the evidence.
#
# Variables (set them in slurmd's environment, e.g. a systemd drop-in, or edit the defaults here):
#   CLUSTER_PROFILE   required: the profile (name or YAML path) this node is checked against
#   VENV              the virtual environment with cluster-acceptance installed (default /opt/cluster-acceptance/venv)
#   RESULTS           where each run's evidence and log go (default /var/lib/cluster-acceptance/prolog)
#   CLUSTER_DRAIN     slurm (default): drain a failing node with the reason; off: only exit non-zero
#   PROLOG_ARGS       extra pytest arguments (split on spaces), e.g. "--cluster-set compute.matmul_min_s=1"
set -uo pipefail
node="${SLURMD_NODENAME:-$(hostname -s)}"
# the line goes to standard output and to RESULTS/verdicts.log (slurmd keeps no prolog's output)
say() { echo "cluster-acceptance quick on $node: $*" | tee -a "$RESULTS/verdicts.log" 2>/dev/null || true; }
VENV="${VENV:-/opt/cluster-acceptance/venv}"
RESULTS="${RESULTS:-/var/lib/cluster-acceptance/prolog}"
[[ -n "${CLUSTER_PROFILE:-}" ]] || { say "FAIL: CLUSTER_PROFILE is not set for the prolog"; exit 4; }
export CLUSTER_DRAIN="${CLUSTER_DRAIN:-slurm}"
run="$(date -u +%Y%m%dT%H%M%SZ)-job${SLURM_JOB_ID:-none}-$node"
mkdir -p "$RESULTS" || { say "FAIL: cannot create $RESULTS"; exit 4; }
log="$RESULTS/$run.log"
read -r -a extra <<< "${PROLOG_ARGS:-}"

# one node on its own, whatever the profile's node count: the job's allocation (SLURM_JOB_NODELIST, ...)
# is not this run's topology, and the quick tier judges a node alone
status=0
CLUSTER_TIER=quick CLUSTER_EVIDENCE="$RESULTS/$run" "$VENV/bin/cluster-acceptance" run \
    --cluster-set topology.nodes=1 --cluster-nodes 1 --cluster-node-rank 0 --cluster-head 127.0.0.1 \
    -q "${extra[@]}" \
    >"$log" 2>&1 </dev/null || status=$?
verdict="$(grep -m1 '^verdict: ' "$log" || true)"
reason="$(grep -m1 '^drain: ' "$log" || true)"
if (( status == 0 )); then
    say "${verdict#verdict: }"
else
    say "FAIL (exit $status): ${reason:-${verdict:-no verdict, see $log}}; log $log"
fi
exit "$status"
