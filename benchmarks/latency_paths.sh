#!/usr/bin/env bash
# The collectives family on this machine's GPUs three ways: healthy, NVLink unused (NCCL_P2P_DISABLE=1: NCCL
# over host memory) and NCCL over sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), each a fresh pytest of the
# profile's standard tier sweep; then each op's latency_us, time_us and busbw per way and size, and what the
# drain list (drain.json) does about each node: its severity, category and action per reason.
# WAYS picks some (default "healthy p2p_off sockets"); PROFILE (default h200-x2) gives the bounds. Output and
# evidence (ev.tgz) in $OUT.
set -uo pipefail
: "${OUT:?set OUT to the folder whose contents come back}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
PROFILE=${PROFILE:-h200-x2}
for way in ${WAYS:-healthy p2p_off sockets}; do
  case $way in
    healthy) faults=() ;;
    p2p_off) faults=(NCCL_P2P_DISABLE=1) ;;
    sockets) faults=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1) ;;
  esac
  env ${faults[@]+"${faults[@]}"} python3 -m pytest -p no:cacheprovider --cluster-profile "$PROFILE" tests_cluster/test_collectives.py \
    --cluster-evidence "$OUT/ev-$way" > "$OUT/$way.txt" 2>&1
  echo "== $way rc=$?"
  grep -E "latency_us@|time_us@|busbw_gbps@|late_ranks|transport" "$OUT/$way.txt" | grep -v "^ " | head -40
  python3 -c 'import json, sys
try:
    found = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(print("drain list: none (a PASS writes none)"))
for node in found["nodes"]:
    print("drain list: %s: %s, %s, %s" % (node["node"], node["severity"], node["category"], node["action"]))
    for reason in node["reasons"]:
        print("  %s / %s: %s" % (reason["category"], reason["action"], reason["text"]))' "$OUT/ev-$way/drain.json"
done
cd "$OUT" && tar czf ev.tgz ev-* && rm -rf ev-*
