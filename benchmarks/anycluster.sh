#!/usr/bin/env bash
# A node judged out of the box: `cluster-acceptance init` on this node (no shipped profile fits it), then the
# default suite under the profile it wrote, in the steps named, in order:
#   healthy  the node as it is
#   p2poff   NCCL_P2P_DISABLE=1 (NVLink unused: NCCL goes through host memory)
#   shmoff   NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (sockets)
#   compare  `cluster-acceptance compare` of healthy against p2poff (exit 1 expected, naming the collectives)
#   twonode  the host as two nodes of two GPUs each (GPUs 0,1 and 2,3): init for that share (--nodes 2), then
#            the default suite on both nodes at once, with node 1 started NCCL_P2P_DISABLE=1, then healthy.
#            NCCL_HOSTID tells NCCL the two are different hosts (NCCL's utils.cc getHostHash), so that
#            traffic between them takes its network transport, as between two machines; twonode-p2poff and
#            twonode-healthy run one of the two (TWONODE_MARK: a pytest -m selection for both, e.g.
#            "connectivity or collectives or internode")
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
nodes2() {  # STEP PORT [VAR=VALUE...]: both nodes at once; the VARs for node 1 only
  local step=$1 port=$2 start; shift 2; start=$(date +%s.%N)
  local select=()
  [ -n "${TWONODE_MARK:-}" ] && select=(-m "$TWONODE_MARK")
  for rank in 0 1; do
    if [ "$rank" = 1 ]; then set1=("$@"); else set1=(); fi
    env "${set1[@]}" NNODES=2 NODE_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCL_HOSTID="node$rank" \
      CUDA_VISIBLE_DEVICES=$([ "$rank" = 0 ] && echo 0,1 || echo 2,3) timeout 400 python3 -m pytest -p no:cacheprovider \
      --cluster-profile "$NAME-2n" tests_cluster/ "${select[@]}" --cluster-evidence "$OUT/$step-n$rank" \
      > "$OUT/$step-n$rank.txt" 2>&1 &
  done
  wait
  echo "wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$step-n0.txt"
  for rank in 0 1; do
    echo "== $step node $rank ($([ "$rank" = 1 ] && echo "$*")): $(tail -1 "$OUT/$step-n$rank.txt")"
    grep -E "^(connectivity|health|drift|storage|compute|collectives|internode|training|fabric) |^checks:|^verdict:|^drain" "$OUT/$step-n$rank.txt"
    grep -E "^FAILED" "$OUT/$step-n$rank.txt" | head -12
    grep -E -A3 "transport_mismatches = [1-9]|p2p_min_gbps = " "$OUT/$step-n$rank.txt" | head -16
    [ -f "$OUT/$step-n$rank/drain.json" ] && python3 -c "import json,sys; [print('  drain.json:', n['node'], n['severity'], n.get('category'), n.get('action'), n['reasons'][0]['text'] if n.get('reasons') else '') for n in json.load(open(sys.argv[1]))['nodes']]" "$OUT/$step-n$rank/drain.json"
  done
}
for step in "$@"; do
  case $step in
    twonode)
      [ -f "thresholds/$NAME-2n.yaml" ] || { CUDA_VISIBLE_DEVICES=0,1 ca init --name "$NAME-2n" --nodes 2 > "$OUT/init-2n.txt" 2>&1
                                             cp "thresholds/$NAME-2n.yaml" "$OUT/"; cat "$OUT/init-2n.txt"; }
      nodes2 p2poff2n 29420 NCCL_P2P_DISABLE=1
      nodes2 healthy2n 29410 ;;
    twonode-p2poff)  # the faulty run alone
      [ -f "thresholds/$NAME-2n.yaml" ] || { CUDA_VISIBLE_DEVICES=0,1 ca init --name "$NAME-2n" --nodes 2 > "$OUT/init-2n.txt" 2>&1; }
      nodes2 p2poff2n 29420 NCCL_P2P_DISABLE=1 ;;
    twonode-healthy)
      [ -f "thresholds/$NAME-2n.yaml" ] || { CUDA_VISIBLE_DEVICES=0,1 ca init --name "$NAME-2n" --nodes 2 > "$OUT/init-2n.txt" 2>&1; }
      nodes2 healthy2n 29410 ;;
    healthy) suite healthy ;;
    p2poff) suite p2poff NCCL_P2P_DISABLE=1 ;;
    shmoff) suite shmoff NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 ;;
    compare) ca compare "$OUT/healthy" "$OUT/p2poff" > "$OUT/compare.txt" 2>&1; echo "== compare rc=$?"
             head -40 "$OUT/compare.txt" ;;
  esac
done
cd "$OUT" && tar czf "any-$*.tgz" --exclude='*.tgz' ./* 2>/dev/null; ls
