#!/bin/bash
# Slurm Prolog: the quick tier of cluster-acceptance on this node before every job. A node that fails it
# for a fault of its own (its hardware, fabric or configuration: drain.json's entries with node_fault) is
# drained with the reason and the job is requeued elsewhere: slurmd drains a node whose Prolog exits
# non-zero (slurm.conf(5), "Prolog"), and --cluster-drain slurm first sets the node's reason to the run's
# one line (scontrol update nodename=NODE state=drain reason=...).
#
# Anything else exits 0 with a REVIEW line and the job runs: a setting missing here (CLUSTER_PROFILE), the
# suite's own install (a CPU-only torch under a GPU profile), its options or time limits, a run that could
# not finish. Those are the same on every node: drained for them, one broken image or one missing
# variable would drain every node of the cluster.
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
# a setting missing is no fault of the node: say so (slurmd logs it) and let the job run
[[ -n "${CLUSTER_PROFILE:-}" ]] || { say "REVIEW: CLUSTER_PROFILE is not set for the prolog; node not checked"; exit 0; }
export CLUSTER_DRAIN="${CLUSTER_DRAIN:-slurm}"
run="$(date -u +%Y%m%dT%H%M%SZ)-job${SLURM_JOB_ID:-none}-$node"
mkdir -p "$RESULTS" || { say "REVIEW: cannot create $RESULTS; node not checked"; exit 0; }
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
# the node's own faults: the entries drain.json drains (severity drain, node_fault true); none readable: none
faults="$("$VENV/bin/python" -c 'import json, sys
print(sum(n.get("severity") == "drain" for n in json.load(open(sys.argv[1])).get("nodes", [])))' \
    "$RESULTS/$run/drain.json" 2>/dev/null || echo 0)"
if (( status == 0 )); then
    say "${verdict#verdict: }"
elif [[ "$faults" =~ ^[1-9] ]]; then
    reason="$(grep -m1 -E '^drain: [^ ]+( GPU [0-9, ]+)? \(drain\): ' "$log" || true)"
    say "FAIL (exit $status): ${reason:-${verdict:-no verdict, see $log}}; log $log"
    exit "$status"
else
    reason="$(grep -m1 '^drain: ' "$log" || true)"
    say "REVIEW (exit $status, no fault of this node: not drained): ${reason:-${verdict:-no verdict}}; log $log"
fi
exit 0
