#!/usr/bin/env bash
# The collectives family on this machine's GPUs three ways: healthy, NVLink unused (NCCL_P2P_DISABLE=1: NCCL
# over host memory) and NCCL over sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), each a fresh pytest of the
# profile's standard tier sweep; then each op's latency_us, time_us and busbw per way and size.
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
done
cd "$OUT" && tar czf ev.tgz ev-* && rm -rf ev-*
