#!/usr/bin/env bash
# Two healthy runs compare clean, NVLink unused does not: on one 2-GPU machine, the collectives family three
# times, each a fresh pytest under the profile `cluster-acceptance init` writes for the node (or PROFILE):
#   healthy-1, healthy-2   as the machine is
#   nvlink-off             NCCL_P2P_DISABLE=1 (NVLink unused: the busbw of every collective falls, ~-93% at 1G)
# then `cluster-acceptance compare` healthy-1 -> healthy-2 and back (each must exit 0, no regression) and
# healthy-1 -> nvlink-off (must exit 1, the collectives named). Each run's output (NAME.txt, with its rc and
# wall), each comparison (compare-OLD-NEW.txt, with its rc) and the evidence (one archive, ev.tgz) go to $OUT.
set -uo pipefail
: "${OUT:?set OUT to the folder whose contents come back}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
profile=${PROFILE:-}
if [ -z "$profile" ]; then
  python3 -m acceptance.cli init --name rerun-node --output "$OUT/rerun-node.yaml" > "$OUT/init.txt" 2>&1 || exit 1
  profile=$OUT/rerun-node.yaml
fi
for name in healthy-1 healthy-2 nvlink-off; do
  extra=()
  [ "$name" = nvlink-off ] && extra=(env NCCL_P2P_DISABLE=1)
  start=$(date +%s.%N)
  timeout 300 "${extra[@]}" python3 -m pytest -p no:cacheprovider --cluster-profile "$profile" \
    tests_cluster/test_collectives.py --cluster-evidence "$OUT/ev-$name" > "$OUT/$name.txt" 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$name.txt"
  echo "== $name: $(grep -E '^verdict' "$OUT/$name.txt") $(tail -1 "$OUT/$name.txt")"
done
for pair in "healthy-1 healthy-2" "healthy-2 healthy-1" "healthy-1 nvlink-off"; do
  set -- $pair
  python3 -m acceptance.cli compare "$OUT/ev-$1" "$OUT/ev-$2" > "$OUT/compare-$1-$2.txt" 2>&1
  rc=$?
  echo "rc=$rc" >> "$OUT/compare-$1-$2.txt"
  echo "== compare $1 $2: exit $rc (want $([ "$2" = nvlink-off ] && echo 1 || echo 0))"
  sed -n '3,12p' "$OUT/compare-$1-$2.txt"
done
cd "$OUT" && tar czf ev.tgz ev-* && rm -rf ev-* && ls -la
