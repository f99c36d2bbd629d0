#!/usr/bin/env bash
# The across-nodes rules on a machine without InfiniBand, RoCE or a multi-node NVLink domain (2x H100/H200):
# what the node reads (its RDMA NICs and GPUs on the PCIe tree, the peer-memory module, NVML's fabric info: every
# H100/H200 answers NOT_SUPPORTED), then the host as two nodes of one GPU each (NCCL_HOSTID tells NCCL they are
# two hosts, so traffic between them takes its network transport) running the transport and health tests:
# expected, no finding from the new rules (transport_mismatches 0 or skipped, nvlink_fabric_degraded skipped,
# no IMEX failure in preflight).
[ -n "${OUT:-}" ] || { echo "OUT: name an empty folder for what the runs write" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
python3 - > "$OUT/node.json" <<'PY'
import json
from acceptance.probes import nvml, pcie_places, inventory
fabric = nvml.read_fabric()
buses = [g["pci_bus_id"] for g in fabric] if isinstance(fabric, list) else None
print(json.dumps({"fabric": fabric, "places": pcie_places.read(gpu_bus_ids=buses),
                  "inventory_domains": inventory.read().get("nvlink_domains")}, indent=1, default=str))
PY
cat "$OUT/node.json"
CUDA_VISIBLE_DEVICES=0 python3 -m acceptance.cli.main init --name across-2n --nodes 2 > "$OUT/init.txt" 2>&1
for rank in 0 1; do
  NNODES=2 NODE_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=29430 NCCL_HOSTID="node$rank" \
    CUDA_VISIBLE_DEVICES=$([ "$rank" = 0 ] && echo 0 || echo 1) timeout 500 python3 -m pytest \
    -p no:cacheprovider --cluster-profile across-2n tests_cluster/test_connectivity.py tests_cluster/test_health.py \
    tests_cluster/test_collectives.py -k "transport or gate or inventory" -rs \
    --cluster-evidence "$OUT/n$rank" > "$OUT/n$rank.txt" 2>&1 &
done
wait
for rank in 0 1; do
  echo "== node $rank: $(tail -1 "$OUT/n$rank.txt")"
  grep -E "transport_mismatches|nvlink_fabric_degraded|SKIPPED|FAILED|^verdict:" "$OUT/n$rank.txt" | head -20
done
cd "$OUT" && tar czf across.tgz --exclude='*.tgz' ./* 2>/dev/null; ls
