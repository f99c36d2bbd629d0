#!/bin/bash
# A real Slurm on this one machine, to run the batch scripts as a cluster would: Debian's slurm-wlm and
# munge, one slurmctld and two slurmd (NodeNames c1 and c2 on distinct ports, `slurmd -N`), all with a
# private configuration, munge socket and state under a temporary folder. It submits
#   acceptance.sbatch             (one pytest per node)   on 1 and on 2 nodes
#   acceptance-controller.sbatch  (one pytest, srun)      on 1 and on 2 nodes
# with the local-cpu profile, from a folder outside the checkout, and requires for each job: exit 0,
# evidence complete with verdict PASS for the job's node count, node-labelled output, and nothing new
# in the checkout. Each node has four GPUs as Slurm's GRES sees them (device files of its own: no GPU is
# needed to hand them out), and acceptance.sbatch runs once more with two of c1's four (--gres=gpu:2): the
# job's share, which its evidence must name (CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS) while it passes and
# drains nothing. Then it sets deploy/slurm/prolog.sh as the Prolog: a job on c1 runs after its quick
# tier passes, with CLUSTER_PROFILE unset and under a GPU profile on this CPU-only torch (the install's
# fault, not the node's) it runs too and no node is drained; c2's quick tier fails, Slurm drains c2 with
# the run's reason, and c2 is resumed by hand.
# Every daemon it started is stopped on exit, whatever happened.
#
#   deploy/slurm/ci-slurm.sh [SCRIPT-DIR]       (root; SCRIPT-DIR defaults to this script's folder)
#
# Variables: VENV, the environment with the package installed (default: the python3 on PATH's);
# CI_SLURM_KEEP=1 keeps the temporary folder (logs, evidence) for a look afterwards; CI_SLURM_ONLY=prolog
# (or share) runs that check alone.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
scripts="$(realpath "${1:-$here}")"
checkout="$(cd "$here/../.." && pwd)"
python="$(command -v "${VENV:+$VENV/bin/}python3")"
VENV="${VENV:-$("$python" -c 'import sys; print(sys.prefix)')}"
say() { echo "ci-slurm: $*"; }
fail() { echo "ci-slurm: FAIL: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || fail "run me as root: I install packages and start slurmd, which launches the jobs"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

work="$(mktemp -d /tmp/ci-slurm.XXXXXX)"
chmod 755 "$work"  # munged wants every folder above its socket searchable by all
pids=()
stop() {
    local status=$?
    # the jobs first, until Slurm has seen them end (their steps answer to the slurmd), then the daemons
    if [[ -n "${SLURM_CONF:-}" ]] && (( ${#pids[@]} > 2 )); then
        scancel --quiet --full --partition=ci 2>/dev/null || true
        for _ in {1..90}; do [[ -z "$(squeue -h --partition=ci 2>/dev/null)" ]] && break; sleep 1; done
    fi
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in {1..50}; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null || true
    done
    if (( status != 0 )); then
        for log in "$work"/*.log; do echo "--- $log (last lines)"; tail -n 20 "$log"; done >&2
    fi
    if [[ "${CI_SLURM_KEEP:-}" == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
    exit "$status"
}
trap stop EXIT
trap 'exit 130' INT TERM

free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pid_of() { for _ in {1..50}; do [[ -s "$1" ]] && { cat "$1"; return; }; sleep 0.2; done; fail "no pid file $1"; }

mungekey -c -k "$work/munge.key"
munged --socket="$work/munge.sock" --key-file="$work/munge.key" --pid-file="$work/munged.pid" \
    --log-file="$work/munged.log" --seed-file="$work/munged.seed"
pids+=("$(pid_of "$work/munged.pid")")

host="$(hostname)"
cpus="$(nproc)"
mkdir -p "$work/state" "$work/spool/c1" "$work/spool/c2" "$work/dev"
# four GPUs a node for Slurm's GRES: it hands out the devices gres.conf names and sets CUDA_VISIBLE_DEVICES
# and SLURM_JOB_GPUS to the job's indices among them (gres.conf(5)). Slurm wants character devices: these
# are /dev/null's (1, 3) under other names, and no device cgroup fences them (TaskPlugin none)
for i in 0 1 2 3; do mknod "$work/dev/gpu$i" c 1 3; done
echo "Name=gpu File=$work/dev/gpu[0-3]" >"$work/gres.conf"
cat >"$work/slurm.conf" <<EOF
ClusterName=ci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge.sock
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName=c1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$cpus Gres=gpu:4 State=UNKNOWN
NodeName=c2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$cpus Gres=gpu:4 State=UNKNOWN
PartitionName=ci Nodes=c1,c2 Default=YES MaxTime=60 State=UP
EOF
export SLURM_CONF="$work/slurm.conf"
slurmctld
pids+=("$(pid_of "$work/slurmctld.pid")")
for node in c1 c2; do
    slurmd -N "$node"
    pids+=("$(pid_of "$work/slurmd-$node.pid")")
done
for _ in {1..60}; do
    [[ "$(sinfo -h -o '%T' -n c1,c2 | sort -u)" == idle ]] && break
    sleep 1
done
[[ "$(sinfo -h -o '%T' -n c1,c2 | sort -u)" == idle ]] || fail "the nodes did not come up: $(sinfo -h -N)"
say "slurmctld and slurmd c1, c2 up: $(sinfo -h -o '%P %D %T %N')"

# the checkout must not change: every file a job writes goes to its working directory under $work
before="$(git -C "$checkout" status --porcelain --untracked-files=all 2>/dev/null || true)"
# both "nodes" are this machine: the rendezvous head is its loopback address, not the name c1
export MASTER_ADDR=127.0.0.1 VENV CLUSTER_PROFILE=local-cpu
unset CLUSTER_RUN_ID NNODES NODE_RANK

# submit SCRIPT on NODES nodes, wait for it, and check what it left: JOB=<id> on success
submit() {
    local script="$1" nodes="$2" dir="$work/job-${1%.sbatch}-$2${3:+-share}"
    mkdir -p "$dir"
    local set=() exclusive=() share=()
    # a third argument: the job holds two of c1's four GPUs (GRES), not the whole node
    [[ -n "${3:-}" ]] && share=(--nodelist=c1 --gres=gpu:2)
    # local-cpu is a one-node profile of two ranks on two cores, which its scaling bound assumes; the two
    # "nodes" share this machine's cores, so one rank each. One rank per node has no link inside a node, so
    # its p2p bound (links inside a node) is dropped rather than left unchecked (a FAIL); the rails between
    # the nodes are the internode family's. --exclusive is optional: the two-node jobs use it.
    if (( nodes > 1 )); then
        set=(--cluster-set topology.nodes="$nodes" --cluster-set topology.ranks_per_node=1)
        set+=(--cluster-set thresholds.connectivity.p2p_min_gbps=null)
        exclusive=(--exclusive)
    fi
    say "sbatch --nodes=$nodes $script"
    local start=$SECONDS status=0
    # in the background: bash runs a trap (Ctrl-C, a CI cancel) only once its foreground command returns
    MASTER_PORT="$(free_port)" PYTEST_ARGS="${set[*]}" \
        sbatch --wait --parsable --chdir="$dir" --nodes="$nodes" "${exclusive[@]}" "${share[@]}" --time=30 \
        "$scripts/$script" >"$dir/job-id" &
    wait $! || status=$?
    JOB="$(cut -d';' -f1 "$dir/job-id")"
    [[ -n "$JOB" ]] || fail "sbatch refused $scripts/$script on $nodes node(s) (exit $status)"
    local out
    out="$(compgen -G "$dir/*-$JOB.out")" || fail "$script on $nodes node(s): no job output in $dir"
    say "job $JOB ended with status $status after $((SECONDS - start)) s; its output: $out"
    if (( status != 0 )); then tail -n 40 "$out" >&2; fail "$script on $nodes node(s): job $JOB failed"; fi
    check "$script" "$nodes" "$dir/acceptance-results/slurm-$JOB" "$out"
    [[ -n "${3:-}" ]] && share_check "$dir/acceptance-results/slurm-$JOB"
    return 0
}

# a job's share of its node: the evidence names the GPUs Slurm gave it, and nothing is drained
share_check() {
    "$python" - "$1" <<'PY' || fail "the job with two of c1's GPUs: evidence"
import json
import sys
from pathlib import Path

run = Path(sys.argv[1])
env = json.loads((run / "evidence.json").read_text())["cluster"]["env"]
given = {k: env.get(k) for k in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS")}
print(f"  {run}: the job's GPUs in its evidence: {given}; drain.json: {(run / 'drain.json').exists()}")
if given != {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_GPUS": "0,1"}:
    sys.exit(f"{run}: expected the job's two GPUs 0,1 by CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS, found {given}")
if (run / "drain.json").exists():
    sys.exit(f"{run}: a passing job's share of a node wrote a drain list")
PY
}

# the evidence of a job: PASS, complete, the job's node count; per node when one pytest ran per node
check() {
    local script="$1" nodes="$2" run_dir="$3" out="$4"
    local files=("$run_dir/evidence.json")
    if [[ "$script" == acceptance.sbatch && "$nodes" -gt 1 ]]; then
        files=("$run_dir"/node0-*/evidence.json "$run_dir"/node1-*/evidence.json)
        # srun --label: every line of node R's pytest begins with "R: "
        for r in 0 1; do grep -q "^ *$r: .*verdict: PASS" "$out" || fail "$out: no line of node $r's verdict"; done
    elif (( nodes > 1 )); then
        # the probes' srun --label: node 1's torchrun agent speaks in its probe's log with "1: " first
        grep -q "^ *1: " "$run_dir"/probes/*/torchrun.log || fail "$run_dir/probes: no line labelled with node 1"
    fi
    grep -q "^cluster evidence: ${files[0]}$" "$out" || fail "$out: the cluster evidence is not named as ${files[0]}"
    "$python" - "$nodes" "${files[@]}" <<'PY' || fail "$script on $nodes node(s): evidence"
import json
import sys

nodes = int(sys.argv[1])
for path in sys.argv[2:]:
    data = json.load(open(path))
    found = (data["complete"], data["verdict"], data["topology"]["nodes"])
    print(f"  {path}: complete={found[0]} verdict={found[1]} nodes={found[2]}")
    if found != (True, "PASS", nodes):
        sys.exit(f"{path}: expected complete, PASS on {nodes} node(s)")
PY
}

# a job on c1 whose prolog the file $work/FLAG steers into a case that is no fault of the node: the prolog
# says REVIEW, the job runs, and c1 stays idle
review_job() {
    local flag="$1" what="$2" status=0 dir="$work/job-prolog" line
    say "a job on c1 with $what"
    touch "$work/$flag"
    sbatch --wait --parsable --chdir="$dir" --nodelist=c1 --time=5 --wrap true >"$dir/c1-$flag-job" &
    wait $! || status=$?
    rm -f "$work/$flag"
    (( status == 0 )) || fail "the job on c1 ($what) ended with status $status"
    [[ "$(sinfo -h -N -n c1 -o '%T')" == idle ]] || fail "c1 was drained ($what): $(sinfo -h -N -n c1 -o '%N %T %E')"
    line="$(grep -h 'quick on c1' "$results/verdicts.log" | tail -n 1)"
    [[ "$line" == *REVIEW* ]] || fail "the prolog ($what) did not say REVIEW: $line"
    say "c1 with $what: job ran, node $(sinfo -h -N -n c1 -o '%T'); ${line:0:220}"
}

# the Prolog: node c1 runs the quick tier and its job runs; node c2 is held to a bound no node meets (its
# p2p figure against 1,000,000 GB/s), so its prolog fails: slurmd drains it with the run's reason, and the
# test resumes it by hand, as an operator would after the repair
prolog_check() {
    local results="$work/prolog-results" port
    port="$(free_port)"
    mkdir -p "$results"
    cat >"$work/unmeetable.yaml" <<YAML
name: unmeetable
extends: local-cpu
thresholds:
  connectivity.p2p_min_gbps: {min: 1000000, source: "no node meets it: the prolog's failing case"}
YAML
    # slurmd runs the prolog with Slurm's variables only: the wrapper gives it the rest
    cat >"$work/prolog" <<WRAP
#!/bin/bash
profile=local-cpu
[[ "\$SLURMD_NODENAME" == c2 ]] && profile="$work/unmeetable.yaml"
[[ -e "$work/no-profile" ]] && profile=""
[[ -e "$work/gpu-profile" ]] && profile=h100-x1
exec env PATH="$PATH" VENV="$VENV" RESULTS="$results" CLUSTER_PROFILE="\$profile" MASTER_PORT="$port" \\
    MASTER_ADDR=127.0.0.1 "$scripts/prolog.sh"
WRAP
    chmod 755 "$work/prolog"
    echo "Prolog=$work/prolog" >>"$SLURM_CONF"
    scontrol reconfigure
    sleep 2
    say "Prolog=$work/prolog (deploy/slurm/prolog.sh): a job on c1"
    local dir="$work/job-prolog" status=0
    mkdir -p "$dir"
    sbatch --wait --parsable --chdir="$dir" --nodelist=c1 --time=5 --wrap true >"$dir/c1-job" &
    wait $! || status=$?
    (( status == 0 )) || fail "the job on c1 (prolog passing) ended with status $status: $(tail -n 3 "$results"/*c1.log)"
    say "c1: job $(cat "$dir/c1-job") ran; its node: $(sinfo -h -N -n c1 -o '%N %T')"
    # a missing setting is the operator's to fix, never a node fault: the prolog says REVIEW, exits 0, the
    # job runs and no node is drained
    review_job no-profile "CLUSTER_PROFILE unset for its prolog"
    # a GPU profile on this machine's CPU-only torch: the suite's install is wrong, the node is not
    review_job gpu-profile "a GPU profile (h100-x1) for its prolog, on a CPU-only torch"
    say "a job on c2, whose prolog fails"
    local job state=""
    job="$(sbatch --parsable --chdir="$dir" --nodelist=c2 --time=5 --wrap true)"
    # draining while its prolog runs (the run drains it with its reason), drained once the prolog failed
    for _ in {1..120}; do
        state="$(sinfo -h -N -n c2 -o '%T')"
        [[ "$state" == drained ]] && break
        sleep 1
    done
    [[ "$state" == drained ]] || fail "c2 was not drained after its prolog failed: $(sinfo -h -N -n c2 -o '%N %T %E')"
    local reason
    reason="$(sinfo -h -N -n c2 -o '%E')"
    say "c2 after its prolog: $(sinfo -h -N -n c2 -o '%T'); reason: $reason"
    say "the prolog's line: $(grep -h 'quick on c2' "$results/verdicts.log" | tail -n 1)"
    [[ "$reason" == *connectivity.p2p_min_gbps* ]] || fail "c2's drain reason does not name the failing figure: $reason"
    compgen -G "$results/*-c2/drain.json" >/dev/null || fail "no drain list in $results for c2"
    scancel "$job"
    scontrol update nodename=c2 state=resume
    for _ in {1..30}; do [[ "$(sinfo -h -N -n c2 -o '%T')" == idle ]] && break; sleep 1; done
    [[ "$(sinfo -h -N -n c2 -o '%T')" == idle ]] || fail "c2 did not come back after resume: $(sinfo -h -N -n c2)"
    say "c2 resumed by hand (scontrol update nodename=c2 state=resume): $(sinfo -h -N -n c2 -o '%N %T')"
    sed -i '/^Prolog=/d' "$SLURM_CONF"
    scontrol reconfigure
}

if [[ -z "${CI_SLURM_ONLY:-}" ]]; then
    for script in acceptance.sbatch acceptance-controller.sbatch; do
        for nodes in 1 2; do submit "$script" "$nodes"; done
    done
fi
[[ -z "${CI_SLURM_ONLY:-}" || "${CI_SLURM_ONLY:-}" == share ]] && submit acceptance.sbatch 1 share
[[ -z "${CI_SLURM_ONLY:-}" || "${CI_SLURM_ONLY:-}" == prolog ]] && prolog_check
after="$(git -C "$checkout" status --porcelain --untracked-files=all 2>/dev/null || true)"
[[ "$before" == "$after" ]] || fail "the jobs changed the checkout: $(diff <(echo "$before") <(echo "$after"))"
say "PASS: both batch scripts on 1 and 2 nodes and on two of a node's four GPUs; the prolog drained a failing node with its reason, and no node for a missing setting or a CPU-only install"
