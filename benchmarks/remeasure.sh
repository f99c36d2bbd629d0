#!/usr/bin/env bash
# H100: the per-GPU speed tests with a host-to-device bound no link reaches (the re-measure must run and
# fail with both readings), then the default suite at this code
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
cat > /tmp/h100-high.yaml <<'YAML'
name: h100-x1-unreachable-h2d
extends: h100-x1
thresholds:
  compute.h2d_gbps_min: {min: 70, source: "above what PCIe Gen5 x16 moves: the re-measure must run and fail"}
YAML
timeout 200 python3 -m pytest -p no:cacheprovider --cluster-profile /tmp/h100-high.yaml tests_cluster/test_compute.py --cluster-evidence $OUT/high > $OUT/high.txt 2>&1
echo "rc=$?" >> $OUT/high.txt
grep -E "^\[cluster\]|measured|h2d|d2h|passed|failed|rc=" $OUT/high.txt | head -30
start=$(date +%s.%N)
timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile h100-x1 tests_cluster/ --cluster-evidence $OUT/h100-x1-run1 > $OUT/suite1.txt 2>&1
echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> $OUT/suite1.txt
grep -E "^\[cluster\]" $OUT/suite1.txt; tail -2 $OUT/suite1.txt
python3 -m acceptance.cli.walls $OUT/h100-x1-run1 > $OUT/walls1.txt; cat $OUT/walls1.txt
cd $OUT && tar czf ev.tgz high h100-x1-run1 && rm -rf high h100-x1-run1 && ls -la
