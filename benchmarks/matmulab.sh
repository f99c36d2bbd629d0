#!/usr/bin/env bash
# h100-x1: the per-GPU speed tests three times each, alternating the shipped matmul loop (.gpu/old, 100 calls)
# with the loop of at least compute.matmul_min_s (this tree), then this tree's default suite once
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
here=$PWD
for n in 1 2 3; do
  for v in old new; do
    if [ $v = old ]; then cd $here/.gpu/old; else cd $here; fi
    start=$(date +%s.%N)
    PYTHONPATH=/tmp/site:$PWD timeout 120 python3 -m pytest -p no:cacheprovider --cluster-profile h100-x1 tests_cluster/test_compute.py --cluster-evidence $OUT/$v-$n > $OUT/$v-$n.txt 2>&1
    echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> $OUT/$v-$n.txt
    echo "$v-$n: $(grep -E '^\[cluster\] compute' $OUT/$v-$n.txt | tr '\n' ' ') $(tail -1 $OUT/$v-$n.txt)"
    grep -E "compute.matmul_tflops_min|compute.fp8_tflops_min" $OUT/$v-$n.txt | head -2
  done
done
cd $here
export PYTHONPATH=/tmp/site:$PWD
start=$(date +%s.%N)
timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile h100-x1 tests_cluster/ --cluster-evidence $OUT/suite > $OUT/suite.txt 2>&1
echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> $OUT/suite.txt
grep -E "^\[cluster\]" $OUT/suite.txt | tail -12; tail -3 $OUT/suite.txt
python3 -m acceptance.cli.walls $OUT/suite > $OUT/walls.txt; cat $OUT/walls.txt
cd $OUT && tar czf ev.tgz old-* new-* suite && rm -rf old-? new-? suite && ls -la
