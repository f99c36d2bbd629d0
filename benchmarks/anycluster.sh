#!/usr/bin/env bash
# A node judged out of the box: `cluster-acceptance init` on this node (no shipped profile fits it), then the
# default suite under the profile it wrote, in the steps named, in order:
#   healthy  the node as it is
#   p2poff   NCCL_P2P_DISABLE=1 (NVLink unused: NCCL goes through host memory)
#   shmoff   NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (sockets)
#   compare  `cluster-acceptance compare` of healthy against p2poff (exit 1 expected, naming the collectives)
# e.g. `benchmarks/anycluster.sh healthy p2poff` then `benchmarks/anycluster.sh shmoff compare` (NAME, default x4).
[ -n "${OUT:-}" ] || { echo "OUT: name an empty folder for what the runs write" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site:$PWD
NAME=${NAME:-x4}
ca() { python3 -m acceptance.cli.main "$@"; }
nvidia-smi -L
[ -f "thresholds/$NAME.yaml" ] || { ca init --name "$NAME" > "$OUT/init.txt" 2>&1; cp "thresholds/$NAME.yaml" "$OUT/"; }
suite() {  # NAME [VAR=VALUE...]: the default suite under the profile init wrote
  local step=$1 start; shift; start=$(date +%s.%N)
  env "$@" timeout 400 python3 -m pytest -p no:cacheprovider --cluster-profile "$NAME" tests_cluster/ \
    --cluster-evidence "$OUT/$step" > "$OUT/$step.txt" 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$step.txt"
  echo "== $step ($*): $(tail -1 "$OUT/$step.txt")"
  grep -E "^(connectivity|health|drift|storage|compute|collectives|internode|training|soak|fabric) |^checks:|^verdict:|^drain" "$OUT/$step.txt"
  grep -E "^FAILED" "$OUT/$step.txt" | head -12
  grep -E -A3 "transport_mismatches" "$OUT/$step.txt" | head -12
}
for step in "$@"; do
  case $step in
    healthy) suite healthy ;;
    p2poff) suite p2poff NCCL_P2P_DISABLE=1 ;;
    shmoff) suite shmoff NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 ;;
    compare) ca compare "$OUT/healthy" "$OUT/p2poff" > "$OUT/compare.txt" 2>&1; echo "== compare rc=$?"
             head -40 "$OUT/compare.txt" ;;
  esac
done
cd "$OUT" && tar czf "any-$*.tgz" --exclude='*.tgz' ./* 2>/dev/null; ls
